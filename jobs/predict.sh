#!/usr/bin/env bash
# Predicts disco at 2 ... 4096 ranks by simulation (SimGrid SMPI, bench/sim): the control plane,
# syncs and allreduce through the session against raw MPI on the same simulated network, with the
# earlier design (--before) and a binary control tree beside them. Writes a CSV (one row per P) and
# PNG plots. Needs libsimgrid-dev (smpicxx, smpirun), python3 and gnuplot (gnuplot-nox).
#
#   jobs/predict.sh [--platform ft1|ft8|df1|FILE.xml] [--hosts FILE] [--ranks "2 8 64 512 4096"]
#                   [--out DIR] [--jobs N]
#
# --platform FILE.xml simulates your own SimGrid platform (https://simgrid.org/doc/latest/Platform.html);
# --hosts names its hosts, one per line, and rank r runs on line r modulo their number (list a
# host 8 times for 8 ranks per node).
# First a calibration step measures this machine's float32 reduction and memcpy rates (the
# skeleton built with mpicxx, --rates); the simulation charges reductions and copies at those
# rates. The network is the platform's (bench/sim/platform.py: 100 Gb/s, 0.25 us per hop) with
# 0.25 us of send and receive overhead per message (OS_INTER, OR_INTER), 0.1 us of controller and
# worker work per command. Every run is deterministic; iteration counts are small on purpose
# (pipelined figures are slopes between K/2 and K calls, latencies medians of identical
# iterations 100 us apart). A full ft1 sweep to 4096 ranks takes about 11 minutes on two cores
# (the replay runs included; measured with other jobs on the same cores).
#
# Output (DIR, default results/predict): predict-PLATFORM.csv, predict-PLATFORM-{control,sync,
# allreduce-4k,allreduce-64m,replay}.png, and raw-PLATFORM.txt (every RESULT line with its
# arguments).
# Columns are microseconds: call_pipe (time per pipelined no-op call), call_lat (issue to the last
# worker running it), sync_worker, sync_all, ar4k_* / ar64m_* (a 4 KiB / 64 MiB float32 allreduce
# through the session, per call: _session the same tensors each call, _fresh new disco.empty tensors
# each call, _made tensors a function made, _raw MPI_Allreduce on every rank); raw_* are the raw MPI
# counterparts; before_* the design before #17; binary_* frames down a binary tree; graph* one
# replay of a captured graph (disco-bench graph): graph16 / graph1024 of 16 / 1024 no-op calls,
# graph_ar of 15 calls with 2 allreduces of 4 KiB on a tensor a recorded call made, graph_ar_raw
# its baseline (2 raw MPI_Allreduces + one pipelined call).
set -euo pipefail
source "$(dirname "$0")/../bench/sim/common.sh"
platform=ft1
ranks="2 8 64 512 4096"
out=$SIM_REPO/results/predict
jobs=$(nproc)
while (($#)); do
  case $1 in
    --platform) platform=${2:?--platform needs a value}; shift 2 ;;
    --hosts) export SIM_HOSTS_FILE=${2:?--hosts needs a file}; shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a value}; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "predict.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $platform in
  ft1 | ft8 | df1) name=$platform ;;
  *.xml)
    [[ -f $platform && -f ${SIM_HOSTS_FILE:-} ]] ||
      { echo "predict.sh: --platform FILE.xml needs the file and --hosts FILE" >&2; exit 2; }
    platform=$(realpath "$platform")
    name=$(basename "$platform" .xml) ;;
  *) echo "predict.sh: --platform is ft1, ft8, df1 or a SimGrid platform file (*.xml)" >&2; exit 2 ;;
esac
for p in $ranks; do
  [[ $p =~ ^[0-9]+$ ]] && ((p >= 2)) || { echo "predict.sh: bad rank count '$p'" >&2; exit 2; }
  [[ $platform != ft8 ]] || ((p % 8 == 0)) || { echo "predict.sh: ft8 needs multiples of 8" >&2; exit 2; }
done
sim_need || exit
command -v gnuplot > /dev/null || { echo "predict.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 77; }
mkdir -p "$out"
sim_skeleton > /dev/null

# ---- Calibration: this machine's reduction and copy rates -----------------------------------
rates=$("$(sim_skeleton_real)" --rates)
reduce_gbs=$(value_of reduce_gbs "$rates ")
memcpy_gbs=$(value_of memcpy_gbs "$rates ")
echo "calibration: float32 sum $reduce_gbs GB/s, memcpy $memcpy_gbs GB/s (this machine, one core)"
costs=(--reduce-gbs "$reduce_gbs" --memcpy-gbs "$memcpy_gbs")

# ---- The runs: one line per simulation, run $jobs at a time ---------------------------------
lat=(--settle-us 100 --no-barrier)
list=$out/runs-$name.txt
: > "$list"
add() { printf '%q ' "$@" >> "$list"; echo >> "$list"; }
for p in $ranks; do
  pipe=40 few=5
  ((p > 512)) && pipe=16 few=2
  cap=0
  ((p >= 512)) && cap=32  # the ring's steps are identical: run 32 of each phase and scale
  add "$p" call_pipe,raw_pipe --iters $pipe "${lat[@]}"
  add "$p" call_lat,raw_lat,sync_worker,raw_sync,sync_all,raw_bcast_reduce,agree --iters $few "${lat[@]}"
  add "$p" sync_all --before --iters $few "${lat[@]}"
  add "$p" call_pipe --ctrl-tree binary --iters $pipe "${lat[@]}"
  add "$p" call_lat --ctrl-tree binary --iters $few "${lat[@]}"
  add "$p" ar_session,ar_fresh,ar_made,ar_raw --bytes 4096 --iters $few "${costs[@]}" "${lat[@]}"
  add "$p" ar_session,ar_fresh --before --bytes 4096 --iters $few "${costs[@]}" "${lat[@]}"
  add "$p" ar_session --bytes $((64 << 20)) --iters 2 --warmup 1 --ring-steps-cap $cap "${costs[@]}" "${lat[@]}"
  add "$p" ar_session --before --bytes $((64 << 20)) --iters 2 --warmup 1 --ring-steps-cap $cap "${costs[@]}" "${lat[@]}"
  add "$p" ar_raw --bytes $((64 << 20)) --iters 1 "${costs[@]}" "${lat[@]}"
  # Capture and replay: per replay, the slope between K/2 and K replays (identical replays: a
  # small K gives the same slope; the step graph's replays take 2 allreduces each).
  graph=16
  ((p > 512)) && graph=8
  add "$p" graph16,graph1024 --iters $graph "${costs[@]}" "${lat[@]}"
  add "$p" graph_ar --bytes 4096 --iters $graph "${costs[@]}" "${lat[@]}"
  add "$p" graph_ar_raw --bytes 4096 --iters $graph "${costs[@]}" "${lat[@]}"
done
raw=$out/raw-$name.txt
start=$SECONDS
echo "simulating $(wc -l < "$list") runs on $name, P = $ranks ($jobs at a time)"
export SIM_BUILD platform
# shellcheck disable=SC2016
xargs -P "$jobs" -I{} bash -c 'eval "set -- {}"; p=$1; shift
  if r=$("'"$SIM_DIR"'/simulate.sh" "$platform" "$p" "$@"); then
    echo "$r" | sed "s|\$| args=$*|"
  else echo "FAILED P=$p $*" >&2; fi' < "$list" > "$raw"
echo "simulated in $((SECONDS - start)) s: $(grep -c '^RESULT' "$raw") results in $raw"

# ---- CSV and plots --------------------------------------------------------------------------
csv=$out/predict-$name.csv
python3 - "$raw" "$csv" "$name" "$reduce_gbs" "$memcpy_gbs" <<'EOF'
import re, sys
raw, csv, platform, reduce_gbs, memcpy_gbs = sys.argv[1:]
rows, cols = {}, []
for line in open(raw):
    if not line.startswith("RESULT"):
        continue
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    mode, p = f["mode"], int(f["P"])
    if mode.startswith("ar_"):
        size = "ar64m" if int(f["bytes"]) >= 1 << 20 else "ar4k"
        mode = size + mode[2:] if mode != "ar_raw" else size + "_raw"
    name = ("before_" if f["design"] == "before" else "") + \
           ("binary_" if f["transport"] == "binary" else "") + mode
    if name not in cols:
        cols.append(name)
    rows.setdefault(p, {})[name] = float(f["value_us"])
order = ["call_pipe", "raw_pipe", "binary_call_pipe", "call_lat", "raw_lat", "binary_call_lat",
         "sync_worker", "raw_sync", "sync_all", "before_sync_all", "raw_bcast_reduce", "agree",
         "ar4k_session", "ar4k_fresh", "ar4k_made", "before_ar4k_session", "before_ar4k_fresh",
         "ar4k_raw", "ar64m_session", "before_ar64m_session", "ar64m_raw",
         "graph16", "graph1024", "graph_ar", "graph_ar_raw"]
cols = [c for c in order if c in cols] + [c for c in cols if c not in order]
with open(csv, "w") as out:
    out.write("# disco predicted by bench/sim (SimGrid SMPI), platform %s, microseconds; "
              "reduce %s GB/s, memcpy %s GB/s measured on the predicting machine\n"
              % (platform, reduce_gbs, memcpy_gbs))
    out.write(",".join(["P"] + cols) + "\n")
    for p in sorted(rows):
        out.write(",".join([str(p)] + ["%.4g" % rows[p][c] if c in rows[p] else ""
                                       for c in cols]) + "\n")
EOF
plot() {  # plot NAME TITLE YLABEL COLUMN:TITLE...
  local plot_name=$1 title=$2 ylabel=$3
  shift 3
  local header series=() col
  header=$(sed -n 2p "$csv")
  for spec in "$@"; do
    col=$(tr ',' '\n' <<< "$header" | grep -nx "${spec%%:*}" | cut -d: -f1) || continue
    series+=("'$csv' using 1:(\$$col > 0 ? \$$col : NaN) with linespoints title '${spec#*:}'")
  done
  ((${#series[@]})) || return 0
  gnuplot <<PLOT
set terminal png size 900,600
set output '$out/predict-$name-$plot_name.png'
set datafile separator ','
set datafile missing ''
set key top left
set logscale xy
set grid
set title "$title ($name, simulated)"
set xlabel 'MPI ranks'
set ylabel '$ylabel'
plot $(IFS=,; echo "${series[*]}")
PLOT
}
plot control 'Control plane: pipelined calls and completion' microseconds \
  call_pipe:'pipelined call' raw_pipe:'raw MPI\_Bcast, pipelined' \
  binary_call_pipe:'pipelined call, binary tree' call_lat:'call completion' \
  raw_lat:'raw MPI\_Bcast completion' binary_call_lat:'call completion, binary tree'
plot sync 'Syncs' microseconds sync_worker:'SyncWorker(P-1)' raw_sync:'raw bcast + reply' \
  sync_all:'SyncAll' before_sync_all:'SyncAll before #17' raw_bcast_reduce:'raw bcast + reduce'
plot allreduce-4k '4 KiB allreduce through the session' 'microseconds per call' \
  ar4k_session:'session, same tensors' ar4k_fresh:'session, new tensors' \
  ar4k_made:'session, tensors a function made' before_ar4k_session:'session, same tensors, before #17' \
  before_ar4k_fresh:'session, new tensors, before #17' \
  ar4k_raw:'raw MPI\_Allreduce'
plot allreduce-64m '64 MiB allreduce through the session' 'microseconds per call' \
  ar64m_session:'session' before_ar64m_session:'session before #17 (ring)' \
  ar64m_raw:'raw MPI\_Allreduce (Open MPI 4.1: Rabenseifner)'
plot replay 'Capture and replay: one replay' 'microseconds per replay' \
  call_pipe:'one pipelined call' graph16:'16 no-op calls, replayed' \
  graph1024:'1024 no-op calls, replayed' \
  graph_ar:'15 calls + 2 allreduces of 4 KiB, replayed' \
  graph_ar_raw:'2 raw MPI\_Allreduces of 4 KiB + one call'
echo "wrote $csv and $(ls "$out"/predict-"$name"-*.png | wc -l) plots in $out"
column -s, -t < <(tail -n +2 "$csv")
