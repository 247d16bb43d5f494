#!/usr/bin/env bash
# One simulated run of the skeleton under SimGrid SMPI; prints its RESULT lines.
#
#   bench/sim/simulate.sh KIND P MODES [skeleton options...]
#   e.g. bench/sim/simulate.sh ft1 512 call_pipe,raw_pipe --iters 40 --no-barrier
#
# KIND: shm2 | ft1 | ft8 | df1 (bench/sim/platform.py), or a SimGrid platform file (*.xml) with
# SIM_HOSTS_FILE naming its hosts; MODES: the skeleton's modes (modes.cc), comma-separated.
# Environment:
#   OS_INTER OR_INTER   per-message send / receive software overhead between nodes, us (0.25 0.25)
#   OS_INTRA OR_INTRA   the same inside a node (0.30 0.10: Open MPI's shared memory on our machines)
#   LINK_BW LINK_LAT SHM_BW SHM_LAT   the platform (platform.py)
#   SIM_TIMEOUT         seconds one run may take (600)
#   DISCO_SIM_BUILD     where the skeleton and platforms are built (build-sim/ in the checkout)
# The skeleton's own collectives are point-to-point messages (--collectives explicit); SMPI's
# internal broadcasts (communicator creation) take a binomial tree, as its default builds SMP
# leader communicators in O(P^2) (minutes per MPI_Comm_dup at 4096 ranks).
set -euo pipefail
source "$(dirname "$0")/common.sh"
(($# >= 3)) || { sed -n '2,14p' "$0" >&2; exit 2; }
kind=$1 p=$2 modes=$3
shift 3
sim_need || exit
bin=$(sim_skeleton)
sim_platform "$kind" "$p"
overheads=${OS_INTER:-0.25},${OR_INTER:-0.25},${OS_INTRA:-0.30},${OR_INTRA:-0.10}
log=$SIM_BUILD/logs/$(basename "$kind" .xml)-$p-${modes//,/+}-$$.log  # runs may overlap
mkdir -p "$SIM_BUILD/logs"
start=$(date +%s.%N)
rc=0
timeout "${SIM_TIMEOUT:-600}" smpirun -np "$p" -platform "$SIM_XML" -hostfile "$SIM_HOSTS" \
  "${sim_cfg[@]}" --cfg=smpi/bcast:binomial_tree --cfg=smpi/privatization:no \
  --cfg=smpi/tmpdir:"$SIM_BUILD" \
  "$bin" --host-overheads "$overheads" "$@" "$modes" > "$log" 2>&1 || rc=$?
wall=$(echo "$(date +%s.%N) - $start" | bc)
if ((rc != 0)); then
  echo "simulate.sh: $kind P=$p $modes failed (rc $rc after ${wall%.*} s); the end of $log:" >&2
  tail -5 "$log" >&2
  exit 1
fi
grep '^RESULT' "$log" | sed "s|\$| platform=$(basename "$kind" .xml) wall_s=$(printf %.1f "$wall")|"
