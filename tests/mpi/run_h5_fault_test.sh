#!/usr/bin/env bash
# HDF5 saves and loads where they used to lose data or hang (tests/mpi/h5_save_program.cc):
#   full     adding a dataset to an existing file on a full filesystem
#   readonly adding a dataset to a file on a read-only filesystem
#   killed   a rank killed while a dataset is being added
#   race     loads while another program replaces the file again and again
#   memory   a load whose shard allocation fails on one worker only
#   concurrent  two jobs adding to one new file at once
# Each case must end within its time limit, without a crash (exit 3 is a reported error), with the
# cause in the error, the old file readable and unchanged bit for bit (h5py and disco), and no
# partial file left behind. The filesystems are private tmpfs mounts (root, `unshare -m`); without
# them the script exits 77 (CTest's skip) saying why.
#   run_h5_fault_test.sh CASE MPIEXEC PROGRAM [mpiexec flags...]
set -uo pipefail
case_name=$1 mpiexec=$2 program=$3
shift 3
if [[ ${DISCO_H5_FAULT_INSIDE:-} != 1 ]]; then
  if [[ $(id -u) -ne 0 ]] || ! unshare --mount true 2>/dev/null; then
    echo "SKIP: needs root and a private mount namespace (unshare -m) for its tmpfs mounts"
    exit 77
  fi
  exec env DISCO_H5_FAULT_INSIDE=1 unshare --mount --propagation private "$0" "$case_name" \
    "$mpiexec" "$program" "$@"
fi
flags=("$@")
# A python3 with h5py (Debian's python3-h5py; DISCO_TEST_PYTHON names another).
py=""
for candidate in ${DISCO_TEST_PYTHON:-} /usr/bin/python3 python3; do
  if "$candidate" -c "import h5py" 2>/dev/null; then py=$candidate; break; fi
done
[[ -n $py ]] || { echo "SKIP: no python3 with h5py (Debian's python3-h5py)"; exit 77; }
dir=$(mktemp -d)
trap 'umount -R "$dir" 2>/dev/null; rm -rf "$dir"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
run() {  # run LIMIT NP ARGS...: the program under mpiexec; sets $out and $rc
  local limit=$1 np=$2
  shift 2
  out=$(timeout -s KILL "$limit" "$mpiexec" -n "$np" "${flags[@]}" "$program" "$@" 2>&1)
  rc=$?
  echo "+ $program $* -> exit $rc"
  echo "$out" | sed 's/^/  | /'
}
# check_intact FILE SUM: the file is the one whose sha256 is SUM, h5py reads every dataset of it,
# and no partial file lies beside it.
check_intact() {
  local file=$1 sum=$2
  [[ $(sha256sum "$file" | cut -d' ' -f1) == "$sum" ]] || bad "$file changed"
  "$py" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r'); [f[k][()] for k in f]" "$file" ||
    bad "h5py cannot read $file"
  local partial
  partial=$(ls "$(dirname "$file")" | grep partial)
  [[ -z $partial ]] || bad "partial files left: $partial"
}
expect_error() {  # expect_error NEEDLE: the run ended with exit 3 (a reported error) naming NEEDLE
  if [[ $rc -ne 3 ]]; then bad "expected exit 3 (a reported error), got $rc"; fi
  grep -q -- "$1" <<<"$out" || bad "the error does not say '$1'"
}

case $case_name in
  full)
    mkdir "$dir/full" && mount -t tmpfs -o size=1m tmpfs "$dir/full"
    f=$dir/full/ckpt.h5
    run 60 2 save "$f" w 1024 && run 60 2 add "$f" v 512
    [[ $rc -eq 0 ]] || bad "the setup saves failed"
    sum=$(sha256sum "$f" | cut -d' ' -f1)
    run 60 2 add "$f" big 262144  # 2 MiB on a 1 MiB filesystem
    expect_error "No space left on device"
    check_intact "$f" "$sum"
    run 60 2 load "$f" w 0
    [[ $rc -eq 0 ]] || bad "disco cannot load w after the failed save"
    ;;
  readonly)
    mkdir "$dir/ro" && mount -t tmpfs tmpfs "$dir/ro"
    f=$dir/ro/ckpt.h5
    run 60 2 save "$f" w 1024
    sum=$(sha256sum "$f" | cut -d' ' -f1)
    mount -o remount,ro "$dir/ro"
    run 60 2 add "$f" v 512
    expect_error "Read-only file system"
    check_intact "$f" "$sum"
    run 60 2 save "$dir/ro/new.h5" w 16
    expect_error "Read-only file system"
    [[ ! -e $dir/ro/new.h5 ]] || bad "a failed save left new.h5"
    ;;
  killed)
    mkdir "$dir/k" && mount -t tmpfs tmpfs "$dir/k"
    f=$dir/k/ckpt.h5
    run 60 2 save "$f" w 1024
    sum=$(sha256sum "$f" | cut -d' ' -f1)
    # Kill rank 1 as soon as the save's own copy appears, half-way through adding 256 MiB.
    ( for _ in $(seq 2000); do
        ls "$dir/k" | grep -q partial && break
        sleep 0.01
      done
      for pid in $(pgrep -f "add $f big"); do
        tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null |
          grep -qxE '(OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK)=1' &&
          kill -KILL "$pid"
      done ) &
    killer=$!
    run 60 2 add "$f" big 33554432
    wait $killer
    [[ $rc -ne 0 ]] || bad "the job whose rank was killed exited 0"
    [[ $(sha256sum "$f" | cut -d' ' -f1) == "$sum" ]] || bad "$f changed"
    "$py" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r'); f['w'][()]" "$f" ||
      bad "h5py cannot read $f"
    ;;
  race)
    # Three versions of one file, told apart by dtype, shape and sums (2 workers):
    "$py" - "$dir" <<'EOF'
import h5py, numpy as np, sys
d = sys.argv[1]
with h5py.File(d + "/a.h5", "w") as f: f["w"] = np.full(2048, 5.0, dtype="float32")
with h5py.File(d + "/b.h5", "w") as f: f["w"] = np.arange(1024, dtype="float32")
with h5py.File(d + "/c.h5", "w") as f: f["w"] = np.full(1024, 7, dtype="int32")
EOF
    cp "$dir/a.h5" "$dir/race.h5"
    ( while :; do
        for v in b c a; do cp "$dir/$v.h5" "$dir/tmp.h5" && mv "$dir/tmp.h5" "$dir/race.h5"; done
      done ) &
    swapper=$!
    run 120 2 load-race "$dir/race.h5" w 150
    kill $swapper; wait $swapper 2>/dev/null
    [[ $rc -eq 0 ]] || bad "load-race exited $rc"
    grep '^load ' <<<"$out" | sed 's/^load [0-9]*: //' | sort | uniq -c
    versions=("float32 (1024,) 5120.0 | float32 (1024,) 5120.0"
      "float32 (512,) 130816.0 | float32 (512,) 392960.0"
      "int32 (512,) 3584.0 | int32 (512,) 3584.0")
    while read -r line; do
      seen=0
      for v in "${versions[@]}"; do [[ $line == "$v" ]] && seen=1; done
      ((seen)) || bad "a load mixed versions: $line"
    done < <(grep '^load ' <<<"$out" | sed 's/^load [0-9]*: //')
    ;;
  memory)
    if grep -q __asan_init "$program"; then  # ASan maps terabytes of shadow: no ulimit -v
      echo "SKIP: a sanitizer build cannot run under ulimit -v"
      exit 77
    fi
    "$py" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'w') as f: f.create_dataset('w', shape=(1 << 28,), dtype='float32', chunks=(1 << 20,))
" "$dir/sparse.h5"
    # Rank 1 may not map the 1 GiB shard; rank 0 may. The limit is below the shard alone, whatever
    # the MPI maps besides (Open MPI's ranks about 470 MB, MPICH's about 190 MB; under a limit of
    # 1.2 GB, MPICH's rank 1 mapped the shard, glibc reserving less for its threads' arenas).
    cat > "$dir/limited.sh" <<EOF
#!/bin/bash
[[ \${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-\${PMIX_RANK:-0}}} == 1 ]] && ulimit -v 1000000
exec "$program" "\$@"
EOF
    chmod +x "$dir/limited.sh"
    program=$dir/limited.sh
    start=$SECONDS
    run 60 2 load "$dir/sparse.h5" w -1
    expect_error "out of host memory"
    ((SECONDS - start < 30)) || bad "the failed load took $((SECONDS - start)) s"
    ;;
  concurrent)
    f=$dir/new.h5
    (run 60 2 add "$f" w 4096; echo "first: $rc" > "$dir/first.rc") &
    run 60 2 add "$f" w 4096
    wait
    [[ $rc -eq 0 && $(cat "$dir/first.rc") == "first: 0" ]] || bad "a concurrent save failed"
    "$py" -c "import h5py, sys; assert h5py.File(sys.argv[1], 'r')['w'].shape == (8192,)" "$f" ||
      bad "the file is not one whole save"
    [[ -z $(ls "$dir" | grep partial) ]] || bad "partial files left"
    ;;
  *)
    echo "run_h5_fault_test.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac
((fail)) && exit 1
echo "PASS: $case_name"
