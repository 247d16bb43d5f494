#!/usr/bin/env bash
# The CPU kernel sets (DISCO_CPU_KERNELS, models/llama/kernels.h) against each other and the knob's
# refusals: check_kernels.py says what exactly. Exit 77 (CTest's skip) on a CPU without AVX2.
#   run_kernels_test.sh PYTHON MPIEXEC DISCO_DEMO [mpiexec flags...]
set -euo pipefail
py=$1 mpiexec=$2 demo=$3
shift 3
flags=()
for f in "$@"; do flags+=(--mpiexec-flag="$f"); done
exec "$py" "$(dirname "$0")/check_kernels.py" --mpiexec "$mpiexec" --demo "$demo" "${flags[@]}"
