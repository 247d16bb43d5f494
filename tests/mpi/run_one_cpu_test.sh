#!/bin/bash
# Two ranks that may run on one CPU only (taskset here; a cpuset of Slurm or a container, or a
# binding, alike) while the node has more: the shared-memory channel counts the CPUs of the ranks'
# affinity masks, not the node's online CPUs, and its waits yield at once (spinning, each wait
# spent the peer's time slice: 576 us per 4 KiB allreduce in a function against 2.6). Where the
# node has two CPUs, two ranks without taskset are not told so.
#
#   run_one_cpu_test.sh MPIEXEC PROGRAM [MPIEXEC FLAGS...]
mpiexec=$1 prog=$2
shift 2
flags=("$@")
filter=--gtest_filter='CclTest.AllReduceInFunction*:CclTest.AllReduceEveryOp*'
line="ranks on this node may run on 1 CPU; their waits yield at once"
out=$(DISCO_LOG_LEVEL=info timeout 250 "$mpiexec" -n 2 "${flags[@]}" taskset -c 0 "$prog" \
  "$filter" 2>&1) && rc=0 || rc=$?
((rc == 0)) || { echo "FAIL: 2 ranks on CPU 0 (exit $rc)"; echo "$out" | tail -20; exit 1; }
if [[ $(grep -c "$line" <<<"$out") -ne 2 ]]; then
  echo "FAIL: 2 ranks on CPU 0: not told on both ranks ('$line')"; echo "$out" | tail -20; exit 1
fi
echo "ok: 2 ranks on CPU 0: $(grep -m1 "$line" <<<"$out")"
if (($(nproc) >= 2)); then
  out=$(DISCO_LOG_LEVEL=info timeout 250 "$mpiexec" -n 2 "${flags[@]}" "$prog" "$filter" 2>&1) &&
    rc=0 || rc=$?
  ((rc == 0)) || { echo "FAIL: 2 ranks (exit $rc)"; echo "$out" | tail -20; exit 1; }
  if grep -q "may run on" <<<"$out"; then
    echo "FAIL: 2 ranks on $(nproc) CPUs told they share fewer"; grep "may run on" <<<"$out"; exit 1
  fi
  echo "ok: 2 ranks on $(nproc) CPUs: waits spin first"
fi
echo "PASS: the channel sees the ranks' CPUs"
