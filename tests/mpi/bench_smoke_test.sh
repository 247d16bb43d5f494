#!/usr/bin/env bash
# disco-bench still runs and reports correct results (a smoke test, not a timed one): the call,
# ccl, load and remote suites at 2 ranks with tiny iteration counts; the CSV/JSON files have their
# columns, every collective and load reports 0 wrong elements, and ccl prints the 2-rank line of
# a small allreduce against ping-pongs.
#   bench_smoke_test.sh MPIEXEC DISCO_BENCH [mpiexec flags...]
set -euo pipefail
mpiexec=$1 bench=$2; shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$mpiexec" -n 2 "$@" "$bench" call --iters 200 --latency-iters 20 --repeats 1 --max-bytes 4096 \
  --csv "$out/call.csv" > "$out/call.txt"
"$mpiexec" -n 2 "$@" "$bench" ccl --min-bytes 4096 --max-bytes 262144 --repeats 1 \
  --csv "$out/ccl.csv" --json "$out/ccl.json" > "$out/ccl.txt"
"$mpiexec" -n 2 "$@" "$bench" load --bytes 1048576 --repeats 1 --csv "$out/load.csv" > "$out/load.txt"
# The remote suite is a client process that starts its own served job: disco-serve under
# launch/disco-run, as a user would.
disco_run="$(cd "$(dirname "$0")/../../launch" && pwd)/disco-run"
"$bench" remote --launch "$disco_run -n 2" --iters 100 --repeats 1 --max-bytes 65536 \
  --csv "$out/remote.csv" > "$out/remote.txt"
cat "$out/call.txt" "$out/ccl.txt" "$out/load.txt" "$out/remote.txt"
fail=0
head -n 20 "$out/call.csv" | grep -q '^payload_B,wire_B,raw_pipe_us,call_pipe_us,pipe_ratio,raw_payload_pipe_us,payload_ratio' || { echo "FAIL: call.csv columns"; fail=1; }
grep -q '^# ranks=2' "$out/call.csv" || { echo "FAIL: call.csv metadata"; fail=1; }
rows=$(grep -c '^[0-9]' "$out/call.csv" || true)
[[ $rows -eq 5 ]] || { echo "FAIL: call.csv has $rows rows, expected 5 (8 B .. 4 KiB)"; fail=1; }
grep -q '^collective,size_B,count,type,op,raw_time_us,raw_algbw,raw_busbw,raw_wrong,disco_time_us,disco_algbw,disco_busbw,disco_wrong,busbw_ratio,floor_us,ratio_bound$' "$out/ccl.csv" || { echo "FAIL: ccl.csv columns"; fail=1; }
# Columns 9 and 13 are #wrong for raw MPI and for disco: every one must be 0.
bad=$(awk -F, '!/^#/ && NR > 1 && $1 != "collective" && ($9 != 0 || $13 != 0)' "$out/ccl.csv")
[[ -z $bad ]] || { echo "FAIL: wrong results: $bad"; fail=1; }
crows=$(grep -c '^[a-z_]*,[0-9]' "$out/ccl.csv" || true)
[[ $crows -eq 16 ]] || { echo "FAIL: ccl.csv has $crows rows, expected 16 (4 collectives x 4 sizes)"; fail=1; }
grep -Eq '^# small_allreduce: 4096 B allreduce in a function [0-9.]+ us; ping-pong round trip of a cache line [0-9.]+ us \(ratio [0-9.]+\), of 4096 B each way [0-9.]+ us \(ratio [0-9.]+\); the channel.s steps alone \(4096 B both ways at once, no runtime\) [0-9.]+ us \(ratio [0-9.]+; itself [0-9.]+x the line.s round trip\)$' "$out/ccl.txt" || { echo "FAIL: no small_allreduce line in ccl.txt"; fail=1; }
grep -q '"rows": \[' "$out/ccl.json" && grep -q '"disco_wrong": 0' "$out/ccl.json" || { echo "FAIL: ccl.json"; fail=1; }
grep -q '^size_B,shard_B,raw_ms,raw_GBps,disco_ms,disco_GBps,ratio,peak_MiB_max,bound_MiB,wrong$' "$out/load.csv" || { echo "FAIL: load.csv columns"; fail=1; }
awk -F, '!/^#/ && $1 ~ /^[0-9]/ {found=1; if ($10 != 0) bad=1} END {exit !(found && !bad)}' "$out/load.csv" || { echo "FAIL: load.csv has no row or wrong elements"; fail=1; }
grep -q '^op,size_B,wire_B,raw_us,disco_us,raw_GBps,disco_GBps,ratio' "$out/remote.csv" || { echo "FAIL: remote.csv columns"; fail=1; }
rrows=$(grep -c '^[a-z_]*,[0-9]' "$out/remote.csv" || true)
[[ $rrows -eq 7 ]] || { echo "FAIL: remote.csv has $rrows rows, expected 7 (call + 2 x 3 sizes)"; fail=1; }
[[ $fail -eq 0 ]] && echo "bench smoke: ok"
exit $fail
