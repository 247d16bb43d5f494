#!/usr/bin/env bash
# Ctrl-C in the controller: a terminal sends SIGINT to the whole foreground process group. For a
# controller busy in Python and one waiting inside the runtime, alone and under mpirun, the job
# must end within 10 s with a non-zero code and leave no process behind. A controller that takes
# the KeyboardInterrupt and goes on working (4 s of session calls and Python) must not be ended:
# it finishes and exits with its own code, 3 (alone; under mpirun SIGINT goes to rank 0 only,
# since mpirun itself ends the job on SIGINT). Under MPICH's hydra (DISCO_RUN_MPI=mpich, from
# CMake) the exit code of mpiexec after Ctrl-C is not checked: hydra forwards the SIGINT to the
# ranks and now and then exits 0 whatever they exit with (1 run in 8 with ranks that exit 7 on
# SIGINT, no disco involved); the job must still end within 10 s and leave nothing behind.
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
run_case() {  # name ranks mode [expected exit code] [rank0: SIGINT to rank 0 only]
  local name=$1 ranks=$2 mode=$3 want=${4:-} target=${5:-group}
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
  if [[ $target == rank0 ]]; then
    kill -INT "$(sed -n 's/^ready pid=//p' "$log" | head -n 1)"
  else
    kill -INT -- "-$pid"
  fi
  for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  local verdict=ok rc=none
  if kill -0 "$pid" 2>/dev/null; then
    verdict="still running 15 s after SIGINT"
    kill -KILL -- "-$pid" 2>/dev/null
  else
    wait "$pid"
    rc=$?
    if [[ $rc -eq 0 && $ranks != 1 && ${DISCO_RUN_MPI:-} == mpich ]]; then
      verdict="ok (hydra's exit code after Ctrl-C is not checked)"
    elif [[ $rc -eq 0 ]]; then
      verdict="exit code 0"
    fi
    if [[ -n $want ]]; then
      [[ $rc == "$want" ]] || verdict="exit code $rc, expected $want"
      grep -q '^saved' "$log" || verdict="$verdict; the handler did not finish (no 'saved')"
    fi
  fi
  sleep 0.5
  if pgrep -g "$pid" >/dev/null 2>&1; then
    verdict="processes left: $(pgrep -g "$pid" -a | tr '\n' ';')"
    kill -KILL -- "-$pid" 2>/dev/null
  fi
  printf '%-28s exit %-4s after %2d s: %s\n' "$name" "$rc" $((SECONDS - t0)) "$verdict"
  if [[ $verdict != ok* ]]; then
    fail=1
    sed 's/^/    /' "$log"
  fi
}
# A handler case whose controller did not reach Python's handler within the runtime's 2 s (the
# rule for a controller stuck in the runtime: a loaded machine starved it; seen once in a CI run
# of MPICH's stage, where the sanitizer build runs beside the tests) runs once more, saying so;
# any other failure, or that one twice, fails.
run_handler_case() {
  local before=$fail
  run_case "$@"
  if ((fail != before)) && grep -q 'waits in the runtime; ending the job' "$log" &&
    ! grep -q '^KeyboardInterrupt taken' "$log"; then
    echo "    (the handler was not reached within 2 s: the machine starved it; once more)"
    fail=$before
    run_case "$1 (again)" "${@:2}"
  fi
}
MPI=("$@")
run_case "alone, in Python" 1 python
run_case "alone, in the runtime" 1 runtime
run_case "mpirun 2, in Python" 2 python
run_case "mpirun 2, in the runtime" 2 runtime
run_handler_case "alone, handler saves 4 s" 1 handler 3
run_handler_case "mpirun 2, handler saves 4 s" 2 handler 3 rank0
exit $fail
