"""setuptools' side of `pip install --no-build-isolation .` (pyproject.toml): the package is what
the project's CMake build installs, not a second build description.

build_py configures (once) and builds the CMake project in DISCO_CMAKE_BUILD_DIR (default
build/pip; an existing configured build dir is reused as it is, e.g. build/), installs it into a
staging prefix, and copies the installed `disco` package (extension, .py, stubs, py.typed,
disco-run) and the libraries libdisco, libdisco_tokenizer and libdisco_llama into the wheel's
`disco/`, where disco/__init__.py loads libdisco and libdisco_tokenizer from. DISCO_CMAKE_ARGS
adds configure arguments (e.g.
"-DDISCO_ENABLE_CUDA=OFF"; given with an existing build dir, it is configured again with them),
DISCO_BUILD_JOBS the build's parallelism (default 2). setuptools' own files go into the build dir
too, so that a read-only checkout builds with DISCO_CMAKE_BUILD_DIR elsewhere.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(disco VERSION ([0-9.]+)", f.read())
    if not m:
        sys.exit("setup.py: no `project(disco VERSION x.y.z)` in CMakeLists.txt")
    return m.group(1)


def run(cmd):
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True)


BUILD_DIR = os.path.abspath(os.environ.get("DISCO_CMAKE_BUILD_DIR")
                            or os.path.join(ROOT, "build", "pip"))
if not os.environ.get("DISCO_CMAKE_BUILD_DIR") and not os.access(ROOT, os.W_OK):
    sys.exit("setup.py: the checkout %s is read-only: set DISCO_CMAKE_BUILD_DIR to a writable "
             "directory for the build" % ROOT)
try:
    CMAKE_ARGS = shlex.split(os.environ.get("DISCO_CMAKE_ARGS", ""))
except ValueError as e:
    sys.exit("setup.py: DISCO_CMAKE_ARGS is not a list of arguments a shell would read (%s): %r"
             % (e, os.environ["DISCO_CMAKE_ARGS"]))


class CMakeBuildPy(build_py):
    """Builds and stages the CMake project, then copies its Python package into build_lib."""

    def run(self):
        build_dir = BUILD_DIR
        # A new build dir is configured; an existing one again only when DISCO_CMAKE_ARGS says more.
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DDISCO_BUILD_TESTS=OFF", "-DDISCO_BUILD_BENCHMARKS=OFF",
                 "-DPython3_EXECUTABLE=" + sys.executable] + CMAKE_ARGS)
        elif CMAKE_ARGS:
            run(["cmake", "-S", ROOT, "-B", build_dir] + CMAKE_ARGS)
        run(["cmake", "--build", build_dir, "-j", os.environ.get("DISCO_BUILD_JOBS", "2")])
        with tempfile.TemporaryDirectory(prefix="disco-stage-") as stage:
            run(["cmake", "--install", build_dir, "--prefix", stage])
            cores = glob.glob(os.path.join(stage, "**", "disco", "_core*.so"), recursive=True)
            if len(cores) != 1:
                sys.exit("setup.py: the staged install has %d disco/_core extensions (the CMake "
                         "build was configured without Python? see %s)" % (len(cores), build_dir))
            package = os.path.dirname(cores[0])
            out = os.path.join(self.build_lib, "disco")
            if os.path.exists(out):
                shutil.rmtree(out)
            shutil.copytree(package, out, symlinks=False)
            libs = [p for p in glob.glob(os.path.join(stage, "lib*", "**", "libdisco*.so*"),
                                         recursive=True) if not os.path.islink(p)]
            for lib in libs:
                # Under its soname too (what _core's DT_NEEDED names): libdisco.so.0.
                name = os.path.basename(lib)
                m = re.match(r"(lib[a-z_]+\.so\.\d+)\.\d+\.\d+$", name)
                shutil.copy2(lib, os.path.join(out, m.group(1) if m else name))
            print("setup.py: packed %s (%d libraries)" % (out, len(libs)), flush=True)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a wheel for this interpreter and platform (the extension inside)


SETUPTOOLS_DIR = os.path.join(BUILD_DIR, "setuptools")  # setuptools' own files: out of the checkout
os.makedirs(SETUPTOOLS_DIR, exist_ok=True)
setup(
    version=project_version(),
    packages=["disco"],
    package_dir={"disco": "python/disco"},
    cmdclass={"build_py": CMakeBuildPy},
    distclass=BinaryDistribution,
    zip_safe=False,
    options={"build": {"build_base": SETUPTOOLS_DIR}, "egg_info": {"egg_base": SETUPTOOLS_DIR}},
)
