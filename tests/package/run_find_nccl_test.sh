#!/usr/bin/env bash
# FindNCCL finds installs that ship only libnccl.so.2 (as NVIDIA's nvidia-nccl wheels do), through
# NCCL_HOME and NCCL_ROOT, ahead of any other NCCL on the machine, and reads their version.
#   run_find_nccl_test.sh DISCO_SOURCE_DIR NCCL_HEADER
set -euo pipefail
src=$1 header=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
for var in NCCL_HOME NCCL_ROOT; do
  prefix=$dir/$var/nccl
  mkdir -p "$prefix/include" "$prefix/lib"
  sed 's/^#define NCCL_PATCH .*/#define NCCL_PATCH 77/' "$header" > "$prefix/include/nccl.h"
  : > "$prefix/lib/libnccl.so.2"  # only the runtime name, as in the wheel
  out=$(env "$var=$prefix" cmake -S "$src/tests/package/find_nccl" -B "$dir/$var/build" \
    -DDISCO_SOURCE_DIR="$src" 2>&1) || { echo "$out"; fail=1; continue; }
  line=$(grep 'probe:' <<<"$out")
  echo "$var: $line"
  if [[ $line != *"found=TRUE"* || $line != *"library=$prefix/lib/libnccl.so.2"* ||
    $line != *"version="*".77"* ]]; then
    echo "FAIL: $var=$prefix: FindNCCL did not find the libnccl.so.2-only install"
    fail=1
  fi
done
exit $fail
