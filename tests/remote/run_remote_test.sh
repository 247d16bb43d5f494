#!/usr/bin/env bash
# Starts an MPI job serving its session on loopback, runs the remote suites against it, and checks
# that the job ends when the client says so, with the client's verdict as its exit code.
#   run_remote_test.sh NP SERVER_BIN CLIENT_BIN -- MPIEXEC ARGS...
set -u
np=$1 server=$2 client=$3
shift 3
[ "${1:-}" = "--" ] && shift
# The port file is written by rank 0, wherever its node is: a directory every node sees when
# DISCO_TEST_SHARED_DIR says one.
base=${DISCO_TEST_SHARED_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$base"
dir=$(mktemp -d -p "$base")
export DISCO_SERVE_KEY="remote-test-key-$$-$RANDOM"
setsid "$@" "$server" --serve "$dir/port" >"$dir/server.log" 2>&1 &
spid=$!
cleanup() {
  if kill -0 "$spid" 2>/dev/null; then kill -TERM -- "-$spid" 2>/dev/null; sleep 1; kill -KILL -- "-$spid" 2>/dev/null; fi
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 1200); do
  [ -s "$dir/port" ] && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
if [ ! -s "$dir/port" ]; then
  echo "run_remote_test: the server job did not start listening"
  cat "$dir/server.log"
  exit 1
fi
port=$(cat "$dir/port")
echo "run_remote_test: $np-rank server on 127.0.0.1:$port"
# DISCO_TEST_CLIENT_PREFIX: where the client runs (on the virtual cluster: rank 0's node, whose
# loopback the server listens on).
DISCO_TEST_SERVER="127.0.0.1:$port" timeout 300 ${DISCO_TEST_CLIENT_PREFIX:-} "$client"
crc=$?
for _ in $(seq 600); do
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$spid" 2>/dev/null; then
  echo "run_remote_test: the server job is still running 60 s after the client ended it"
  cat "$dir/server.log"
  exit 1
fi
wait "$spid"
src=$?
echo "---- server log"
cat "$dir/server.log"
echo "run_remote_test: client exit $crc, server job exit $src"
[ "$crc" -eq 0 ] && [ "$src" -eq 0 ]
