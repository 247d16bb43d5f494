#!/usr/bin/env bash
# Wrong keys from ever new source addresses of 127.0.0.0/8 (tests/remote/refusal_flood.cc) against
# a served job: the job's log gets at most a handful of refusal lines, the back-off of wrong keys
# grows for the whole of 127.0.0.0/8 (a guess from a fresh address waits seconds), and a client
# with the key still attaches at once.
#   run_refusal_test.sh DISCO_SERVE FLOOD_CLIENT -- MPIEXEC ARGS...
set -u
serve=$1 flood=$2
shift 2
[[ ${1:-} == -- ]] && shift
source "$(dirname "$0")/served_job.sh"
served_job_dir
export DISCO_SERVE_KEY="refusal-test-key-$$-$RANDOM"
served_job_start run_refusal_test "$@" "$serve" --port-file "$served_dir/port"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
timeout 120 "$flood" "127.0.0.1:$served_port" 3000 | tee "$served_dir/flood.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || bad "the flood client failed"
served_job_wait run_refusal_test
echo "---- server log"
cat "$served_dir/server.log"
lines=$(grep -c "refused" "$served_dir/server.log")
echo "---- $lines refusal lines"
((lines <= 5)) || bad "$lines refusal lines for one local process's guesses (at most 5 expected)"
# The guess from a fresh address waits for the back-off the network has earned, or is closed
# unanswered when the network already has its most guesses waiting; it is not answered at once.
backoff=$(sed -n 's/^backoff_ms \([0-9]*\).*/\1/p' "$served_dir/flood.log")
[[ -n $backoff ]] || bad "no timed guess"
if ! grep -q "^backoff_ms.*closed unanswered" "$served_dir/flood.log"; then
  ((${backoff:-0} >= 3000)) ||
    bad "a guess from a fresh address of 127.0.0.0/8 was answered after ${backoff:-?} ms: the back-off was reset by changing the source address"
fi
grep -Eq "a wrong key from there is now answered after [0-9]{4,} ms" "$served_dir/server.log" ||
  bad "the refusal summary does not show a back-off of seconds"
attach=$(sed -n 's/^attach_ms \([0-9]*\).*/\1/p' "$served_dir/flood.log")
((${attach:-99999} < 3000)) || bad "the client with the key waited ${attach:-?} ms"
[[ $served_rc -eq 0 ]] || bad "the served job ended with $served_rc"
((fail)) && exit 1
echo PASS
