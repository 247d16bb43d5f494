#!/usr/bin/env bash
# PyTorch worker functions (label torch): tests/python/test_torch.py in a job of 2 ranks, and
# examples/tp_mlp_torch.py in float32 and bfloat16, in a job and through disco.ProcessSession.
# Skips (77) with the reason where PyTorch is not installed (Debian: python3-torch).
#   run_torch_test.sh PYTHON -- MPIEXEC ARGS...      (PYTHONPATH must find disco)
set -u
py=$1
shift
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "skipped: PyTorch is not installed for $py (Debian: python3-torch)"
  exit 77
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" DISCO_TEST_TORCH=1
rc=0
echo "+ $* 2 $py run_in_job.py test_torch.py"
timeout 300 "$@" 2 "$py" "$here/run_in_job.py" -q -rs "$here/test_torch.py" || rc=1
for dtype in float32 bfloat16; do
  echo "+ $* 2 $py examples/tp_mlp_torch.py --dtype $dtype"
  out=$(timeout 300 "$@" 2 "$py" "$here/../../examples/tp_mlp_torch.py" --dtype "$dtype" 2>&1)
  echo "$out" | grep tp_mlp_torch
  echo "$out" | grep -q ": OK$" || { echo "$out" | tail -20; rc=1; }
done
echo "+ $py examples/tp_mlp_torch.py --process 2"
out=$(timeout 300 "$py" "$here/../../examples/tp_mlp_torch.py" --process 2 2>&1)
echo "$out" | grep tp_mlp_torch
echo "$out" | grep -q ": OK$" || { echo "$out" | tail -20; rc=1; }
exit $rc
