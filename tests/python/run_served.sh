#!/usr/bin/env bash
# Serves a job with the suite's Python worker functions (python3 -m disco.serve --module funcs),
# runs the pytest suite against it from a plain Python process (no MPI there), and checks that the
# job ends with the suite's verdict as its exit code.
#   run_served.sh PYTHON -- MPIEXEC ARGS...      (PYTHONPATH must find disco)
set -u
py=$1
shift
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
base=${DISCO_TEST_SHARED_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$base"
dir=$(mktemp -d -p "$base")
export DISCO_SERVE_KEY="python-test-key-$$-$RANDOM$RANDOM"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
setsid "$@" "$py" -m disco.serve --module funcs --port-file "$dir/port" >"$dir/server.log" 2>&1 &
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
  echo "run_served: the served job did not start listening"
  cat "$dir/server.log"
  exit 1
fi
port=$(cat "$dir/port")
echo "run_served: python3 -m disco.serve on 127.0.0.1:$port"
DISCO_TEST_SERVER="127.0.0.1:$port" timeout 300 "$py" -m pytest -p no:cacheprovider --color=no \
  --rootdir "$here" -q "$here"
crc=$?
echo "pytest through the served job: exit $crc"
for _ in $(seq 600); do
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$spid" 2>/dev/null; then
  echo "run_served: the served job did not end after the suite"
  cat "$dir/server.log"
  exit 1
fi
wait "$spid"
src=$?
if [ "$crc" -ne 0 ] || [ "$src" -ne "$crc" ]; then
  echo "run_served: suite exit $crc, served job exit $src"
  cat "$dir/server.log"
  exit 1
fi
exit 0
