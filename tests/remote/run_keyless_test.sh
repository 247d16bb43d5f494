#!/usr/bin/env bash
# A job served without a key: it generates one, writes it to ~/.disco/serve-PORT.key readable by
# its owner only, and says where; disco-remote finds it there with no key given; the file goes
# when the job ends. A chosen key shorter than 16 characters is refused at start.
#   run_keyless_test.sh DISCO_SERVE DISCO_REMOTE MPIEXEC ARGS...
set -u
serve=$1 client=$2
shift 2
home=$(mktemp -d)
trap 'kill -KILL -- -$spid 2>/dev/null; rm -rf "$home"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
export HOME=$home
unset DISCO_SERVE_KEY DISCO_SERVE_KEY_FILE
setsid "$@" "$serve" --port-file "$home/port" >"$home/server.log" 2>&1 &
spid=$!
for _ in $(seq 300); do [[ -s $home/port ]] && break; sleep 0.1; done
[[ -s $home/port ]] || { cat "$home/server.log"; echo "FAIL: the server did not start"; exit 1; }
port=$(cat "$home/port")
key_file=$home/.disco/serve-$port.key
cat "$home/server.log"
grep -q "generated key in $key_file" "$home/server.log" || bad "the server did not say where the key is"
[[ -f $key_file ]] || bad "no key file $key_file"
[[ $(stat -c %a "$key_file") == 600 ]] || bad "key file mode $(stat -c %a "$key_file"), not 600"
[[ $(stat -c %a "$home/.disco") == 700 ]] || bad "key directory mode $(stat -c %a "$home/.disco")"
[[ $(head -c 64 "$key_file" | tr -d '0-9a-f' | wc -c) == 0 && $(wc -c < "$key_file") -ge 64 ]] ||
  bad "the key is not 64 hex digits"
# No key at all: refused; the key from the file: served.
DISCO_SERVE_KEY_FILE=/nonexistent "$client" "127.0.0.1:$port" info 2>&1 | grep -q "no key file" ||
  bad "a client without a key was not told where it looked"
"$client" "127.0.0.1:$port" info || bad "disco-remote did not attach with the key file"
# A key file others can read is refused, as ssh refuses a private key.
chmod 644 "$key_file"
"$client" "127.0.0.1:$port" info 2>&1 | grep -q "readable by you only" ||
  bad "a key file readable by others was used"
chmod 600 "$key_file"
"$client" "127.0.0.1:$port" shutdown 0 || bad "disco-remote could not end the job"
for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$spid" 2>/dev/null && bad "the job did not end"
[[ ! -e $key_file ]] || bad "the key file outlived the job"
# A short chosen key is refused at start.
out=$(DISCO_SERVE_KEY=short timeout 60 "$@" "$serve" --max-clients 1 2>&1)
grep -q "use at least 16" <<<"$out" || { echo "$out"; bad "a 5-character key was accepted"; }
((fail)) && exit 1
echo "PASS"
