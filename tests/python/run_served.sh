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
source "$here/../remote/served_job.sh"
served_job_dir
export DISCO_SERVE_KEY="python-test-key-$$-$RANDOM$RANDOM"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
served_job_start run_served "$@" "$py" -m disco.serve --module funcs --port-file "$served_dir/port"
echo "run_served: python3 -m disco.serve on 127.0.0.1:$served_port"
DISCO_TEST_SERVER="127.0.0.1:$served_port" timeout 300 "$py" -m pytest -p no:cacheprovider \
  --color=no --rootdir "$here" -q "$here"
crc=$?
echo "pytest through the served job: exit $crc"
served_job_wait run_served
if [ "$crc" -ne 0 ] || [ "$served_rc" -ne "$crc" ]; then
  echo "run_served: suite exit $crc, served job exit $served_rc"
  cat "$served_dir/server.log"
  exit 1
fi
exit 0
