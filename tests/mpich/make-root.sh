#!/usr/bin/env bash
# Makes a clean Debian root with MPICH (and no Open MPI) for the MPICH stage of ./launch/test:
# mmdebstrap --variant=apt of the host's release with MPICH, parallel HDF5 for MPICH and the
# rest of disco's build and test dependencies. The host's Debian package cache is shared: its
# .deb files are hard-linked in before apt runs and the ones apt downloaded are linked back
# after, so a second root (or the host) downloads nothing twice. No mount is made.
#   tests/mpich/make-root.sh ROOT [extra packages...]
# Exit 77 with the reason when it cannot be made here (not root, no mmdebstrap, no mirror).
# ROOT is replaced only when it was made for another package set (ROOT/.disco-packages).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${1:?usage: make-root.sh ROOT [extra packages...]}
shift
source "$here/../../launch/common.sh"
DISCO_MPI=mpich disco_packages
# Tests: h5py writes the HDF5 fixtures, pytest runs the Python suite, mount and pgrep are used by
# the HDF5 fault tests. No python3-mpi4py: Debian builds it against Open MPI only.
packages=("${DISCO_PACKAGES[@]}" python3-h5py python3-pytest procps mount "$@")
want=$(printf '%s\n' "${packages[@]}" | sort -u | tr '\n' ' ')
if [[ -f $root/.disco-packages && $(cat "$root/.disco-packages") == "$want" ]]; then
  echo "make-root: $root is up to date"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || { echo "SKIP: making a Debian root needs root"; exit 77; }
command -v mmdebstrap >/dev/null || { echo "SKIP: no mmdebstrap (apt-get install mmdebstrap)"; exit 77; }
. /etc/os-release
suite=${DISCO_MPICH_SUITE:-${VERSION_CODENAME:-bookworm}}
mirror=${DISCO_MPICH_MIRROR:-http://deb.debian.org/debian}
security=${DISCO_MPICH_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# An offline machine skips at once (through a proxy, mmdebstrap's own failure says so below).
if [[ -z ${http_proxy:-}${HTTP_PROXY:-} ]] && ! apt-config dump 2>/dev/null | grep -qi 'proxy "'; then
  timeout 20 bash -c "exec 3<>/dev/tcp/$(sed -E 's|^[a-z]+://([^/:]+).*|\1|' <<<"$mirror")/80" \
    2>/dev/null || { echo "SKIP: the Debian mirror $mirror cannot be reached"; exit 77; }
fi
rm -rf --one-file-system "$root"
mkdir -p "$(dirname "$root")"
cache=/var/cache/apt/archives
log=$root.log
echo "+ mmdebstrap --variant=apt $suite $root (${packages[*]}; log in $log)"
t0=$SECONDS
rc=0
mmdebstrap --variant=apt --mode=root --include="$(IFS=,; echo "${packages[*]}")" \
  --skip=download/empty --skip=essential/unlink \
  --setup-hook="mkdir -p \"\$1$cache\"; find $cache -maxdepth 1 -name '*.deb' -exec cp -l -t \"\$1$cache\" {} + 2>/dev/null || true" \
  --customize-hook="find \"\$1$cache\" -maxdepth 1 -name '*.deb' -exec cp -l -n -t $cache {} + 2>/dev/null || true" \
  "$suite" "$root" \
  "deb $mirror $suite main" "deb $mirror $suite-updates main" \
  "deb $security $suite-security main" >"$log" 2>&1 || rc=$?
if ((rc != 0)); then
  tail -20 "$log"
  if grep -qE "Temporary failure resolving|Could not resolve|Failed to fetch|Unable to connect" "$log"; then
    echo "SKIP: the Debian mirror could not be used (see $log)"
    rm -rf --one-file-system "$root"
    exit 77
  fi
  echo "make-root: mmdebstrap failed ($rc)"
  exit 1
fi
if chroot "$root" dpkg-query -W -f='${Package}\n' | grep -i openmpi; then
  echo "make-root: Open MPI got into the root (above): a package pulled it in"
  exit 1
fi
# Loopback names, as any Debian system has them (the apt variant writes no /etc/hosts).
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
echo "$want" >"$root/.disco-packages"
echo "make-root: $root made in $((SECONDS - t0)) s ($(du -sh --one-file-system "$root" | cut -f1))"
