#!/usr/bin/env bash
# The port file is made under a name of its own (O_EXCL, O_NOFOLLOW) and renamed onto --port-file:
# a symbolic link planted at PORT_FILE.tmp.PID (the name the writer once used, and followed) is not
# written through; the port file is a regular file, readable by its owner only, and no temporary
# file is left beside it.
#   run_port_file_test.sh DISCO_SERVE DISCO_REMOTE MPIEXEC ARGS...
set -u
serve=$1 client=$2
shift 2
dir=$(mktemp -d)
spid=""
trap '[[ -n $spid ]] && kill -KILL -- -$spid 2>/dev/null; rm -rf "$dir"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
export HOME=$dir
unset DISCO_SERVE_KEY DISCO_SERVE_KEY_FILE
echo precious >"$dir/victim"
# Each rank plants the link at its own pid's name, then becomes disco-serve (exec keeps the pid).
# shellcheck disable=SC2016  # expanded by the rank's shell
setsid "$@" bash -c 'ln -s "$1/victim" "$1/port.tmp.$$" && exec "$2" --port-file "$1/port"' \
  _ "$dir" "$serve" >"$dir/server.log" 2>&1 &
spid=$!
for _ in $(seq 300); do [[ -s $dir/port ]] && break; sleep 0.1; done
cat "$dir/server.log"
[[ -s $dir/port ]] || { echo "FAIL: the server did not start"; exit 1; }
[[ $(cat "$dir/victim") == precious ]] || bad "the port file was written through a planted link"
[[ -f $dir/port && ! -L $dir/port ]] || bad "the port file is not a regular file"
[[ $(stat -c %a "$dir/port") == 600 ]] || bad "port file mode $(stat -c %a "$dir/port"), not 600"
port=$(cat "$dir/port")
[[ $port =~ ^[0-9]+$ ]] || bad "the port file holds '$port'"
"$client" "127.0.0.1:$port" shutdown 0 || bad "disco-remote could not end the job"
for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$spid" 2>/dev/null && bad "the job did not end"
# Only the planted links remain beside the port file.
for f in "$dir"/port.tmp.*; do
  [[ -e $f || -L $f ]] || continue
  [[ -L $f ]] || bad "a temporary file was left: $f"
done
((fail)) && exit 1
echo "PASS"
