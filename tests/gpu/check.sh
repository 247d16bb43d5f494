#!/usr/bin/env bash
# The GPU check: disco's whole GPU path in one command, one summary line per step with its time.
#
#   tests/gpu/check.sh [--bundle FILE.tar.xz] [--cpu-only]
#
# Two modes:
# - From a bundle (--bundle, made on a CPU machine by tests/gpu/make-bundle.sh): for an offline
#   node with no package registry and possibly no Open MPI or HDF5. The bundle brings its programs
#   and libraries; the node brings the driver, the CUDA runtime, cuBLAS and NCCL (system,
#   toolkit or the nvidia-nccl Python wheel). One rank runs as an MPI singleton; the multi-rank
#   steps use the bundle's own mpirun.
# - From source (no --bundle): installs what is missing (as root, with a package registry), builds
#   with CUDA and NCCL for this node's GPU architecture, and runs the same steps with mpirun.
#
# Steps: the unit suite (CUDA tensors included), every builtin through NCCL at one rank (twice, to
# catch stream-order races), the MPI suite at one rank on the GPU machine, disco-demo on CUDA in
# float32 and bfloat16 against its CPU reference, a larger demo, compute-sanitizer memcheck (when
# present and able to run here: a probe decides, else the step is a SKIP with the reason), the
# Llama decoder on the GPU against the NumPy reference (float32 and bfloat16) and its decode
# tokens/s at one rank beside the CPU's, two ranks on one GPU (they must skip, not fail), and with
# two GPUs or more the multi-rank suites and demo. A step that skips on a node with a GPU counts as
# failed. When nccl-np1 fails, it runs once more with NCCL_CUMEM_ENABLE=0 (NCCL's cuMem
# allocations, which sandboxed runtimes may refuse), and the later steps keep that setting when the
# rerun passes. Without a GPU, --cpu-only runs the steps a CPU can (CI does, so the bundle cannot
# rot); otherwise no GPU is an error. Logs, node.txt (with the libnccl, libcudart and libmpi the
# programs load) and summary.txt go to $OUT (default ./gpu-check-out). Exit code: failed steps.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle="" cpu_only=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --cpu-only) cpu_only=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed 's/^# \{0,1\}//; /^set -uo/d'; exit 0 ;;
    *) echo "check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
scratch=$(mktemp -d)  # checkpoints and the unpacked bundle: large, and not logs
trap 'rm -rf "$scratch"' EXIT
: > "$out/summary.txt"
failed=0
started=$SECONDS

say() { echo "$*" | tee -a "$out/summary.txt"; }
# step NAME SECONDS CMD...: runs CMD with a time limit, its output in NAME.log, its verdict in
# $verdict. With NO_SKIPS set (a test name prefix), a googletest case of that name that skipped
# fails the step: on a GPU node a GPU test must run.
verdict=""
step() {
  local name=$1 limit=$2 rc=0 t0=$SECONDS skipped
  shift 2
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  verdict=PASS
  if ((rc == 124 || rc == 137)); then verdict="FAIL (timed out after ${limit} s)"
  elif ((rc != 0)); then verdict="FAIL (exit $rc)"; fi
  if [[ $verdict == PASS && -n ${NO_SKIPS:-} ]] &&
    skipped=$(grep -a -m1 -o "SKIPPED \] .*${NO_SKIPS}[A-Za-z0-9_.]*" "$out/$name.log"); then
    verdict="FAIL (${skipped#SKIPPED ] } skipped on a GPU node)"
  fi
  printf '%-22s %-60s %5d s\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$out/summary.txt"
  if [[ $verdict != PASS ]]; then
    failed=$((failed + 1))
    tail -15 "$out/$name.log" | sed 's/^/    | /'
  fi
}
skip() { printf '%-22s %-60s %5s\n' "$1" "SKIP ($2)" - | tee -a "$out/summary.txt"; }

# ---- The node --------------------------------------------------------------------------------
export PATH=/usr/local/cuda/bin:$PATH
gpus=$( (nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true) | grep -c '^[0-9]')
{
  echo "== node: $(hostname), $(nproc) cores, $gpus GPU(s)"
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv 2>/dev/null
  command -v nvcc >/dev/null && nvcc --version | tail -1
  command -v compute-sanitizer >/dev/null && echo "compute-sanitizer: $(command -v compute-sanitizer)"
} 2>&1 | tee "$out/node.txt"
if ((gpus == 0 && !cpu_only)); then
  say "check.sh: no GPU on this node (nvidia-smi lists none); --cpu-only runs the CPU steps alone"
  exit 1
fi
export DISCO_TIMEOUT=${DISCO_TIMEOUT:-90} NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# The HDF5 tests' fixtures need a python3 with h5py (a GPU image may have it only in a venv).
for py in ${DISCO_TEST_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c "import h5py" 2>/dev/null; then export DISCO_TEST_PYTHON=$py; break; fi
done
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1

# ---- Programs: from the bundle, or built here ------------------------------------------------
if [[ -n $bundle ]]; then
  [[ -f $bundle ]] || { say "check.sh: bundle '$bundle' not found"; exit 1; }
  step unpack 60 tar -C "$scratch" -xJf "$bundle"
  B=$scratch/disco-gpu-bundle
  [[ -d $B ]] || { say "check.sh: $bundle holds no disco-gpu-bundle/"; exit 1; }
  cat "$B/MANIFEST" >>"$out/node.txt"
  # The node's CUDA libraries: the toolkit, the system, and NVIDIA's Python wheels.
  cuda_libs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import glob, site; [print(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib")]' 2>/dev/null); do
    [[ -d $d ]] && cuda_libs+=":$d"
  done
  # The bundle's lib/ holds Debian's builds of libraries every node has too (libcrypto, libz,
  # libcurl, ...): it goes first on the library path of the bundle's programs only, through a
  # wrapper of the same name for each, never on that of python3, compute-sanitizer or the shell.
  # A python3 that a disco program starts (the HDF5 fixtures) gets the node's path back.
  bundle_libs="$B/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  wrap=$scratch/bin
  mkdir -p "$wrap"
  q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }  # quoted for /bin/sh
  for program in "$B"/bin/*; do
    name=$(basename "$program")
    [[ $name == singleton-exec ]] && continue  # a script that execs its (wrapped) program
    printf '#!/bin/sh\n# %s with the bundle libraries first (tests/gpu/check.sh)\n' "$name" >"$wrap/$name"
    printf 'LD_LIBRARY_PATH=%s\nexport LD_LIBRARY_PATH\nexec %s "$@"\n' "$(q "$bundle_libs")" \
      "$(q "$program")" >>"$wrap/$name"
    chmod +x "$wrap/$name"
  done
  if [[ -n ${DISCO_TEST_PYTHON:-} ]]; then
    py_real=$(command -v "$DISCO_TEST_PYTHON")
    printf '#!/bin/sh\n# %s with the node libraries, also when a disco program starts it\n' \
      "$py_real" >"$wrap/python3-node"
    if [[ -n ${LD_LIBRARY_PATH+set} ]]; then
      printf 'LD_LIBRARY_PATH=%s\nexport LD_LIBRARY_PATH\n' "$(q "$LD_LIBRARY_PATH")" >>"$wrap/python3-node"
    else
      printf 'unset LD_LIBRARY_PATH\n' >>"$wrap/python3-node"
    fi
    printf 'exec %s "$@"\n' "$(q "$py_real")" >>"$wrap/python3-node"
    chmod +x "$wrap/python3-node"
    export DISCO_TEST_PYTHON=$wrap/python3-node
  fi
  export PATH="$wrap:$PATH" OPAL_PREFIX=$B
  export OMPI_MCA_mca_base_component_path=$B/lib/openmpi PMIX_MCA_mca_base_component_path=$B/lib/pmix
  export OMPI_MCA_ess_singleton_isolated=1 DISCO_TEST_SOURCE_DIR=$B/tests
  export DISCO_TEST_SHARED_DIR=$scratch/shared
  bin=$wrap demo=$wrap/disco-demo demo_test=$B/tests/demo/run_demo_test.sh
  llama_check=$B/tests/llama/check_disco.py
  one=$B/bin/singleton-exec
  mpirun_cmd=$wrap/mpirun
  ldd_env=(env LD_LIBRARY_PATH="$bundle_libs")
  if "${ldd_env[@]}" ldd "$B/bin/disco_gpu_tests" | grep 'not found' >"$out/ldd.log"; then
    say "check.sh: libraries missing on this node:"; cat "$out/ldd.log" | tee -a "$out/summary.txt"
    exit 1
  fi
  real_bin=$B/bin mlp_demo=$B/bin/disco-demo-mlp
else
  build=${DISCO_BUILD_DIR:-$root/build-gpu}
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  step packages 600 bash -c "source '$root/launch/common.sh' && disco_ensure_packages python3-h5py"
  step configure 300 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDISCO_ENABLE_CUDA=ON -DDISCO_ENABLE_NCCL=ON -DDISCO_WERROR=ON -DDISCO_BUILD_BENCHMARKS=OFF \
    ${arch:+-DDISCO_CUDA_ARCHITECTURES=$arch}
  grep -q 'with the CUDA path' "$out/configure.log" ||
    { say "configure: disco-demo has no CUDA path (cuBLAS or nvcc missing)"; failed=$((failed + 1)); }
  step build 900 cmake --build "$build" -j"$(nproc)" --target disco_unit_tests disco_gpu_tests \
    disco_mpi_tests disco-demo disco-demo-mlp disco_llama_cuda
  bin=$build/tests demo=$build/src/tools/disco-demo demo_test=$root/tests/demo/run_demo_test.sh
  llama_check=$root/tests/llama/check_disco.py
  one=mpirun mpirun_cmd=mpirun
  ldd_env=(env) real_bin=$build/tests mlp_demo=$build/src/tools/disco-demo-mlp
fi
# The CUDA, NCCL and MPI libraries the programs load here (the node's, a wheel's or the bundle's).
{
  echo "== libraries of disco_gpu_tests and disco-demo-mlp"
  "${ldd_env[@]}" ldd "$real_bin/disco_gpu_tests" "$mlp_demo" 2>&1 |
    grep -E '^/|lib(nccl|cudart|cublas|mpi|open-pal|pmix|hdf5)[._a-z]*\.so'
} >>"$out/node.txt" 2>&1

# ---- Steps -------------------------------------------------------------------------------------
unit=$bin/disco_unit_tests gpu_tests=$bin/disco_gpu_tests mpi_tests=$bin/disco_mpi_tests
if ((gpus > 0)); then
  # TensorTest.CudaWithoutDeviceIsAClearError skips where there is a GPU, as it should.
  NO_SKIPS=TensorTest.CudaTensors step unit 120 "$unit"
  NO_SKIPS=Gpu step nccl-np1 240 "$one" -n 1 "$gpu_tests" --gtest_filter='Gpu*' --gtest_repeat=2
  if [[ $verdict != PASS && ${NCCL_CUMEM_ENABLE:-} != 0 ]]; then
    # NCCL's cuMem allocations (its default on recent drivers) are what a sandboxed runtime is
    # most likely to refuse: one rerun without them tells that apart from a failure of disco's.
    NCCL_CUMEM_ENABLE=0 NO_SKIPS=Gpu step nccl-np1-nocumem 240 "$one" -n 1 "$gpu_tests" \
      --gtest_filter='Gpu*' --gtest_repeat=2
    if [[ $verdict == PASS ]]; then
      say "nccl-np1 failed with NCCL's defaults and passed with NCCL_CUMEM_ENABLE=0 (NCCL's cuMem"
      say "  allocations fail on this node): the later steps run with NCCL_CUMEM_ENABLE=0"
      export NCCL_CUMEM_ENABLE=0
    else
      say "nccl-np1 failed with NCCL_CUMEM_ENABLE=0 too: NCCL's cuMem use is not the cause"
    fi
  fi
  for dtype in float32 bfloat16; do
    step demo-cuda-$dtype 180 "$demo_test" "$one" "$demo" 1 "$dtype" -- --device cuda
  done
  step demo-cuda-large 180 "$one" -n 1 "$demo" --mlp --hidden 1024 --ffn 4096 --tokens 512 --layers 4 \
    --steps 5 --warmup 2 --dtype bfloat16 --device cuda --checkpoint "$scratch/large.h5"
  # compute-sanitizer may be installed where it cannot run (gVisor: "Device not supported", then
  # error 999 at the first allocation): a probe on the smallest CUDA test decides. A probe that
  # reports a memory error of disco's does not skip: memcheck then runs and fails.
  if ! command -v compute-sanitizer >/dev/null; then
    skip memcheck "compute-sanitizer is not on this node"
  elif timeout -k 10 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$unit" \
    --gtest_filter=TensorTest.CudaTensors >"$out/memcheck-probe.log" 2>&1 &&
    grep -q '^\[  PASSED  \] 1 test' "$out/memcheck-probe.log"; then
    step memcheck 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$demo" --mlp --hidden 128 \
      --ffn 256 --tokens 16 --layers 2 --steps 1 --warmup 0 --dtype bfloat16 --device cuda \
      --checkpoint "$scratch/memcheck.h5"
  elif grep -qE '^=+ (Invalid|Uninitialized|Leaked|Race|Barrier|Misaligned|Out-of-range)' \
    "$out/memcheck-probe.log"; then
    step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$unit" \
      --gtest_filter=TensorTest.CudaTensors
  else
    why=$(grep -v 'ERROR SUMMARY' "$out/memcheck-probe.log" | grep -m1 -iE 'not supported|error|fail|skipped' |
      sed 's/^=* *//' | cut -c1-70)
    skip memcheck "compute-sanitizer cannot run here: ${why:-its probe did not pass, see memcheck-probe.log}"
  fi
  # The Llama decoder on the GPU (cuBLAS, CUDA kernels, allreduces queued on the compute stream)
  # against the independent NumPy reference: tokens equal, logits within 1e-4 (float32) or 5e-2
  # (bfloat16) of the largest; then its decode speed at one rank on a model of about 100 M
  # parameters, beside the CPU path's on this node.
  for dtype in float32 bfloat16; do
    step llama-cuda-$dtype 600 "${DISCO_TEST_PYTHON:-python3}" "$llama_check" --mpiexec "$one" \
      --demo "$demo" --np 1 --dtype "$dtype" --no-errors --demo-flag=--device --demo-flag=cuda
  done
  llama_speed=(--hidden 768 --layers 12 --heads 12 --kv-heads 4 --ffn 2048 --vocab 16000
    --prompt 1,5,9,23,4,77,12,8 --max-new-tokens 64 --repeat 3)
  for device in cuda cpu; do
    step llama-speed-$device 300 "$one" -n 1 "$demo" "${llama_speed[@]}" --device "$device"
    grep -E '^(prefill|decode|runtime share|decode step)' "$out/llama-speed-$device.log" |
      sed "s/^/    $device: /" | tee -a "$out/summary.txt"
  done
else
  step unit 120 "$unit"
  skip nccl-np1 "no GPU"
  for dtype in float32 bfloat16; do skip demo-cuda-$dtype "no GPU"; done
  for dtype in float32 bfloat16; do skip llama-cuda-$dtype "no GPU"; done
  # The same reference check on the CPU path: the bundle's check and its Python run on this node.
  step llama-cpu 300 "${DISCO_TEST_PYTHON:-python3}" "$llama_check" --mpiexec "$one" \
    --demo "$demo" --np 1 --dtype float32 --no-errors --case f32-gqa
fi
# The MPI suite on this node, one rank (auto picks NCCL where there is a GPU): unchanged results.
step mpi-np1 240 "$one" -n 1 "$mpi_tests"
step demo-cpu 120 "$demo_test" "$one" "$demo" 1 float32
if [[ -x $mpirun_cmd || -n $(command -v "$mpirun_cmd") ]] && "$mpirun_cmd" --version >/dev/null 2>&1; then
  if ((gpus >= 2)); then
    np=$((gpus < 4 ? gpus : 4))
    NO_SKIPS=Gpu step nccl-np$np 300 "$mpirun_cmd" -n "$np" "$gpu_tests" --gtest_filter='Gpu*'
    step demo-cuda-np$np 180 "$demo_test" "$mpirun_cmd" "$demo" "$np" bfloat16 -- --device cuda
    step mpi-np$np 300 "$mpirun_cmd" -n "$np" "$mpi_tests"
  else
    # More ranks than GPUs: every GPU test skips (one GPU per rank), nothing fails or hangs.
    step np2-one-gpu 120 "$mpirun_cmd" -n 2 "$gpu_tests" --gtest_filter='Gpu*'
    skip multi-rank "$gpus GPU(s): the multi-rank NCCL steps need two"
  fi
else
  skip multi-rank "no working mpirun"
fi

say "== $failed step(s) failed, $((SECONDS - started)) s in all (logs in $out)"
exit $((failed > 125 ? 125 : failed))
