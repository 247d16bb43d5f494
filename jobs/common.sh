# Sourced by the batch scripts: where disco is, and Open MPI's consent when the job runs as root.
DISCO_ROOT=${DISCO_ROOT:-${SLURM_SUBMIT_DIR:-$(pwd)}}
DISCO_BUILD_DIR=${DISCO_BUILD_DIR:-$DISCO_ROOT/build}
DISCO_RUN="$DISCO_ROOT/launch/disco-run"
# A task that dies ends its step on every node (srun's -K; disco-run passes it too).
export SLURM_KILL_BAD_EXIT=${SLURM_KILL_BAD_EXIT:-1}
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
fi
[[ -x $DISCO_BUILD_DIR/tests/disco_mpi_tests || -x $DISCO_BUILD_DIR/src/tools/disco-example ]] || {
  echo "jobs: no build in $DISCO_BUILD_DIR (run ./launch/test or cmake first, or set DISCO_BUILD_DIR)" >&2
  exit 1
}
echo "job ${SLURM_JOB_ID:-local}: ${SLURM_NTASKS:-?} tasks on ${SLURM_JOB_NODELIST:-$(hostname)}"
