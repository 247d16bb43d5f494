#!/usr/bin/env bash
# Runs a fuzzer (the frames', the checkpoint JSON's) for SECONDS (default 60) from a copy of its
# checked-in corpus, and prints what the closing notes report: executions, corpus size before and
# after, and the verdict.
#   run_fuzz.sh FUZZER CORPUS [SECONDS]
set -euo pipefail
fuzzer=$1 corpus=$2 seconds=${3:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$corpus" "$work/corpus"
before=$(ls "$work/corpus" | wc -l)
# Leak checking stays on (this process has no MPI); -rss_limit_mb bounds what a bad length could
# make a decoder allocate.
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" > "$work/log" 2>&1 || {
  tail -n 60 "$work/log"
  for crash in "$work"/crash-* "$work"/leak-* "$work"/oom-* "$work"/timeout-*; do
    [[ -e $crash ]] && { echo "input that failed ($crash):"; od -A d -t x1 "$crash" | head -20; }
  done
  echo "FAIL: the fuzzer found a crash, leak, timeout or undefined behaviour"
  exit 1
}
after=$(ls "$work/corpus" | wc -l)
grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/log" || true
echo "fuzz: ok; ${seconds} s, corpus $before -> $after inputs"
