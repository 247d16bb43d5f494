#!/usr/bin/env bash
# Starts an MPI job serving its session on loopback, runs the remote suites against it, and checks
# that the job ends when the client says so, with the client's verdict as its exit code.
#   run_remote_test.sh NP SERVER_BIN CLIENT_BIN -- MPIEXEC ARGS...
set -u
np=$1 server=$2 client=$3
shift 3
[ "${1:-}" = "--" ] && shift
source "$(dirname "$0")/served_job.sh"
served_job_dir
export DISCO_SERVE_KEY="remote-test-key-$$-$RANDOM"
served_job_start run_remote_test "$@" "$server" --serve "$served_dir/port"
echo "run_remote_test: $np-rank server on 127.0.0.1:$served_port"
# DISCO_TEST_CLIENT_PREFIX: where the client runs (on the virtual cluster: rank 0's node, whose
# loopback the server listens on).
DISCO_TEST_SERVER="127.0.0.1:$served_port" timeout 300 ${DISCO_TEST_CLIENT_PREFIX:-} "$client"
crc=$?
served_job_wait run_remote_test
echo "---- server log"
cat "$served_dir/server.log"
echo "run_remote_test: client exit $crc, server job exit $served_rc"
[ "$crc" -eq 0 ] && [ "$served_rc" -eq 0 ]
