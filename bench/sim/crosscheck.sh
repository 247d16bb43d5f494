#!/usr/bin/env bash
# Keeps the simulation skeleton true to the code: builds disco itself with SimGrid's smpicxx and
# the skeleton both ways (smpicxx, and mpicxx: a short real run at 2 ranks shows that build
# works), runs disco-bench (call; ccl allreduce at 4 KiB ... 1 MiB: MPI's allreduce below the
# ring, MPI's above it with small shares, disco's ring; graph: replays of captured graphs, their
# replay frame, and a graph's allreduces agreed once) and the skeleton's
# matching modes on the same simulated platform (ft8: 8 ranks on one node of a fat tree) with no
# injected CPU cost, and fails when a figure differs by more than 0.5 % (+ 0.002 us). The skeleton
# calls MPI's own collectives here (--collectives library), as disco does; its explicit
# algorithms (the sweeps' default) are printed beside them.
#
#   bench/sim/crosscheck.sh [P]        (default 8; exit 77 when SMPI is not installed)
#   DISCO_SIM_BUILD=dir                where disco's SMPI build goes (build-sim/ in the checkout)
set -euo pipefail
source "$(dirname "$0")/common.sh"
p=${1:-8}
sim_need || exit
mkdir -p "$SIM_BUILD"
start=$SECONDS
disco_build=$SIM_BUILD/disco
if [[ ! -x $disco_build/src/tools/disco-bench ]] ||
  [[ -n $(find "$SIM_REPO/src" "$SIM_REPO/include" -newer "$disco_build/src/tools/disco-bench" \
    -name '*.[ch]*' -print -quit) ]]; then
  echo "== disco built with smpicxx (static: SMPI copies the program per simulated rank)"
  cmake -S "$SIM_REPO" -B "$disco_build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=smpicc -DCMAKE_CXX_COMPILER=smpicxx \
    -DMPI_C_COMPILER=smpicc -DMPI_CXX_COMPILER=smpicxx -DBUILD_SHARED_LIBS=OFF \
    -DDISCO_BUILD_TESTS=OFF -DDISCO_ENABLE_CUDA=OFF -DDISCO_ENABLE_NCCL=OFF \
    -DDISCO_ENABLE_HDF5=OFF -DDISCO_ENABLE_PYTHON=OFF > "$SIM_BUILD/disco-cmake.log" 2>&1 ||
    { tail -20 "$SIM_BUILD/disco-cmake.log"; exit 1; }
  cmake --build "$disco_build" -j"${DISCO_SIM_JOBS:-2}" --target disco-bench \
    > "$SIM_BUILD/disco-build.log" 2>&1 || { grep -A5 -m5 'error' "$SIM_BUILD/disco-build.log"; exit 1; }
fi
skeleton=$(sim_skeleton)
real=$(sim_skeleton_real)
echo "== the skeleton on real MPI, 2 ranks: a smoke test of that build (its times depend on the load)"
mpirun -n 2 "$real" --iters 2000 call_pipe,sync_all,ar_session | cut -d' ' -f2-4 | sed 's/^/  /'
"$real" --rates | sed 's/^/  /'
sim_platform ft8 "$p"
# The same network and per-message overheads for both (disco cannot register SMPI callbacks).
cfg=("${sim_cfg[@]}" --cfg=smpi/os:0:0.25e-6:0 --cfg=smpi/ois:0:0.25e-6:0
  --cfg=smpi/or:0:0.25e-6:0 --cfg=smpi/tmpdir:"$SIM_BUILD")
run() {  # run LOG PROGRAM ARGS...: one simulated job
  local log=$SIM_BUILD/crosscheck-$1.log
  shift
  timeout 600 smpirun -np "$p" -platform "$SIM_XML" -hostfile "$SIM_HOSTS" "${cfg[@]}" "$@" \
    > "$log" 2>&1 || { echo "crosscheck: '$*' failed:" >&2; tail -5 "$log" >&2; exit 1; }
  cat "$log"
}
skel() {  # skel NAME MODES ARGS...: the skeleton with no CPU cost, library collectives
  local name=$1 modes=$2
  shift 2
  run "skeleton-$name" --cfg=smpi/privatization:no "$skeleton" --enc-us 0 --dec-us 0 \
    --loop-ns 0 --reduce-gbs 0 --memcpy-gbs 0 --graph-call-ns 0 --graph-coll-us 0 \
    --collectives library "$@" "$modes"
}

# disco-bench call: 400 pipelined calls, 50 latency iterations, 100 syncs.
call=$(DISCO_TIMEOUT=0 run disco-call "$disco_build/src/tools/disco-bench" call --iters 400 \
  --latency-iters 50 --repeats 1 --max-bytes 8)
# A figure of the 8-byte row, by its column's name (columns are added over time).
call_column() {
  awk -v want="$1" '$1 == "payload_B" { for (i = 1; i <= NF; ++i) col[$i] = i }
                    $1 == 8 && $2 == 256 && (want in col) { print $(col[want]) }' <<< "$call"
}
sync=$(awk '/^SyncWorker/' <<< "$call")
declare -A disco skeleton
disco[raw_pipe]=$(call_column raw_pipe_us)
disco[call_pipe]=$(call_column call_pipe_us)
disco[raw_lat]=$(call_column raw_lat_us)
disco[call_lat]=$(call_column call_lat_us)
read -r _ disco[raw_sync] disco[sync_worker] _ <<< "$sync"
r=$(skel call call_pipe,raw_pipe --iters 400)
skeleton[call_pipe]=$(value_of per_call_incl_sync_us "$(grep mode=call_pipe <<< "$r")")
skeleton[raw_pipe]=$(value_of per_call_incl_barrier_us "$(grep mode=raw_pipe <<< "$r")")
r=$(skel lat call_lat,raw_lat --iters 50)
skeleton[call_lat]=$(value_of value_us "$(grep mode=call_lat <<< "$r")")
skeleton[raw_lat]=$(value_of value_us "$(grep mode=raw_lat <<< "$r")")
r=$(skel sync sync_worker,raw_sync --iters 100)
skeleton[sync_worker]=$(value_of value_us "$(grep mode=sync_worker <<< "$r")")
skeleton[raw_sync]=$(value_of value_us "$(grep mode=raw_sync <<< "$r")")

# disco-bench ccl: Session::AllReduce of disco.empty tensors, K calls then SyncAll, per call.
ccl=$(DISCO_TIMEOUT=0 run disco-ccl "$disco_build/src/tools/disco-bench" ccl --op allreduce \
  --min-bytes 4096 --max-bytes 1048576 --repeats 1)
sizes=()
while read -r kind bytes _ _ _ _ _ _ _ disco_us _; do
  [[ $kind == allreduce ]] || continue
  sizes+=("$bytes")
  disco[allreduce_$bytes]=$disco_us
  iters=$((256 * 1024 * 1024 / bytes))
  iters=$((iters > 2000 ? 2000 : iters < 5 ? 5 : iters))
  warmup=$((iters / 10 > 2 ? iters / 10 : 2))
  r=$(skel "ar-$bytes" ar_session --bytes "$bytes" --iters "$iters" --warmup "$warmup")
  skeleton[allreduce_$bytes]=$(value_of per_call_incl_syncall_us "$r")
done <<< "$ccl"
((${#sizes[@]} == 5)) || { echo "crosscheck: disco-bench ccl printed ${#sizes[@]} allreduce rows" >&2; exit 1; }

# disco-bench graph at --iters 400: no-op calls TimeCalls(400) (the skeleton's call_pipe above),
# a 16-call graph TimeReplays(100), a 1024-call graph TimeReplays(20) (M calls/s); then the step
# graph (6 no-ops, a function's 4 KiB tensor, allreduce, 6 no-ops, allreduce: its replays agree
# once) TimeReplays(100) against bench.graph.raw_allreduces(4096, 100) and TimeCalls(100).
graph=$(DISCO_TIMEOUT=0 run disco-graph "$disco_build/src/tools/disco-bench" graph --iters 400 \
  --repeats 1)
read -r disco[graph_call] disco[graph16] <<< \
  "$(awk '/^ *16 no-op calls/ {print $(NF-2), $(NF-1)}' <<< "$graph")"
disco[graph1024_mcalls]=$(awk '/^ *1024 no-op calls/ {print $(NF-1)}' <<< "$graph")
read -r disco[graph_ar_raw2] disco[graph_ar_call] _ disco[graph_ar] _ <<< \
  "$(awk '/allreduces of 4096 B/ {print $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF}' <<< "$graph")"
skeleton[graph_call]=${skeleton[call_pipe]}
r=$(skel graph16 graph16 --iters 100)
skeleton[graph16]=$(value_of per_replay_incl_sync_us "$r")
r=$(skel graph1024 graph1024 --iters 20)
skeleton[graph1024_mcalls]=$(value_of mcalls_per_s_incl_sync "$r")
r=$(skel graph-ar graph_ar_raw,graph_ar --iters 100 --bytes 4096)
skeleton[graph_ar_raw2]=$(value_of raw_2_allreduces_us "$(grep mode=graph_ar_raw <<< "$r")")
skeleton[graph_ar_call]=$(value_of call_incl_sync_us "$(grep mode=graph_ar_raw <<< "$r")")
skeleton[graph_ar]=$(value_of per_replay_incl_sync_us "$(grep 'mode=graph_ar ' <<< "$r")")

# The skeleton's explicit algorithms (what the sweeps use), for reference only.
explicit=$(OS_INTRA=0.25 OR_INTRA=0.25 OS_INTER=0.25 OR_INTER=0.25 \
  "$SIM_DIR/simulate.sh" ft8 "$p" call_pipe,call_lat,sync_worker --iters 100 --enc-us 0 \
  --dec-us 0 --reduce-gbs 0 --memcpy-gbs 0 2> /dev/null || true)

printf '%-18s %12s %12s %9s\n' quantity disco_us skeleton_us diff_us
bad=0
for q in call_pipe raw_pipe call_lat raw_lat sync_worker raw_sync $(printf 'allreduce_%s ' "${sizes[@]}") \
  graph_call graph16 graph1024_mcalls graph_ar_raw2 graph_ar_call graph_ar; do
  d=${disco[$q]:-} s=${skeleton[$q]:-}
  verdict=$(awk -v d="$d" -v s="$s" 'BEGIN {
    if (d == "" || s == "") { print "missing"; exit }
    diff = s - d; tol = 0.002 + 0.005 * (d < 0 ? -d : d)
    printf "%+.4f %s", diff, (diff <= tol && diff >= -tol) ? "ok" : "DIFFERS" }')
  printf '%-18s %12s %12s %s\n' "$q" "$d" "$s" "$verdict"
  [[ $verdict == *ok ]] || bad=$((bad + 1))
done
echo "skeleton, explicit algorithms (not compared):"
sed 's/^/  /' <<< "$explicit"
echo "crosscheck: P=$p, $((SECONDS - start)) s, $bad figure(s) differ"
((bad == 0))
