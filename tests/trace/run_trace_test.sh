#!/usr/bin/env bash
# The timeline (DISCO_TRACE) end to end:
#   run_trace_test.sh PYTHON MPIEXEC DISCO_DEMO FAULT_PROGRAM [mpiexec flags...]
# (PYTHONPATH must hold the built disco package: python3 -m disco.trace reads the files.)
# 1. disco-demo at 2 ranks writes its model to HDF5 (--convert), then generates from that file, each
#    traced: every file passes disco.trace --check and check_trace.py (every event well formed, a
#    track per rank, commands named after their functions, runs, collectives on both ranks with
#    bytes, syncs, replays and the replayed calls, HDF5 writes then reads with bytes, clocks aligned
#    with a stated error); the summary prints its sections; the PNG is drawn when gnuplot is here.
# 2. A ring of 1024 events on a longer run: the oldest dropped and counted, the file still valid.
# 3. A hang (one rank skips a collective, DISCO_TIMEOUT=3): every rank leaves PATH.rank<r>.json
#    with the command it was running, and disco.trace reads them merged; a FIFO planted as rank
#    0's file is refused without blocking its watchdog.
# 4. Bad input: a directory that does not exist, a symbolic link, a FIFO, another user's file (as
#    root), a bad DISCO_TRACE_EVENTS: the job fails at start, naming the variable; nothing hangs.
set -uo pipefail
py=$1 mpiexec=$2 demo=$3 fault=$4
shift 4
flags=("$@")
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run NP TIMEOUT program args... (output in $dir/out.log)
  local np=$1 limit=$2
  shift 2
  timeout -k 10 "$limit" "$mpiexec" -n "$np" "${flags[@]}" "$@" >"$dir/out.log" 2>&1
}
small=(--hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 256 --seed 7)

# 1. Convert (HDF5 writes), then generate from the file (HDF5 reads).
DISCO_TRACE=$dir/convert.json run 2 120 "$demo" "${small[@]}" --convert "$dir/model.h5" ||
  { cat "$dir/out.log"; fail "the traced --convert failed"; }
grep -q "DISCO_TRACE: [0-9]* events of 2 rank(s) in $dir/convert.json" "$dir/out.log" ||
  { cat "$dir/out.log"; fail "no closing DISCO_TRACE line"; }
DISCO_TRACE=$dir/run.json run 2 120 "$demo" --model "$dir/model.h5" --prompt 1,2,3 --prompt 4,5 \
  --max-new-tokens 8 || { cat "$dir/out.log"; fail "the traced generation failed"; }
grep -q "^generated:" "$dir/out.log" || { cat "$dir/out.log"; fail "no generated tokens"; }
"$py" "$here/check_trace.py" "$dir/convert.json" --ranks 2 --need hdf5_write command run ||
  fail "the --convert trace"
"$py" "$here/check_trace.py" "$dir/run.json" --ranks 2 \
  --need hdf5_read command run collective sync replay --replayed llama.mlp ||
  fail "the generation's trace"
"$py" -m disco.trace --check "$dir/run.json" || fail "disco.trace --check"
"$py" -m disco.trace "$dir/run.json" --top 5 >"$dir/summary.txt" 2>&1 ||
  { cat "$dir/summary.txt"; fail "disco.trace"; }
cat "$dir/summary.txt"
for section in "compute  collective" "slowest collectives" "top functions" "controller:" "hdf5:"; do
  grep -q "$section" "$dir/summary.txt" || fail "the summary has no '$section'"
done
if command -v gnuplot >/dev/null; then
  "$py" -m disco.trace "$dir/run.json" --png "$dir/run.png" >/dev/null || fail "disco.trace --png"
  [[ $(head -c 8 "$dir/run.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
    fail "--png wrote no PNG"
  echo "ok: the PNG timeline ($(stat -c %s "$dir/run.png") bytes)"
else
  echo "note: no gnuplot here: the PNG is not drawn (Debian: gnuplot-nox)"
fi

# 2. A small ring: the oldest events are dropped and counted.
DISCO_TRACE=$dir/ring.json DISCO_TRACE_EVENTS=1024 run 2 120 "$demo" --model "$dir/model.h5" \
  --prompt 1,2,3 --max-new-tokens 32 --repeat 3 || { cat "$dir/out.log"; fail "the ring run failed"; }
"$py" "$here/check_trace.py" "$dir/ring.json" --ranks 2 --dropped || fail "the ring's trace"

# 3. A hang: rank 2 skips a collective; the watchdog ends the job; each rank leaves its file.
DISCO_TRACE=$dir/hang.json DISCO_TIMEOUT=3 run 3 60 "$fault" skip-collective
rc=$?
((rc != 0 && rc != 124 && rc != 137)) || { cat "$dir/out.log"; fail "the hang did not end by the watchdog (exit $rc)"; }
for r in 0 1 2; do
  [[ -f $dir/hang.json.rank$r.json ]] || { cat "$dir/out.log"; ls "$dir"; fail "rank $r left no trace"; }
done
"$py" "$here/check_trace.py" "$dir/hang.json" --ranks 3 --rank-files \
  --running "fault.collective_unless (running)" || fail "the hung job's traces"
"$py" -m disco.trace "$dir/hang.json" --top 3 >"$dir/hang.txt" 2>&1 || { cat "$dir/hang.txt"; fail "disco.trace on rank files"; }
grep -q "rank 0's own file" "$dir/hang.txt" || { cat "$dir/hang.txt"; fail "disco.trace did not say the files are unaligned"; }
echo "ok: a hung job left one trace per rank, read merged"
# 4. A fatal error in a short command: the dump stops the trace, and the time it says the command
# ran is read on the clock the command began on (the coarse one had given "running for -2.3 ms").
DISCO_TRACE=$dir/fatal.json run 2 60 "$fault" terminate-in-command
grep -q "running for [0-9]" "$dir/out.log" || { cat "$dir/out.log"; fail "no running time in the fatal dump"; }
! grep -q "running for -" "$dir/out.log" || { cat "$dir/out.log"; fail "a negative running time"; }
echo "ok: a fatal error's dump under a trace gives a running time that is not negative"
# A FIFO planted where rank 0's file goes: refused at once, rank 0's watchdog goes on to end the job.
mkfifo "$dir/hang2.json.rank0.json"
DISCO_TRACE=$dir/hang2.json DISCO_TIMEOUT=3 run 3 60 "$fault" skip-collective
rc=$?
((rc != 0 && rc != 124 && rc != 137)) || { cat "$dir/out.log"; fail "with a FIFO as rank 0's file the job did not end by the watchdog (exit $rc)"; }
grep -q "\[rank 0\] DISCO_TRACE: cannot write $dir/hang2.json.rank0.json" "$dir/out.log" &&
  grep -q "error: watchdog: command" "$dir/out.log" || { cat "$dir/out.log"; fail "rank 0 did not refuse the FIFO and go on"; }
echo "ok: a FIFO planted as a rank file is refused; the watchdog still ends the job"

# 4. Bad input fails at start, naming the knob.
expect_start_failure() {  # expect_start_failure NEEDLE  (env set by the caller)
  run 2 60 "$demo" "${small[@]}" --prompt 1 --max-new-tokens 2
  local rc=$?
  if ((rc == 0 || rc == 124 || rc == 137)) || ! grep -q "$1" "$dir/out.log"; then
    cat "$dir/out.log"
    fail "expected a failure at start naming '$1' (exit $rc)"
  fi
  echo "ok: $(grep -m1 -o "$1.*" "$dir/out.log" | cut -c1-150)"
}
DISCO_TRACE=$dir/no/such/dir/t.json expect_start_failure "DISCO_TRACE=$dir/no/such/dir/t.json: cannot write it"
ln -s "$dir/elsewhere.json" "$dir/link.json"
DISCO_TRACE=$dir/link.json expect_start_failure "a symbolic link"
[[ ! -e $dir/elsewhere.json ]] || fail "the link's target was written"
mkfifo "$dir/fifo.json"  # a FIFO planted at the path must not block the job (no reader comes)
DISCO_TRACE=$dir/fifo.json expect_start_failure "DISCO_TRACE=$dir/fifo.json: cannot write it: .*a FIFO"
if [[ $(id -u) -eq 0 ]]; then  # a file another user made where the trace should go
  : >"$dir/theirs.json"
  chown 12345 "$dir/theirs.json"
  DISCO_TRACE=$dir/theirs.json expect_start_failure "owned by uid 12345, not a file of yours"
  [[ ! -s $dir/theirs.json ]] || fail "another user's file was written"
fi
DISCO_TRACE=$dir/t.json DISCO_TRACE_EVENTS=lots expect_start_failure "DISCO_TRACE_EVENTS"
DISCO_TRACE=$dir/t.json DISCO_TRACE_EVENTS=-5 expect_start_failure "DISCO_TRACE_EVENTS"
echo "PASS"
