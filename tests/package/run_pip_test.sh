#!/usr/bin/env bash
# `pip install --no-build-isolation .` as a user does it (#26): into a fresh virtual environment
# (Debian's system Python is externally managed), offline (--no-index), reusing this build
# (DISCO_CMAKE_BUILD_DIR: setup.py drives the same CMake build). Then, from another directory:
# `pip show disco` and the dist-info, libdisco loaded from the package, the stubs and py.typed,
# python3 -m disco at 2 ranks, a ProcessSession, the message of an interpreter the package was not
# built for (B6), and pip uninstall.
#   run_pip_test.sh SOURCE_DIR BUILD_DIR PYTHON
set -u
src=$1 build=$2 py=$3
fail() { echo "FAIL: $*"; exit 1; }
if ! "$py" -m pip --version >/dev/null 2>&1 || ! "$py" -c "import venv, setuptools, wheel" 2>/dev/null
then
  echo "skipped: $py lacks pip, venv, setuptools or wheel (Debian: python3-pip python3-venv)"
  exit 77
fi
work=$(mktemp -d /tmp/disco-pip-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$py" -m venv --system-site-packages --without-pip "$work/venv" || fail "python3 -m venv"
vpy=$work/venv/bin/python
echo "+ DISCO_CMAKE_BUILD_DIR=$build $vpy -m pip install --no-build-isolation --no-index $src"
(cd "$src" && DISCO_CMAKE_BUILD_DIR=$build "$vpy" -m pip install --no-build-isolation --no-index \
   --no-cache-dir . >"$work/pip.log" 2>&1) || { tail -40 "$work/pip.log"; fail "pip install"; }
tail -1 "$work/pip.log"
cd "$work"
show=$("$vpy" -m pip show disco) || fail "pip show disco"
echo "$show" | head -3
echo "$show" | grep -q "^Version: [0-9]" || fail "pip show: no version"
site=$("$vpy" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
ls -d "$site"/disco-*.dist-info >/dev/null || fail "no dist-info in $site"
where=$("$vpy" -c "import disco; print(disco.__file__)")
[[ $where == "$site/disco/__init__.py" ]] || fail "import disco found $where, not the installed one"
lib=$("$vpy" -c "
import disco
print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libdisco.so' in l))")
[[ $lib == "$site/disco/libdisco.so."* ]] || fail "libdisco loaded from $lib, not from the package"
for f in py.typed __init__.pyi _core.pyi process.pyi disco-run; do
  [[ -e $site/disco/$f ]] || fail "$f is not installed"
done
cat >app.py <<'PY'
import os, sys
# One write per line: print("rank", r) may reach the launcher in pieces that interleave with the
# other rank's ("rankrank 0" then " 1": seen once in CI).
sys.stdout.write("rank %s\n" % os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK")))
sys.stdout.flush()
sys.exit(5)
PY
out=$("$vpy" -m disco -n 2 app.py 2>&1)
rc=$?
[[ $rc -eq 5 ]] || { echo "$out"; fail "python3 -m disco: exit $rc, want 5"; }
[[ $(grep -c "^rank [01]$" <<<"$out") -eq 2 ]] || { echo "$out"; fail "python3 -m disco: 2 ranks"; }
echo "python3 -m disco -n 2: both ranks ran, exit code 5 passed on"
out=$("$vpy" -c "
import disco
with disco.ProcessSession(2) as s:
    print('workers', s.num_workers, flush=True)
print('exit', s.exit_code)" 2>&1) || { echo "$out"; fail "ProcessSession from the installed package"; }
grep -q "^workers 2$" <<<"$out" && grep -q "^exit 0$" <<<"$out" || { echo "$out"; fail "ProcessSession"; }
echo "ProcessSession(2) from the installed package: OK"
# B6: a package built for another CPython says which one, naming this interpreter.
mkdir -p other && cp -r "$site/disco" other/
sed -i 's/^PYTHON_VERSION = .*/PYTHON_VERSION = (3, 1)/' other/disco/_build_info.py
out=$(cd other && "$vpy" -c "import disco" 2>&1)
grep -q "disco was built for CPython 3.1 " <<<"$out" || { echo "$out"; fail "no interpreter message"; }
echo "another interpreter: $(grep -o 'disco was built for CPython 3.1 [^;]*' <<<"$out" | head -1)"
"$vpy" -m pip uninstall -y disco >/dev/null || fail "pip uninstall"
[[ ! -e $site/disco ]] || fail "pip uninstall left $site/disco"
echo "pip install, show, use and uninstall: OK"
