#!/usr/bin/env bash
# Runs a command inside a root made by tests/mpich/make-root.sh, in namespaces of its own, so
# that nothing it starts or mounts outlives it and nothing of the host's MPI is seen:
#   mounts   the root bound onto itself (a mount point, as tests/mpi/run_h5_fault_test.sh's
#            `unshare -m` needs), a fresh /proc, /sys read-only, /dev's nodes from the host, a
#            devpts instance of its own, tmpfs on /dev/shm and /tmp (MPICH's and disco's
#            shared-memory segments never meet the host's), the checkout read-only at /disco;
#   pids     every process the command leaves is killed when it ends;
#   ipc      System V segments of its own.
# The network is the host's (loopback ports are chosen by the kernel, so the host's tests and
# these never collide). The environment is clean: PATH, HOME, LANG and the variables named in
# DISCO_IN_ROOT_ENV (space-separated NAME=VALUE words).
#   tests/mpich/in-root.sh ROOT SOURCE_DIR -- command [args...]
set -euo pipefail
root=$(cd "${1:?usage: in-root.sh ROOT SOURCE_DIR -- command...}" && pwd)
src=$(cd "${2:?usage: in-root.sh ROOT SOURCE_DIR -- command...}" && pwd)
shift 2
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || { echo "in-root.sh: no command" >&2; exit 2; }
if [[ ${DISCO_IN_ROOT_INSIDE:-} != 1 ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "SKIP: entering the MPICH root needs root"; exit 77; }
  exec env DISCO_IN_ROOT_INSIDE=1 unshare --mount --propagation private --pid --fork --kill-child --ipc \
    "$0" "$root" "$src" -- "$@"
fi
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys" 2>/dev/null || mount --rbind -o ro /sys "$root/sys"
for node in null zero full random urandom tty; do
  [[ -e $root/dev/$node ]] || touch "$root/dev/$node"
  mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
[[ -e $root/dev/ptmx ]] || touch "$root/dev/ptmx"
mount --bind "$root/dev/pts/ptmx" "$root/dev/ptmx"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mkdir -p "$root/disco"
mount --bind "$src" "$root/disco"
mount -o remount,bind,ro "$root/disco"
env_words=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  LANG=C.UTF-8 TERM=dumb)
read -r -a extra <<<"${DISCO_IN_ROOT_ENV:-}"
exec chroot "$root" /usr/bin/env -i "${env_words[@]}" "${extra[@]}" "$@"
