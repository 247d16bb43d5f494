#!/usr/bin/env bash
# disco-demo --dtype int8 against float32, under each int8 kernel set, 1 and 2 ranks: check_q8.py
# says what exactly. Exit 77 (CTest's skip) on a CPU without AVX2.
#   run_q8_test.sh PYTHON MPIEXEC DISCO_DEMO [mpiexec flags...]
set -euo pipefail
py=$1 mpiexec=$2 demo=$3
shift 3
flags=()
for f in "$@"; do flags+=(--mpiexec-flag="$f"); done
exec "$py" "$(dirname "$0")/check_q8.py" --mpiexec "$mpiexec" --demo "$demo" "${flags[@]}"
