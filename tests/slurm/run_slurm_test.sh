#!/usr/bin/env bash
# Starts a throwaway one-node Slurm cluster (munge, slurmctld, slurmd; our copy of the recipe),
# submits disco jobs with `sbatch --wait` and checks their output and exit codes:
#   - the smoke job (the session and collective suites at 2..3 ranks, through launch/disco-run;
#     every suite runs under mpirun in CTest, and across two nodes in the multi-node stage);
#   - a controller program through `srun --mpi=pmix` and through `mpirun` inside the allocation;
#   - a job whose controller throws, and one whose worker is killed: non-zero, promptly;
#   - a launcher without the PMI Open MPI needs (`srun --mpi=none`): non-zero, saying why;
#   - a Python controller (jobs/python.sbatch: examples/tp_mlp.py), when the build has Python;
#   - a served job (jobs/serve.sbatch) driven and ended by a client outside it.
# Stops only the daemons it started. Not root, or an MPI other than Open MPI (the cases are Open
# MPI's: PMIx, its refusal under --mpi=none): skipped (exit 77) with the reason.
#   run_slurm_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: starting munged, slurmctld and slurmd needs root"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
mpi=${DISCO_RUN_MPI:-$("$src/launch/disco-run" --which-mpi 2>/dev/null)}
if [[ $mpi != openmpi ]]; then
  echo "SKIP: the one-node Slurm cases are Open MPI's (srun --mpi=pmix); the MPI here is $mpi"
  exit 77
fi
export LOCAL_SLURM_DIR=${LOCAL_SLURM_DIR:-/tmp/disco-slurm-test}
export LOCAL_SLURM_CPUS=${LOCAL_SLURM_CPUS:-4}
export SLURM_CONF=${LOCAL_SLURM_CONF:-/etc/slurm/slurm.conf}
export PATH="$PATH:/usr/sbin:/sbin"
work=$(mktemp -d /tmp/disco-slurm-jobs.XXXXXX)
stop() {
  LOCAL_SLURM_DIR=$LOCAL_SLURM_DIR bash "$here/stop-local-slurm.sh" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap stop EXIT
if ! bash "$here/start-local-slurm.sh" > "$work/start.log" 2>&1; then
  cat "$work/start.log"
  echo "FAIL: the local Slurm cluster did not start"
  exit 1
fi
fails=0 passes=0
pass() { passes=$((passes + 1)); echo "ok: $*"; }
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
export DISCO_ROOT=$src DISCO_BUILD_DIR=$build

# 1. The smoke job.
t0=$(date +%s)
DISCO_SMOKE_FILTER=${DISCO_SMOKE_FILTER:-'SessionTest.*:CclTest.*-SessionTest.Hundred*:SessionTest.LargeTransfers*:SessionTest.Parked*'} \
  sbatch --wait --ntasks=3 --time=10 -o "$work/smoke.out" "$src/jobs/smoke.sbatch" >/dev/null
rc=$?
if [[ $rc -eq 0 ]] && grep -q "smoke: passed at 2..3 ranks" "$work/smoke.out"; then
  pass "smoke job ($(( $(date +%s) - t0 )) s)"
else
  cat "$work/smoke.out"; fail "smoke job: exit $rc"
fi

# 2. A controller program through both launchers inside one allocation.
cat > "$work/both.sh" <<JOB
#!/usr/bin/env bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== srun"; srun --mpi=pmix -n \$SLURM_NTASKS $build/src/tools/disco-example | sed 's/^/SRUN /'
echo "== mpirun"; mpirun -n \$SLURM_NTASKS $build/src/tools/disco-example | sed 's/^/MPIRUN /'
JOB
sbatch --wait --ntasks=2 --time=5 -o "$work/both.out" "$work/both.sh" >/dev/null
rc=$?
if [[ $rc -eq 0 ]] && grep -q "^SRUN disco-example: PASS" "$work/both.out" &&
   grep -q "^MPIRUN disco-example: PASS" "$work/both.out" &&
   grep -q "^SRUN disco-example: 2 workers" "$work/both.out"; then
  pass "controller through srun --mpi=pmix and mpirun"
else
  cat "$work/both.out"; fail "controller through both launchers: exit $rc"
fi

# 3-5. Jobs that must fail: each ends non-zero within 30 s, and its output passes CHECK.
#   expect_failure LABEL NTASKS COMMAND CHECK...   (CHECK gets the output file as last argument)
expect_failure() {
  local label=$1 ntasks=$2 command=$3 out="$work/${1// /_}.out" t0 rc took
  shift 3
  t0=$(date +%s)
  sbatch --wait --ntasks="$ntasks" --time=5 -o "$out" --wrap "$command" >/dev/null
  rc=$?
  took=$(( $(date +%s) - t0 ))
  if [[ $rc -ne 0 && $took -le 30 ]] && "$@" "$out"; then
    pass "$label: exit $rc after ${took} s"
  else
    cat "$out"; fail "$label: exit $rc after ${took} s"
  fi
}
lacks() { ! grep -q "$1" "$2"; }

# 3. A controller that throws: the job ends non-zero, promptly, naming the rank and the cause.
expect_failure "failing controller" 3 \
  "$src/launch/disco-run -- $build/tests/disco_fault_program controller-throws" \
  grep -q "rank 0/3 .*controller raised .*boom from the controller"

# 4. A worker killed with SIGKILL under srun: the step is torn down, the job ends non-zero.
expect_failure "killed worker" 3 \
  "$src/launch/disco-run -- $build/tests/disco_fault_program kill-worker" lacks "unreachable"

# 5. The wrong PMI (no PMI for Open MPI): the job ends non-zero, promptly, saying why — Open
#    MPI's own message when MPI_Init refuses, disco's preflight when each process comes up alone.
expect_failure "wrong PMI refused" 2 "srun --mpi=none -n 2 $build/src/tools/disco-example" \
  grep -Eq "sees an MPI world of 1 rank|direct launched using \"srun\""

# 6. A Python controller (jobs/python.sbatch): the demo's model with
#    numpy worker functions at 2 ranks, checked against its reference.
if [[ -d $build/python/disco ]]; then
  t0=$(date +%s)
  sbatch --wait --ntasks=2 --time=5 -o "$work/python.out" "$src/jobs/python.sbatch" \
    "$src/examples/tp_mlp.py" --hidden 256 --ffn 1024 --tokens 32 --steps 2 \
    --checkpoint "$work/tp_mlp.h5" >/dev/null
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q "tp_mlp.py: 2 workers" "$work/python.out" &&
     grep -q "reference: .*PASS" "$work/python.out"; then
    pass "Python controller through jobs/python.sbatch ($(( $(date +%s) - t0 )) s)"
  else
    cat "$work/python.out"; fail "python job: exit $rc"
  fi
fi

# 7. A served job (jobs/serve.sbatch): a client outside the job finds its address, asks it for
#    its workers, copies tensors through it (disco-bench remote), then ends it.
t0=$(date +%s)
export DISCO_SERVE_KEY="slurm-test-$$-$RANDOM"
jobid=$(DISCO_SERVE_INFO="$work/serve.addr" sbatch --parsable --ntasks=2 --time=5 \
  -o "$work/serve.out" "$src/jobs/serve.sbatch")
for _ in $(seq 600); do
  [[ -s $work/serve.addr ]] && break
  sleep 0.1
done
addr=$(cat "$work/serve.addr" 2>/dev/null || true)
ok=0
if [[ -n $addr ]] &&
   "$build/src/tools/disco-remote" "$addr" info > "$work/remote.out" 2>&1 &&
   grep -q "serves 2 workers" "$work/remote.out" &&
   "$build/src/tools/disco-bench" remote --server "$addr" --iters 20 --repeats 1 \
     --max-bytes 1048576 >> "$work/remote.out" 2>&1 &&
   "$build/src/tools/disco-remote" "$addr" shutdown 0 >> "$work/remote.out" 2>&1; then
  for _ in $(seq 300); do  # the job ends once the client has said so
    [[ -z $(squeue -h -j "$jobid" 2>/dev/null) ]] && break
    sleep 0.1
  done
  [[ -z $(squeue -h -j "$jobid" 2>/dev/null) ]] &&
    grep -q "serve: job ended with exit code 0" "$work/serve.out" && ok=1
fi
if [[ $ok -eq 1 ]]; then
  pass "served job: attached, copied, ended by the client ($(( $(date +%s) - t0 )) s)"
else
  scancel "$jobid" 2>/dev/null
  cat "$work/serve.out" "$work/remote.out" 2>/dev/null
  fail "served job (address '$addr')"
fi

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
