#!/usr/bin/env bash
# launch/demo's reference check (launch/demo-check): PASS on disco-demo's own output, FAIL (exit 1)
# when a token or the logits differ, skipped (77) for an HDF5 model.
#   run_demo_check_test.sh PYTHON MPIEXEC DISCO_DEMO [mpiexec flags...]
set -uo pipefail
py=$1 mpiexec=$2 demo=$3
shift 3
check=$(cd "$(dirname "$0")/../../launch" && pwd)/demo-check
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
args=(--hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 256 --seed 5 --prompt 1,2,3
  --prompt 9,8 --max-new-tokens 6)
TMPDIR=$dir timeout 120 "$mpiexec" -n 2 "$@" "$demo" "${args[@]}" --dump-logits "$dir/l.npy" \
  >"$dir/out.log" 2>&1 || { cat "$dir/out.log"; fail "disco-demo failed"; }
"$py" "$check" "$dir/out.log" "$dir/l.npy" "${args[@]}" || fail "PASS expected"
# One token changed: FAIL.
awk '/^generated:/ && !done {$2 = ($2 + 1) % 256; done = 1} {print}' "$dir/out.log" >"$dir/bad.log"
"$py" "$check" "$dir/bad.log" "$dir/l.npy" "${args[@]}"
rc=$?
((rc == 1)) || fail "a changed token gave exit $rc, not 1"
# Logits off by more than the tolerance: FAIL.
"$py" -c "import numpy as np; a = np.load('$dir/l.npy'); a[0, 0, 0] += 1.0; np.save('$dir/bad.npy', a)"
"$py" "$check" "$dir/out.log" "$dir/bad.npy" "${args[@]}"
rc=$?
((rc == 1)) || fail "changed logits gave exit $rc, not 1"
echo "PASS"
