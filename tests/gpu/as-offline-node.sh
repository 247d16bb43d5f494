#!/usr/bin/env bash
# Runs a command as on an offline GPU node that lacks Open MPI and HDF5: in a private mount
# namespace, Open MPI's, PMIx's and MPI-HDF5's libraries, plugins, help files and programs are
# hidden (empty files and folders mounted over them), so whatever the command loads comes from
# elsewhere: the check that the GPU bundle (tests/gpu/make-bundle.sh) carries all it needs.
# Needs root (unshare -m); the host is not changed.
#   tests/gpu/as-offline-node.sh CMD [ARGS...]
set -euo pipefail
if [[ ${1:-} != --inside ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "as-offline-node.sh: needs root (a mount namespace)" >&2; exit 2; }
  exec unshare --mount --propagation private "$0" --inside "$@"
fi
shift
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch
hidden=0
for dir in "$libdir/openmpi" "$libdir/pmix2" "$libdir/hdf5/openmpi" /usr/share/openmpi \
  /usr/share/pmix /etc/openmpi; do
  [[ -d $dir ]] && mount -t tmpfs none "$dir" && hidden=$((hidden + 1))
done
shopt -s nullglob
for file in "$libdir"/lib{mpi,mpi_cxx,open-rte,open-pal,oshmem,pmix,hdf5_openmpi,hdf5_openmpi_hl}.so*; do
  [[ -f $file && ! -L $file ]] && mount --bind /dev/null "$file" && hidden=$((hidden + 1))
done
for program in mpirun mpiexec orterun orted ompi_info prterun; do
  path=$(command -v "$program" 2>/dev/null) || continue
  mount --bind /dev/null "$(readlink -f "$path")" && hidden=$((hidden + 1))
done
echo "as-offline-node: $hidden Open MPI / PMIx / HDF5 paths hidden" >&2
exec "$@"
