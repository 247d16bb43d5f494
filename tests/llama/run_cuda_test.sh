#!/usr/bin/env bash
# The decoder's GPU path (disco-demo --device cuda):
# - libdisco_llama_cuda.so, when this build has it, loads and hands out the table of the version
#   libdisco_llama expects (a module that does not load or does not match is found here, not on
#   the first GPU node);
# - on a machine with a GPU per rank: the NumPy reference check of the GPU path at one rank
#   (check_disco.py --demo-flag=--device --demo-flag=cuda, float32 and bfloat16);
# - without one: --device cuda fails at once with InitCCL's message naming the missing device.
#   run_cuda_test.sh PYTHON MPIEXEC DISCO_DEMO BUILD_DIR [mpiexec flags...]
set -uo pipefail
python=$1 mpiexec=$2 demo=$3 build=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
module=$build/libdisco_llama_cuda.so
if [[ ! -f $module ]]; then
  echo "SKIP: $module was not built (no CUDA, cuBLAS or nvcc at configure time)"
  exit 77
fi
"$python" - "$module" "$here/../../models/llama/cuda_kernels.h" <<'PY' || exit 1
import ctypes, re, sys
module, header = sys.argv[1], sys.argv[2]
want = int(re.search(r"constexpr int kVersion = (\d+);", open(header).read()).group(1))
lib = ctypes.CDLL(module)
lib.disco_llama_cuda_ops.restype = ctypes.POINTER(ctypes.c_int)
got = lib.disco_llama_cuda_ops()[0]
print(f"{module}: loads, table version {got} (cuda_kernels.h: {want})")
sys.exit(0 if got == want else 1)
PY
gpus=$( (nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true) | grep -c '^[0-9]')
if ((gpus > 0)); then
  for dtype in float32 bfloat16; do
    "$python" "$here/check_disco.py" --mpiexec "$mpiexec" --demo "$demo" --np 1 --dtype "$dtype" \
      --no-errors --demo-flag=--device --demo-flag=cuda "${@/#/--mpiexec-flag=}" || exit 1
  done
  exit 0
fi
out=$(timeout -k 10 120 "$mpiexec" -n 1 "$@" "$demo" --device cuda --prompt 1,2,3 \
  --max-new-tokens 2 2>&1)
rc=$?
if ((rc == 0 || rc == 124 || rc == 137)) || ! grep -q "InitCCL('nccl'): .*no CUDA device" <<<"$out"; then
  echo "$out" | tail -20
  echo "FAIL: --device cuda without a GPU should fail at once naming the missing device (exit $rc)"
  exit 1
fi
echo "ok: without a GPU, --device cuda fails at once: $(grep -o "InitCCL('nccl'): [^[]*" <<<"$out" | head -1)"
echo "SKIP: no GPU here; the GPU path's reference check runs on a GPU node (tests/gpu/check.sh)"
exit 77
