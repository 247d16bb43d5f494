#!/usr/bin/env bash
# Runs a job that must fail in a given way and checks how it ended:
#   run_fault_test.sh --timeout SECONDS --expect-exit (nonzero|N) --expect REGEX...
#                     [--reject REGEX...] [--verdict-within SECONDS REGEX] -- command...
# Passes when the job ends within SECONDS with the expected exit code and its output matches
# every --expect REGEX given (extended grep) and no --reject one, and no process of the job is left 5 s later (found by a token in their
# environment). A job still running at SECONDS + 5 is killed and fails the test. With
# --verdict-within, a line matching REGEX must come at most SECONDS after the job printed "hang
# begins" (each line is stamped as it arrives).
set -uo pipefail
timeout_s=10 expect_exit=nonzero patterns=() rejects=() verdict_s='' verdict_re=''
while [[ $# -gt 0 ]]; do
  case "$1" in
    --timeout) timeout_s=$2; shift 2 ;;
    --expect-exit) expect_exit=$2; shift 2 ;;
    --expect) patterns+=("$2"); shift 2 ;;
    --reject) rejects+=("$2"); shift 2 ;;
    --verdict-within) verdict_s=$2; verdict_re=$3; shift 3 ;;
    --) shift; break ;;
    *) echo "run_fault_test.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
out=$(mktemp)
stamped=$(mktemp)
trap 'rm -f "$out" "$stamped"' EXIT
# Every process of the job inherits this token: a straggler is found by its environment.
export DISCO_FAULT_TEST_TOKEN="fault-$$-$RANDOM"
stragglers() {  # "PID command" of each process holding the token, other than this script
  env -u DISCO_FAULT_TEST_TOKEN token="$DISCO_FAULT_TEST_TOKEN" self=$$ bash -c '
    for dir in /proc/[0-9]*; do
      pid=${dir#/proc/}
      [[ $pid == "$self" ]] && continue
      tr "\0" "\n" 2>/dev/null < "$dir/environ" | grep -qx "DISCO_FAULT_TEST_TOKEN=$token" &&
        echo "$pid $(tr "\0" " " 2>/dev/null < "$dir/cmdline")"
    done
    true' 2>/dev/null
}
echo "+ $*"
start_ms=$(( $(date +%s%N) / 1000000 ))
if [[ -n $verdict_s ]]; then
  # Each line with the time it arrived (microseconds), then the plain output.
  timeout -s KILL $((timeout_s + 5)) "$@" 2>&1 | while IFS= read -r line; do
    printf '%s %s\n' "${EPOCHREALTIME/./}" "$line"
  done >"$stamped"
  code=${PIPESTATUS[0]}
  sed 's/^[0-9]* //' "$stamped" >"$out"
else
  timeout -s KILL $((timeout_s + 5)) "$@" >"$out" 2>&1
  code=$?
fi
elapsed_ms=$(( $(date +%s%N) / 1000000 - start_ms ))
elapsed=$(printf "%d.%03d" $((elapsed_ms / 1000)) $((elapsed_ms % 1000)))
cat "$out"
echo "--- exit code $code after ${elapsed}s"
fail=0
if (( elapsed_ms >= (timeout_s + 5) * 1000 - 200 )); then
  echo "FAIL: the job hung and was killed after $((timeout_s + 5))s"; fail=1
elif [[ $expect_exit == nonzero && $code -eq 0 ]]; then
  echo "FAIL: expected a non-zero exit"; fail=1
elif [[ $expect_exit != nonzero && $code -ne $expect_exit ]]; then
  echo "FAIL: expected exit code $expect_exit"; fail=1
fi
if (( elapsed_ms > timeout_s * 1000 )); then
  echo "FAIL: took ${elapsed}s, more than ${timeout_s}s"; fail=1
fi
for pattern in "${patterns[@]}"; do
  if [[ -n $pattern ]] && ! grep -Eq -- "$pattern" "$out"; then
    echo "FAIL: output does not match: $pattern"; fail=1
  fi
done
if [[ -n $verdict_s ]]; then
  begun=$(grep -m1 -E '^[0-9]+ hang begins$' "$stamped" | cut -d' ' -f1)
  said=$(grep -m1 -E -- "^[0-9]+ .*($verdict_re)" "$stamped" | cut -d' ' -f1)
  if [[ -z $begun ]]; then
    echo "FAIL: the job never printed 'hang begins'"; fail=1
  elif [[ -z $said ]]; then
    echo "FAIL: no verdict line matches: $verdict_re"; fail=1
  else
    after_ms=$(( (said - begun) / 1000 ))
    echo "--- verdict $(printf '%d.%03d' $((after_ms / 1000)) $((after_ms % 1000))) s after the hang began (limit ${verdict_s} s)"
    if (( after_ms > verdict_s * 1000 )); then
      echo "FAIL: the verdict came later than ${verdict_s} s after the hang began"; fail=1
    fi
  fi
fi
for pattern in "${rejects[@]}"; do
  if [[ -n $pattern ]] && grep -Eq -- "$pattern" "$out"; then
    echo "FAIL: output matches what it must not: $pattern"; fail=1
  fi
done
left=$(stragglers)
for _ in 1 2 3 4 5 6 7 8 9 10; do
  [[ -z $left ]] && break
  sleep 0.5
  left=$(stragglers)
done
if [[ -n $left ]]; then
  echo "FAIL: processes of the job are still running 5 s after it ended:"; echo "$left"; fail=1
  kill -9 $(awk '{print $1}' <<<"$left") 2>/dev/null || true
fi
[[ $fail -eq 0 ]] && echo "PASS"
exit $fail
