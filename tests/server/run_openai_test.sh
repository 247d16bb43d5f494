#!/usr/bin/env bash
# disco-llm-server with the official openai client (check_openai.py), in the virtual environment
# launch/test makes (launch/common.sh's disco_hf_venv, which holds openai): $DISCO_HF_VENV, else
# .venv-hf at the top of the source tree. Exit 77 (CTest's skip), saying why, when there is none.
#   run_openai_test.sh MPIEXEC DISCO_LLM_SERVER DISCO_DEMO [mpiexec flags...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${DISCO_HF_VENV:-$(cd "$here/../.." && pwd)/.venv-hf}
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  echo "SKIP: no openai package in $venv (./launch/test installs it: launch/common.sh's"
  echo "disco_hf_venv, which needs PyPI; its log says why it failed: $venv.log)"
  exit 77
fi
exec "$venv/bin/python" "$here/check_openai.py" "$@"
