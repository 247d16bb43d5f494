# Shared by bench/sim's scripts and jobs/predict.sh (sourced): where the simulation builds live,
# the SMPI settings every simulated run uses, and helpers.
SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SIM_REPO=$(cd "$SIM_DIR/../.." && pwd)
SIM_BUILD=${DISCO_SIM_BUILD:-$SIM_REPO/build-sim}

# SimGrid 3.32 settings (bench/sim/README.md says why each is there):
#  - Open MPI 4.1's collective choices (SimGrid's "ompi" selector copies its decision tables);
#  - no benchmarking of the code between MPI calls: CPU costs are injected explicitly;
#  - eager messages up to 8 KiB (UCX-like), sent without waiting for the receive;
#  - MPI_Iprobe / MPI_Test cost 0.1 / 0.05 us (SMPI's default is 100 us, and growing);
#  - no Ethernet calibration factors: the platform's latency and 97 % of its bandwidth.
sim_cfg=(
  --cfg=smpi/coll-selector:ompi --cfg=smpi/simulate-computation:no --cfg=smpi/cpu-threshold:0
  --cfg=smpi/host-speed:1Gf
  --cfg=smpi/async-small-thresh:8192 --cfg=smpi/send-is-detached-thresh:8192
  --cfg=smpi/iprobe:1e-7 --cfg=smpi/test:5e-8 --cfg=smpi/grow-injected-times:no --cfg=smpi/wtime:0
  --cfg=smpi/lat-factor:0:1 --cfg=smpi/bw-factor:0:0.97 --cfg=network/crosstraffic:0
  --cfg=contexts/stack-size:256 --cfg=contexts/guard-size:0
  --cfg=smpi/shared-malloc-blocksize:67108864
  --log=root.thres:error --log=smpi_utils.thres:error
)

sim_need() {
  command -v smpicxx > /dev/null && command -v smpirun > /dev/null && return 0
  echo "bench/sim: SimGrid's SMPI is not installed (Debian: apt-get install libsimgrid-dev)" >&2
  return 77
}

# The skeleton's sources, and the headers of disco's it takes its constants from (skeleton.h).
sim_sources=("$SIM_DIR"/*.cc)
sim_deps=("${sim_sources[@]}" "$SIM_DIR"/*.h "$SIM_REPO"/src/protocol/frame_header.h
  "$SIM_REPO"/src/session/config.h "$SIM_REPO"/src/session/transport_tags.h
  "$SIM_REPO"/src/ccl/mpi/ring.h "$SIM_REPO"/src/ccl/builtins.h "$SIM_REPO"/src/core/env_knobs.def)

# sim_build NAME COMPILER FLAGS...: builds the skeleton as $SIM_BUILD/NAME when missing or older
# than one of its sources; prints its path.
sim_build() {
  local name=$1 compiler=$2 dep stale=0
  shift 2
  mkdir -p "$SIM_BUILD"
  local bin=$SIM_BUILD/$name
  for dep in "${sim_deps[@]}"; do [[ $dep -nt $bin ]] && stale=1; done
  if [[ ! -x $bin ]] || ((stale)); then
    "$compiler" -std=c++17 "$@" -I "$SIM_REPO/src" -o "$bin" "${sim_sources[@]}" 2> "$SIM_BUILD/$name.log" || {
      cat "$SIM_BUILD/$name.log" >&2
      return 1
    }
  fi
  echo "$bin"
}
# The skeleton for SMPI (predictions), and on real MPI (calibration, --rates).
sim_skeleton() { sim_build skeleton-sim smpicxx -O2 -DSKEL_SIM; }
sim_skeleton_real() { sim_build skeleton-real mpicxx -O3 -march=native; }

# sim_platform KIND P: writes the platform and sets SIM_XML and SIM_HOSTS. KIND is one of
# platform.py's, or a SimGrid platform file (*.xml) of your own; then SIM_HOSTS_FILE names its
# hosts, one per line, and rank r runs on line r modulo their number.
sim_platform() {
  if [[ $1 == *.xml ]]; then
    [[ -f $1 ]] || { echo "bench/sim: no platform file '$1'" >&2; return 2; }
    [[ -f ${SIM_HOSTS_FILE:-} ]] || {
      echo "bench/sim: a platform file needs SIM_HOSTS_FILE (its hosts, one per line)" >&2
      return 2
    }
    mkdir -p "$SIM_BUILD/platforms"
    SIM_XML=$(realpath "$1")
    SIM_HOSTS=$SIM_BUILD/platforms/$(basename "$1" .xml)-$2.hosts
    awk -v p="$2" 'NF { h[n++] = $1 } END { if (n) for (r = 0; r < p; r++) print h[r % n] }' \
      "$SIM_HOSTS_FILE" > "$SIM_HOSTS"
    [[ -s $SIM_HOSTS ]] || { echo "bench/sim: $SIM_HOSTS_FILE lists no host" >&2; return 2; }
    return 0
  fi
  local files
  mapfile -t files < <(python3 "$SIM_DIR/platform.py" "$1" "$2" "$SIM_BUILD/platforms")
  SIM_XML=${files[0]}
  SIM_HOSTS=${files[1]}
  [[ -n $SIM_XML && -n $SIM_HOSTS ]]
}

# value_of KEY LINE: the value of KEY=VALUE in a RESULT line.
value_of() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< "$2"; }
