#!/usr/bin/env bash
# The benchmark's own virtual environment (sourced, or run): PyTorch 2.x from PyPI, numpy and the
# gguf writer, in $DISCO_BENCH_VENV (default $DISCO_BUILD_DIR/venv-bench, i.e. build/venv-bench:
# apart from any other venv the tests make, so that neither pins the other's packages). Reused
# when it is already there; ./launch/test's bench stage calls disco_bench_venv (no --llama-cpp).
#   source bench/venv.sh && disco_bench_venv               # torch, numpy, gguf (CI: this only)
#   source bench/venv.sh && disco_bench_venv --llama-cpp   # + llama-cpp-python, built from its
#                                                          #   sdist (llama.cpp inside): minutes
#   bench/venv.sh [--llama-cpp]                            # the same, run as a script
# llama-cpp-python is built natively (-DGGML_NATIVE=ON) for this machine's CPU, without the
# server or the examples; the flags are written to $DISCO_BENCH_VENV/llama-cpp-build-flags.txt,
# which bench/decode_bench.py prints with its figures. CI never builds it (the smoke test skips
# llama.cpp unless it is installed).
DISCO_BENCH_VENV=${DISCO_BENCH_VENV:-${DISCO_BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}/venv-bench}

disco_bench_venv() {
  local venv=$DISCO_BENCH_VENV py
  py=$venv/bin/python
  if [[ ! -x $py ]]; then
    echo "+ python3 -m venv $venv"
    /usr/bin/python3 -m venv "$venv" || return 1
  fi
  if ! "$py" -c "import torch, numpy, gguf" 2>/dev/null; then
    echo "+ $py -m pip install torch numpy gguf  (PyPI)"
    "$py" -m pip install -q "torch>=2" numpy gguf || return 1
  fi
  if [[ ${1:-} == --llama-cpp ]] && ! "$py" -c "import llama_cpp" 2>/dev/null; then
    local flags="-DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=OFF"
    flags+=" -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DGGML_OPENMP=ON"
    echo "+ CMAKE_ARGS='$flags' $py -m pip install --no-binary llama-cpp-python llama-cpp-python"
    CMAKE_ARGS=$flags CMAKE_BUILD_PARALLEL_LEVEL=${DISCO_BUILD_JOBS:-2} \
      "$py" -m pip install -q --no-binary llama-cpp-python llama-cpp-python || return 1
    { echo "CMAKE_ARGS=$flags"; echo "cc: $(cc --version | head -1)"
      echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"; } \
      >"$venv/llama-cpp-build-flags.txt"
  fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  disco_bench_venv "$@"
fi
