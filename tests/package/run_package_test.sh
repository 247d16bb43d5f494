#!/usr/bin/env bash
# Installs disco from the build tree into a scratch prefix, builds tests/package against it with
# find_package(disco CONFIG) and with pkg-config, and runs both under mpirun at 2 ranks.
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
echo "package test: find_package and pkg-config consumers ran"
