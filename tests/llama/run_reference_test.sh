#!/usr/bin/env bash
# disco-demo's Llama decoder (--model DIR) against the independent NumPy reference of Hugging
# Face LlamaForCausalLM, at NP ranks in DTYPE: random checkpoints (one file and sharded, float32,
# float16 and bfloat16 storage, tied embeddings, grouped-query attention), 32 greedy tokens of two
# prompts equal and their logits close, and broken checkpoints failing with a message naming the
# tensor, within 120 s (check_disco.py says what exactly).
#   run_reference_test.sh MPIEXEC DISCO_DEMO NP DTYPE [mpiexec flags...]
# Exit 77 (CTest's skip) while disco-demo has no --model. The Python with numpy is $PYTHON, or
# the first of /usr/bin/python3, python3 that imports numpy.
set -euo pipefail
mpiexec=$1 demo=$2 np=$3 dtype=$4
shift 4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-}
if [[ -z $python ]]; then
  for cand in /usr/bin/python3 python3; do
    if "$cand" -c 'import numpy' 2>/dev/null; then python=$cand; break; fi
  done
fi
if [[ -z $python ]]; then
  echo "SKIP: no Python with numpy (set PYTHON)"
  exit 77
fi
flags=()
for f in "$@"; do flags+=(--mpiexec-flag="$f"); done
exec "$python" "$here/check_disco.py" --mpiexec "$mpiexec" --demo "$demo" --np "$np" \
  --dtype "$dtype" "${flags[@]}"
