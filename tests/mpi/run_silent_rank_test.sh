#!/usr/bin/env bash
# A rank that goes silent without exiting (stopped, as one on a node cut off the network), under a
# launcher told not to end the job when a rank fails (Open MPI: --mca orte_enable_recovery 1;
# hydra: -disable-auto-cleanup; CMake passes the flag for the MPI): the launcher alone would wait
# for it for good. The job must end within DISCO_TIMEOUT + 10 s through disco: rank 0's watchdog
# names the silent rank and ends this node's launcher (mpirun; hydra's proxy and mpiexec), and
# cancels the job's Slurm step (a stand-in scancel, with SLURM_JOB_ID and SLURM_STEP_ID set for
# the ranks only: a launcher that saw them would look for a real allocation). Nothing of the job
# may be left.
#   run_silent_rank_test.sh FAULT_PROGRAM -- MPIEXEC ARGS...   (ARGS: -n 3, the launcher's flags)
set -uo pipefail
program=$1
shift
[[ ${1:-} == -- ]] && shift
here=$(cd "$(dirname "$0")" && pwd)
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
printf '#!/bin/sh\necho "$@" >> "%s/scancel.log"\n' "$stubs" > "$stubs/scancel"
chmod +x "$stubs/scancel"
limit=$(( ${DISCO_TIMEOUT:-5} + 10 ))
rc=0
"$here/run_fault_test.sh" --timeout "$limit" --expect-exit nonzero \
  --expect "watchdog: rank 2 \([^)]*\) stopped answering liveness pings .*ending the job and this node's launcher, (mpirun|mpiexec|orterun|hydra_pmi_proxy)[^ ]* \(pid [0-9]+\)" \
  -- "$@" bash -c 'export SLURM_JOB_ID=4242 SLURM_STEP_ID=7 PATH="$0:$PATH"; exec "$1" stop-worker' \
  "$stubs" "$program" || rc=$?
echo "scancel calls: $(cat "$stubs/scancel.log" 2>/dev/null || echo none)"
grep -q -- "--quiet 4242.7" "$stubs/scancel.log" 2>/dev/null ||
  { echo "FAIL: the job's Slurm step (4242.7) was not cancelled"; rc=1; }
exit $rc
