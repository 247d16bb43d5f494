#!/usr/bin/env bash
# Builds disco with CUDA and NCCL and runs the GPU suites in one go, on a machine with GPUs (the
# NCCL collective suite, then disco-demo on CUDA tensors in float32 and bfloat16):
#   tests/gpu/run-on-gpu.sh [ranks]        (default: one rank per visible GPU, at least 1)
# Prints the test output and a one-line verdict; the exit code is non-zero when a test failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DISCO_BUILD_DIR:-$root/build-gpu}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
np=${1:-$(( gpus > 0 ? gpus : 1 ))}
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
echo "+ cmake -S $root -B $build -DDISCO_ENABLE_CUDA=ON -DDISCO_ENABLE_NCCL=ON"
cmake -S "$root" -B "$build" -DDISCO_ENABLE_CUDA=ON -DDISCO_ENABLE_NCCL=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target disco_gpu_tests disco_unit_tests disco-demo
"$build/tests/disco_unit_tests" --gtest_filter='*Cuda*'
echo "+ mpirun -n $np --oversubscribe $build/tests/disco_gpu_tests --gtest_filter='Gpu*'"
mpirun -n "$np" --oversubscribe "$build/tests/disco_gpu_tests" --gtest_filter='Gpu*'
for dtype in float32 bfloat16; do
  "$root/tests/demo/run_demo_test.sh" mpirun "$build/src/tools/disco-demo" "$np" "$dtype" \
    --oversubscribe -- --device cuda
done
echo "gpu suites: passed at $np rank(s)"
