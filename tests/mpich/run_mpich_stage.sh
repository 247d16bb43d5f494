#!/usr/bin/env bash
# The MPICH stage of ./launch/test: disco built against MPICH in a clean Debian root that has no
# Open MPI (tests/mpich/make-root.sh, entered by tests/mpich/in-root.sh), and its suites run there
# at 1-2 ranks: unit, session, collectives, HDF5 with its faults, remote, Python, the demo at 2
# ranks, disco-bench's smoke test, the installed package (its CMake and pkg-config consumers),
# and the fault tests of what differs between MPIs (SIGUSR1 handlers, the launcher's and the
# Slurm step's ending at 3 ranks, launcher mismatches, MPI objects freed). Only the targets those
# tests run are built (no CUDA, no fuzzing).
#   tests/mpich/run_mpich_stage.sh [--build-only | --tests-only] WORK_DIR [ctest arguments...]
# The root is WORK_DIR/root (kept while its package set is unchanged), the build /build inside
# it, the logs WORK_DIR/*.log. --build-only makes the root and the build (./launch/test runs it
# niced in the background), --tests-only runs the tests of a build made before. Prints each
# step's time; exit 77 with the reason where the root cannot be made (not root, no mmdebstrap, no
# Debian mirror). DISCO_MPICH_TEST_JOBS: ctest's -j (2); DISCO_MPICH_EXTRA_PACKAGES: more Debian
# packages in the root (e.g. ccache).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
usage="usage: run_mpich_stage.sh [--build-only | --tests-only] WORK_DIR [ctest arguments...]"
phase=all
case ${1:-} in
  --build-only) phase=build; shift ;;
  --tests-only) phase=tests; shift ;;
esac
work=${1:?$usage}
shift
mkdir -p "$work"
work=$(cd "$work" && pwd)
root=$work/root
started=$SECONDS
step_t0=$SECONDS
say() { printf '==== mpich stage: %-28s %4d s\n' "$1" $((SECONDS - step_t0)); step_t0=$SECONDS; }
in_root() { "$here/in-root.sh" "$root" "$src" -- "$@"; }

# The targets the tests below run (and the rest of what the install has: disco-example, for the
# package test).
targets=(disco disco_unit_tests disco_mpi_tests disco_test_plugin_dup disco_remote_tests
  disco_fault_program disco_h5_save_program disco_liveness_attacker disco-serve disco-remote
  disco_remote_call disco_refusal_flood disco-demo disco-bench _core disco_stall_io disco-example
  disco-llm-server disco_llama_cpu_tests)
# The suites at 1-2 ranks, and the tests of what differs between MPIs (the silent rank and the
# hang verdicts that read MPI's symbols or its launcher's rank variable: 3).
tests='^(mpi\.session\.(np[12]|small_frames\.np2)|mpi\.ccl\.(sync_send\.np2|np2\.noshm)'
tests+='|mpi\.fault\..*\.np[12]|mpi\.fault\.(silent_rank_ends_launcher\.np3|launcher_mismatch.*'
tests+='|no_shm_left)|mpi\.h5_fault\..*|mpi\.bench_smoke'
tests+='|hang\.(foreign_mpi_call|controller_in_foreign_mpi_call|stopped_rank|hdf5_read_stalled)\.np3'
tests+='|remote\.(session\.np2|keyless|keyfile|refusal_flood)'
tests+='|python\.((injob|served)\.np[12]|jobs|interrupt|examples|process|api)|demo\.np2\..*'
tests+='|package\.find_package)$'

make_root() {
  rm -f "$work/skipped" "$work/built"
  local rc=0
  "$here/make-root.sh" "$root" ${DISCO_MPICH_EXTRA_PACKAGES:-} >"$work/make-root.log" 2>&1 || rc=$?
  cat "$work/make-root.log"
  if ((rc == 77)); then
    grep '^SKIP' "$work/make-root.log" >"$work/skipped"
    exit 77
  fi
  ((rc == 0)) || { echo "FAIL: the MPICH root could not be made"; exit 1; }
  say "root"
}

build() {
  # RelWithDebInfo's optimisation (and so its warnings under -Werror) without debug information.
  local configure=(cmake -S /disco -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG"
    -DDISCO_WERROR=ON -DDISCO_BUILD_TESTS=ON -DDISCO_BUILD_BENCHMARKS=ON -DDISCO_BUILD_FUZZ=OFF
    -DDISCO_ENABLE_CUDA=OFF -DDISCO_ENABLE_NCCL=OFF -DDISCO_ENABLE_PYTHON=ON
    -DDISCO_ENABLE_HDF5=ON)
  local make=(cmake --build /build -j"${DISCO_BUILD_JOBS:-2}" --target "${targets[@]}")
  echo "+ ${configure[*]}"
  echo "+ ${make[*]}"
  in_root "${configure[@]}" >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; echo "FAIL: the MPICH configure"; exit 1; }
  grep -A7 "disco .* configuration:" "$work/configure.log"
  in_root "${make[@]}" >"$work/build.log" 2>&1 ||
    { tail -60 "$work/build.log"; echo "FAIL: the MPICH build"; exit 1; }
  echo "compiler warnings: $(grep -c 'warning:' "$work/build.log")"
  touch "$work/built"
  say "configure + build"
}

run_tests() {
  [[ -f $work/skipped ]] && { cat "$work/skipped"; exit 77; }
  [[ -f $work/built ]] || { echo "FAIL: no MPICH build in $work (run --build-only first)"; exit 1; }
  local ctest=(ctest --test-dir /build --output-on-failure -j"${DISCO_MPICH_TEST_JOBS:-2}"
    --timeout 600)
  local u=0 m=0
  echo "+ ${ctest[*]} -L unit"
  in_root "${ctest[@]}" -L unit >"$work/ctest-unit.log" 2>&1 || u=$?
  grep -E "tests passed|Total Test time" "$work/ctest-unit.log"
  echo "+ ${ctest[*]} -R '$tests' $*"
  in_root "${ctest[@]}" -R "$tests" "$@" >"$work/ctest.log" 2>&1 || m=$?
  grep -E "^ *[0-9]+/[0-9]+ Test +#" "$work/ctest.log" | sed 's/^ *[0-9]*\/[0-9]* //'
  sed -n '/tests passed/,$p' "$work/ctest.log"
  if ((u != 0 || m != 0)); then
    grep -h -B2 -A40 '\*\*\*Failed\|\*\*\*Timeout\|\*\*\*Exception' "$work/ctest-unit.log" \
      "$work/ctest.log" | tail -200
    return 1
  fi
  say "tests"
}

rc=0
[[ $phase != tests ]] && { make_root; build; }
[[ $phase != build ]] && { run_tests "$@" || rc=1; }
printf '==== mpich stage (%s): %s in %d s (logs in %s)\n' "$phase" \
  "$( ((rc == 0)) && echo PASS || echo FAIL)" $((SECONDS - started)) "$work"
exit $rc
