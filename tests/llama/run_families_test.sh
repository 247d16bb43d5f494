#!/usr/bin/env bash
# disco-demo against transformers itself: a random checkpoint of each family (Llama with llama3
# and linear rope scaling and biases, Mistral with a sliding window, Qwen2, Qwen3), made and run
# by transformers (float32, bfloat16 and float16 storage), 32 greedy tokens of 3 prompts equal and
# logits close at 1, 2 and 4 ranks, for disco-demo and examples/generate.py (check_families.py says
# what exactly).
#   run_families_test.sh MPIEXEC DISCO_DEMO [mpiexec flags...]
# It runs in the virtual environment launch/test makes (launch/common.sh's disco_hf_venv:
# torch, transformers, safetensors, numpy): $DISCO_HF_VENV, else .venv-hf at the top of the
# source tree. Exit 77 (CTest's skip), saying why, when there is none.
set -euo pipefail
mpiexec=$1 demo=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${DISCO_HF_VENV:-$(cd "$here/../.." && pwd)/.venv-hf}
if [[ ! -f $venv/.disco-ready ]]; then
  echo "SKIP: no transformers environment at $venv (./launch/test makes it: launch/common.sh's"
  echo "disco_hf_venv, which needs PyPI; its log says why it failed: $venv.log)"
  exit 77
fi
flags=()
for f in "$@"; do flags+=(--mpiexec-flag="$f"); done
# examples/generate.py too, in the venv's Python (the same CPython as Debian's, which disco is
# built for: PYTHONPATH names the build's python/ directory).
exec "$venv/bin/python" "$here/check_families.py" --mpiexec "$mpiexec" --demo "$demo" \
  --generate "$here/../../examples/generate.py" \
  ${DISCO_FAMILIES_NP:+--np "$DISCO_FAMILIES_NP"} "${flags[@]}"
