#!/usr/bin/env bash
# disco's tokenizers against Hugging Face's tokenizers and sentencepiece (check_tokenizers.py),
# in the virtual environment launch/test makes (launch/common.sh's disco_hf_venv): $DISCO_HF_VENV,
# else .venv-hf at the top of the source tree. Exit 77 (CTest's skip), saying why, without one.
#   run_check_test.sh PYTHON_SCRIPT ARGS...
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${DISCO_HF_VENV:-$(cd "$here/../.." && pwd)/.venv-hf}
if [[ ! -f $venv/.disco-ready ]] || ! "$venv/bin/python" -c 'import sentencepiece, tokenizers'; then
  echo "SKIP: no environment with tokenizers and sentencepiece at $venv (./launch/test makes it:"
  echo "launch/common.sh's disco_hf_venv, which needs PyPI; its log says why it failed: $venv.log)"
  exit 77
fi
script=$1
shift
exec "$venv/bin/python" "$here/$script" "$@"
