#!/usr/bin/env bash
# Installs disco from the build tree into a scratch prefix, builds tests/package against it with
# find_package(disco CONFIG) and with pkg-config (and c++, not the MPI's wrapper), and runs both
# under mpirun at 2 ranks; then runs the installed tools as a user gets them: from the prefix, with
# no LD_LIBRARY_PATH; and, when the build has Python, `import disco` from the prefix's package
# directory, in a job of 2 ranks.
#   run_package_test.sh SRC BUILD CMAKE [--python PYTHON] -- MPIEXEC [mpiexec flags...]
# (the flags: CMake's DISCO_MPIEXEC_PREFLAGS, which are the MPI's own).
set -euo pipefail
src=$1 build=$2 cmake=$3 python=""
shift 3
if [[ ${1:-} == --python ]]; then python=$2; shift 2; fi
[[ ${1:-} == -- ]] && shift
mpiexec=$1
shift
flags=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$cmake" --install "$build" --prefix "$work/prefix" >/dev/null
"$cmake" -S "$src/tests/package" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
"$cmake" --build "$work/build" >/dev/null
"$mpiexec" -n 2 "${flags[@]}" "$work/build/consumer"
# pkg-config route, with the plain compiler: disco.pc brings the MPI's flags (its Requires: the
# module of the MPI the build used, e.g. ompi-cxx or mpich).
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib64/pkgconfig"
pc_flags=$(pkg-config --cflags --libs disco) ||
  { echo "package test: pkg-config cannot resolve disco.pc"; exit 1; }
c++ -o "$work/consumer_pc" "$src/tests/package/consumer.cc" $pc_flags
"$mpiexec" -n 2 "${flags[@]}" "$work/consumer_pc"
# The installed tools start with nothing but their RPATH ($ORIGIN/../lib) to find libdisco.
unset LD_LIBRARY_PATH
for tool in "$work"/prefix/bin/disco-*; do
  [[ $tool == */disco-run ]] && continue
  if ldd "$tool" | grep -q "not found"; then
    ldd "$tool"
    echo "package test: $tool cannot find its libraries"
    exit 1
  fi
done
"$work/prefix/bin/disco-serve" --help >/dev/null
{ "$work/prefix/bin/disco-remote" 2>&1 || true; } | grep -q "disco-remote: HOST:PORT is required"
"$mpiexec" -n 2 "${flags[@]}" "$work/prefix/bin/disco-example" >/dev/null
if [[ -n $python ]]; then
  site=$(sed -n 's/^DISCO_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
  # The type stubs and the PEP 561 marker are installed with the package.
  for f in py.typed __init__.pyi _core.pyi serve.pyi; do
    [[ -f $work/prefix/$site/disco/$f ]] || { echo "package test: disco/$f is not installed"; exit 1; }
  done
  cat > "$work/app.py" <<'PY'
import sys
import disco

@disco.register_func("package.double")
def double(x):
    return x * 2

def controller(sess):
    assert disco.__file__.startswith(sys.argv[1]), disco.__file__
    y = sess.get_global_func("package.double")(21)
    assert y.debug_get_from_remote(sess.num_workers - 1) == 42
    print("installed disco %s from %s: %d workers" % (disco.__version__, disco.__file__,
                                                    sess.num_workers))
    return 0

sys.exit(disco.main(controller))
PY
  (cd "$work" && PYTHONPATH="$work/prefix/$site" "$mpiexec" -n 2 "${flags[@]}" "$python" \
    "$work/app.py" "$work/prefix/$site") | grep -q "installed disco"
fi
echo "package test: find_package and pkg-config consumers ran; installed tools start from the prefix${python:+; the installed Python package runs}"
