#!/usr/bin/env bash
# Ctrl-C in the controller: a terminal sends SIGINT to the whole foreground process group. For a
# controller busy in Python and one waiting inside the runtime, alone and under mpirun, the job
# must end within 10 s with a non-zero code and leave no process behind.
#   run_interrupt_test.sh PYTHON -- MPIEXEC ARGS...   (MPIEXEC with its -n flag, without the count)
set -u
py=$1
shift
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail=0
# Scripts start background jobs with SIGINT ignored; a terminal's job has it at its default.
with_sigint() {
  "$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' "$@"
}
run_case() {  # name ranks mode
  local name=$1 ranks=$2 mode=$3
  : >"$log"
  if [[ $ranks == 1 ]]; then
    setsid bash -c "$(declare -f with_sigint); py='$py'; with_sigint '$py' '$here/interrupt_app.py' $mode" >"$log" 2>&1 &
  else
    setsid bash -c "$(declare -f with_sigint); py='$py'; with_sigint ${MPI[*]} $ranks '$py' '$here/interrupt_app.py' $mode" >"$log" 2>&1 &
  fi
  local pid=$! i
  for i in $(seq 300); do grep -q '^ready' "$log" && break; sleep 0.1; done
  sleep 0.5
  local t0=$SECONDS
  kill -INT -- "-$pid"
  for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  local verdict=ok rc=none
  if kill -0 "$pid" 2>/dev/null; then
    verdict="still running 15 s after SIGINT"
    kill -KILL -- "-$pid" 2>/dev/null
  else
    wait "$pid"
    rc=$?
    [[ $rc -ne 0 ]] || verdict="exit code 0"
  fi
  sleep 0.5
  if pgrep -g "$pid" >/dev/null 2>&1; then
    verdict="processes left: $(pgrep -g "$pid" -a | tr '\n' ';')"
    kill -KILL -- "-$pid" 2>/dev/null
  fi
  printf '%-28s exit %-4s after %2d s: %s\n' "$name" "$rc" $((SECONDS - t0)) "$verdict"
  if [[ $verdict != ok ]]; then
    fail=1
    sed 's/^/    /' "$log"
  fi
}
MPI=("$@")
run_case "alone, in Python" 1 python
run_case "alone, in the runtime" 1 runtime
run_case "mpirun 2, in Python" 2 python
run_case "mpirun 2, in the runtime" 2 runtime
exit $fail
