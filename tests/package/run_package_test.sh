#!/usr/bin/env bash
# Installs disco from the build tree into a scratch prefix, builds tests/package against it with
# find_package(disco CONFIG) and with pkg-config, and runs both under mpirun at 2 ranks; then runs
# the installed tools as a user gets them: from the prefix, with no LD_LIBRARY_PATH.
set -euo pipefail
src=$1 build=$2 cmake=$3 mpiexec=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$cmake" --install "$build" --prefix "$work/prefix" >/dev/null
"$cmake" -S "$src/tests/package" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
"$cmake" --build "$work/build" >/dev/null
"$mpiexec" -n 2 --oversubscribe "$work/build/consumer"
# pkg-config route
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib64/pkgconfig"
mpicxx -o "$work/consumer_pc" "$src/tests/package/consumer.cc" $(pkg-config --cflags --libs disco)
"$mpiexec" -n 2 --oversubscribe "$work/consumer_pc"
# The installed tools start with nothing but their RPATH ($ORIGIN/../lib) to find libdisco.
unset LD_LIBRARY_PATH
for tool in "$work"/prefix/bin/disco-*; do
  [[ $tool == */disco-run ]] && continue
  if ldd "$tool" | grep -q "not found"; then
    ldd "$tool"
    echo "package test: $tool cannot find its libraries"
    exit 1
  fi
done
"$work/prefix/bin/disco-serve" --help >/dev/null
{ "$work/prefix/bin/disco-remote" 2>&1 || true; } | grep -q "usage: disco-remote"
"$mpiexec" -n 2 --oversubscribe "$work/prefix/bin/disco-example" >/dev/null
echo "package test: find_package and pkg-config consumers ran; installed tools start from the prefix"
