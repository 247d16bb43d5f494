#!/usr/bin/env bash
# The benchmark's own virtual environment (sourced, or run): PyTorch 2.x from PyPI, numpy and the
# gguf writer, in $DISCO_BENCH_VENV (default $DISCO_BUILD_DIR/venv-bench, i.e. build/venv-bench:
# apart from any other venv the tests make, so that neither pins the other's packages). Reused
# when it is already there; ./launch/test's bench stage calls disco_bench_venv (no --llama-cpp).
#   source bench/venv.sh && disco_bench_venv               # torch, numpy, gguf (CI: this only)
#   source bench/venv.sh && disco_bench_venv --llama-cpp   # + llama-cpp-python, built from its
#                                                          #   sdist (llama.cpp inside): minutes
#   bench/venv.sh [--llama-cpp]                            # the same, run as a script
#   source bench/venv.sh && disco_bench_llama_server       # llama.cpp's llama-server (its path)
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

# llama.cpp's own server (llama-server, for bench/serve_load.py), built natively from the llama.cpp
# inside the same llama-cpp-python source distribution (PyPI) into $DISCO_BENCH_VENV/llama-server:
# minutes of two cores. Prints its path.
disco_bench_llama_server() {
  local venv=$DISCO_BENCH_VENV dir
  dir=$venv/llama-server
  if [[ ! -x $dir/build/bin/llama-server ]]; then
    disco_bench_venv || return 1
    mkdir -p "$dir"
    "$venv/bin/python" -m pip download -q --no-binary :all: --no-deps -d "$dir" \
      "llama-cpp-python${DISCO_LLAMA_CPP_VERSION:+==$DISCO_LLAMA_CPP_VERSION}" >&2 || return 1
    tar -xzf "$(ls -t "$dir"/llama_cpp_python-*.tar.gz | head -1)" -C "$dir" || return 1
    local src
    src=$(ls -d "$dir"/llama_cpp_python-*/vendor/llama.cpp | head -1)
    cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF >&2 || return 1
    cmake --build "$dir/build" --target llama-server -j"${DISCO_BUILD_JOBS:-2}" >&2 || return 1
  fi
  echo "$dir/build/bin/llama-server"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  disco_bench_venv "$@"
fi
