#!/usr/bin/env bash
# disco-demo --mlp (the tensor-parallel MLP demo) on a small model: at NP ranks in DTYPE its output matches the single-process
# reference (the demo exits 0 only then); in "bad" mode, checkpoints that do not fit the model
# fail with a message naming the dataset, and nothing hangs.
#   run_demo_test.sh MPIEXEC DEMO NP DTYPE [mpiexec flags...] [-- demo flags...]
#   run_demo_test.sh MPIEXEC DEMO bad [mpiexec flags...]
# With "--device cuda" among the demo flags and fewer GPUs than ranks, it exits 77 (CTest's skip)
# with the reason.
set -euo pipefail
mpiexec=$1 demo=$2 mode=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
small=(--mlp --hidden 64 --ffn 192 --layers 2 --tokens 8 --steps 2 --warmup 1)

if [[ $mode != bad ]]; then
  dtype=$1
  shift
  flags=() extra=()
  while [[ $# -gt 0 && $1 != -- ]]; do flags+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift && extra=("$@")
  if [[ " ${extra[*]} " == *" --device cuda "* ]]; then
    # One GPU per rank (NCCL does not support two ranks on one GPU); MIG instances do not count.
    gpus=$( (nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true) | grep -c '^[0-9]' || true)
    if (( gpus < mode )); then
      echo "SKIP: --device cuda at $mode rank(s) needs a GPU per rank; this machine has $gpus"
      exit 77
    fi
  fi
  out=$("$mpiexec" -n "$mode" "${flags[@]}" "$demo" "${small[@]}" --dtype "$dtype" \
    --checkpoint "$dir/ckpt.h5" "${extra[@]}" 2>&1) || { echo "$out"; echo "FAIL: disco-demo exited non-zero"; exit 1; }
  echo "$out"
  grep -q 'check vs single-process reference: .*PASS' <<<"$out" || { echo "FAIL: no PASS"; exit 1; }
  # Steps by replay unless --calls; both ways' runtime shares are printed.
  want='by replay of a captured graph'
  [[ " ${extra[*]} " == *" --calls "* ]] && want='call by call (--calls)'
  grep -qF "[steps] $want" <<<"$out" || { echo "FAIL: steps not run $want"; exit 1; }
  for way in 'by replay' 'call by call'; do
    grep -q "runtime (dispatch and control) share of a step, $way *: [0-9.]*%" <<<"$out" ||
      { echo "FAIL: no runtime share $way"; exit 1; }
  done
  exit 0
fi

# A good checkpoint first (2 layers, hidden 64).
"$mpiexec" -n 2 "$@" "$demo" "${small[@]}" --checkpoint "$dir/good.h5" > /dev/null
head -c $(( $(stat -c %s "$dir/good.h5") / 2 )) "$dir/good.h5" > "$dir/truncated.h5"
fail=0
expect_failure() {  # expect_failure NEEDLE demo-args...
  local needle=$1 out rc=0
  shift
  out=$(timeout 120 "$mpiexec" -n 2 "$@" 2>&1) || rc=$?
  if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    echo "FAIL: exit $rc for: $*"; echo "$out"; fail=1
  elif ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: no '$needle' for: $*"; echo "$out"; fail=1
  else
    echo "ok: $needle"
  fi
}
expect_failure "checkpoint dataset 'layers/0/w1' gives worker 0 a shard of shape (64, 96)" \
  "$@" "$demo" "${small[@]}" --hidden 32 --checkpoint "$dir/good.h5"
expect_failure "'layers/2/w1'): no such dataset in the file" \
  "$@" "$demo" "${small[@]}" --layers 3 --checkpoint "$dir/good.h5"
expect_failure "'layers/0/w1'): the file is damaged or truncated" \
  "$@" "$demo" "${small[@]}" --checkpoint "$dir/truncated.h5"
expect_failure "checkpoint dataset 'layers/0/w1' holds float32; the model runs in bfloat16" \
  "$@" "$demo" "${small[@]}" --dtype bfloat16 --checkpoint "$dir/good.h5"
exit $fail
