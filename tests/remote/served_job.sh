# Sourced by the tests that drive a served job from outside it (tests/remote/run_remote_test.sh,
# tests/python/run_served.sh):
#   served_job_dir                 makes $served_dir in DISCO_TEST_SHARED_DIR (every node sees it:
#                                  rank 0 writes the port file wherever its node is); the job's
#                                  process group is ended and the directory removed at exit.
#   served_job_start NAME CMD...   runs CMD, which writes its port to "$served_dir/port", in a
#                                  process group of its own (log: $served_dir/server.log), and
#                                  waits for the port; sets $served_port.
#   served_job_wait NAME           waits up to 60 s for the job to end (the client ended it); sets
#                                  $served_rc, the job's exit code.

served_job_dir() {
  local base=${DISCO_TEST_SHARED_DIR:-${TMPDIR:-/tmp}}
  mkdir -p "$base"
  served_dir=$(mktemp -d -p "$base")
  trap served_job_cleanup EXIT
}

served_job_cleanup() {
  if [[ -n ${served_pid:-} ]] && kill -0 "$served_pid" 2>/dev/null; then
    kill -TERM -- "-$served_pid" 2>/dev/null
    sleep 1
    kill -KILL -- "-$served_pid" 2>/dev/null
  fi
  rm -rf "$served_dir"
}

served_job_start() {
  local name=$1
  shift
  setsid "$@" >"$served_dir/server.log" 2>&1 &
  served_pid=$!
  for _ in $(seq 1200); do
    [ -s "$served_dir/port" ] && break
    kill -0 "$served_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s "$served_dir/port" ]; then
    echo "$name: the served job did not start listening"
    cat "$served_dir/server.log"
    exit 1
  fi
  served_port=$(cat "$served_dir/port")
}

served_job_wait() {
  local name=$1
  for _ in $(seq 600); do
    kill -0 "$served_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$served_pid" 2>/dev/null; then
    echo "$name: the served job is still running 60 s after the client ended it"
    cat "$served_dir/server.log"
    exit 1
  fi
  wait "$served_pid"
  served_rc=$?
}
