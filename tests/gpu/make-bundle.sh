#!/usr/bin/env bash
# Makes the offline GPU bundle on a CPU machine: disco's test programs and disco-demo from a build
# with CUDA and NCCL, plus every library an offline GPU node may lack (Open MPI with its plugins
# and its launcher, PMIx, hwloc, HDF5, OpenBLAS and what they load), in one .tar.xz that
# tests/gpu/check.sh --bundle runs from. Not included: the C and C++ runtimes, and the CUDA
# runtime, cuBLAS and NCCL, which a GPU node has (in the toolkit, the system or a Python wheel).
# Open MPI plugins that need network fabrics the bundle does not carry (verbs, OFI, UCX, PSM) are
# left out; one node's ranks talk through shared memory and TCP.
#   tests/gpu/make-bundle.sh [BUILD_DIR] [OUT.tar.xz]
#       (default: build/ and BUILD_DIR/disco-gpu-bundle.tar.xz)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$build/disco-gpu-bundle.tar.xz}
[[ $out = /* ]] || out=$PWD/$out

die() { echo "make-bundle: $*" >&2; exit 1; }
grep -q '^#define DISCO_HAVE_NCCL 1' "$build/include/disco/config.h" ||
  die "$build was configured without NCCL (configure with -DDISCO_ENABLE_CUDA=ON -DDISCO_ENABLE_NCCL=ON)"
programs=("$build/tests/disco_unit_tests" "$build/tests/disco_gpu_tests"
  "$build/tests/disco_mpi_tests" "$build/src/tools/disco-demo" "$build/src/tools/disco-demo-mlp")
for p in "${programs[@]}"; do [[ -x $p ]] || die "$p is missing (build the tests and disco-demo)"; done
# disco-demo --mlp runs disco-demo-mlp, next to it in bin/, which carries the CUDA path.
[[ $(ldd "$build/src/tools/disco-demo-mlp") == *libcublas* ]] ||
  die "disco-demo-mlp in $build has no CUDA path (it needs cuBLAS and nvcc at configure time)"
# The Llama decoder's GPU path is a module libdisco_llama loads from its own directory.
llama_module=$build/libdisco_llama_cuda.so
[[ -f $llama_module ]] ||
  die "$llama_module is missing (the decoder's CUDA path needs cuBLAS and nvcc at configure time)"
command -v ompi_info >/dev/null || die "ompi_info not found (Open MPI, Debian's openmpi-bin)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/disco-gpu-bundle
mkdir -p "$b/bin" "$b/lib/openmpi" "$b/lib/pmix" "$b/share/openmpi" "$b/tests/mpi" "$b/tests/demo" \
  "$b/tests/llama"

cp -L "${programs[@]}" "$b/bin/"
cp -L "$build"/libdisco.so.[0-9] "$b/lib/"
cp -L "$build"/libdisco_llama.so "$llama_module" "$b/lib/"  # the module beside its library
# Open MPI's launcher, for the multi-rank steps on nodes with several GPUs.
for tool in orterun orted; do cp -L "$(command -v "$tool")" "$b/bin/" 2>/dev/null || true; done
[[ -e $b/bin/orterun ]] && ln -s orterun "$b/bin/mpirun"
cp -L /usr/share/openmpi/*.txt "$b/share/openmpi/" 2>/dev/null || true
cp "$root/tests/demo/run_demo_test.sh" "$b/tests/demo/"
cp "$root/tests/mpi/h5_fixtures.py" "$b/tests/mpi/"
# The decoder's reference check (NumPy; check.sh runs it on the GPU path).
cp "$root"/tests/llama/{check_disco,make_checkpoint,reference,safetensors_io}.py "$b/tests/llama/"
cat > "$b/bin/singleton-exec" <<'EOF'
#!/usr/bin/env bash
# An mpiexec stand-in for one rank (an MPI singleton): singleton-exec -n 1 [flags] PROGRAM ARGS...
[[ ${1:-} == -n && ${2:-} == 1 ]] || { echo "singleton-exec runs one rank only (got: $*)" >&2; exit 2; }
shift 2
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
exec "$@"
EOF
chmod +x "$b/bin/singleton-exec"

# Plugins, without those whose fabrics are not carried.
fabric='libibverbs|librdmacm|libfabric|libucp|libucs|libuct|libpsm|libhcoll|libmxm|libcuda\.so'
pkglib=$(ompi_info --path pkglibdir | awk '{print $NF}')
pmixlib=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix\.so\.2 /{print $NF; exit}')")")/pmix
for dir in "$pkglib" "$pmixlib"; do
  [[ -d $dir ]] || continue
  dest=$b/lib/openmpi
  [[ $dir == "$pmixlib" ]] && dest=$b/lib/pmix
  for plugin in "$dir"/*.so; do
    [[ $(ldd "$plugin" 2>/dev/null) =~ $fabric ]] && continue
    cp -L "$plugin" "$dest/"
  done
done

# Every library the programs and plugins load, except what the node brings.
node_has='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libdl\.so|/librt\.so|/libpthread\.so|/libutil\.so'
node_has+='|/libresolv\.so|/libnss_|/libnsl\.so|/libanl\.so|/libmvec\.so'  # the rest of glibc
node_has+='|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libnccl|libnvidia'
copy_deps() {
  ldd "$@" 2>/dev/null | awk '/=> \//{print $3}' | sort -u | grep -Ev "$node_has" |
    while read -r lib; do [[ -e $b/lib/$(basename "$lib") ]] || cp -L "$lib" "$b/lib/"; done
}
copy_deps "$b"/bin/disco* "$b"/bin/orte* "$b"/lib/openmpi/*.so "$b"/lib/pmix/*.so 2>/dev/null || true
copy_deps "$b"/lib/*.so* # what the copied libraries load in turn
copy_deps "$b"/lib/*.so*
missing=$(LD_LIBRARY_PATH=$b/lib ldd "$b"/bin/disco* | grep 'not found' | grep -Ev "$node_has" || true)
[[ -z $missing ]] || die "unresolved libraries: $missing"
strip --strip-unneeded "$b"/bin/disco* "$b"/bin/orte* "$b"/lib/*.so* "$b"/lib/*/*.so 2>/dev/null || true

{
  echo "disco GPU bundle, made $(date -u +%FT%TZ) on $(uname -n)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  grep -E '^(CMAKE_BUILD_TYPE|DISCO_CUDA_ARCHITECTURES|NCCL_LIBRARY|CMAKE_CUDA_COMPILER):' \
    "$build/CMakeCache.txt" || true
  echo "Open MPI: $(ompi_info --version 2>/dev/null | head -1)"
  echo "needs on the node: glibc >= $(ldd --version | head -1 | awk '{print $NF}'), libstdc++," \
    "libcudart.so.13, libcublas.so.13, libnccl.so.2"
} > "$b/MANIFEST"

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out" disco-gpu-bundle
echo "make-bundle: $out: $(du -h "$out" | cut -f1) ($(du -sh "$b" | cut -f1) unpacked)"
