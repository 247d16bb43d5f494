#!/usr/bin/env bash
# examples/tp_mlp.py on a checkpoint that disco-demo --mlp wrote (float32 and bfloat16): both pass their
# reference checks, under mpirun and launch/disco-run; a session's life (lifecycle_app.py); and a
# short run of bench/python_call.py (when mpi4py is there).
#   run_examples_test.sh PYTHON DISCO_DEMO -- MPIEXEC ARGS...   (ARGS end with the -n flag)
set -euo pipefail
py=$1 demo=$2
shift 2
[ "${1:-}" = "--" ] && shift
root=$(cd "$(dirname "$0")/../.." && pwd)
base=${DISCO_TEST_SHARED_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$base"
dir=$(mktemp -d -p "$base")
trap 'rm -rf "$dir"' EXIT
small=(--hidden 64 --ffn 256 --layers 2 --tokens 16 --steps 2)
for dtype in float32 bfloat16; do
  "$@" 2 "$demo" --mlp "${small[@]}" --dtype "$dtype" --checkpoint "$dir/$dtype.h5" > "$dir/demo.log" 2>&1 ||
    { cat "$dir/demo.log"; exit 1; }
  "$@" 2 "$py" "$root/examples/tp_mlp.py" "${small[@]}" --dtype "$dtype" \
    --checkpoint "$dir/$dtype.h5" > "$dir/py.log" 2>&1 || { cat "$dir/py.log"; exit 1; }
  grep "reference" "$dir/demo.log" | sed "s/^ */disco-demo $dtype: /"
  grep "reference" "$dir/py.log" | sed "s/^ */tp_mlp.py  $dtype: /"
  grep -q "reference: .*PASS" "$dir/py.log"
  grep -qF "[steps] by replay of a captured graph" "$dir/py.log" || { cat "$dir/py.log"; exit 1; }
done
# The demo again through launch/disco-run (it picks mpirun here), its layers call by call.
"$root/launch/disco-run" -n 2 -- "$py" "$root/examples/tp_mlp.py" "${small[@]}" --calls \
  --checkpoint "$dir/float32.h5" > "$dir/run.log" 2>&1 || { cat "$dir/run.log"; exit 1; }
grep -q "reference: .*PASS" "$dir/run.log" || { cat "$dir/run.log"; exit 1; }
grep -qF "[steps] call by call (--calls)" "$dir/run.log" || { cat "$dir/run.log"; exit 1; }
grep -q "median step by replay [0-9.]* ms, call by call [0-9.]* ms" "$dir/run.log" ||
  { cat "$dir/run.log"; exit 1; }
echo "tp_mlp.py --calls through launch/disco-run: PASS"
# A session's life: with-block shutdown, calls after it, the exit code, a session kept after main.
rc=0
"$@" 2 "$py" "$(dirname "$0")/lifecycle_app.py" 3 > "$dir/life.log" 2>&1 || rc=$?
if [[ $rc -ne 3 ]] || ! grep -q "after shutdown: .*shut down" "$dir/life.log" ||
      ! grep -q "after main: .*this disco.Session has ended" "$dir/life.log"; then
  cat "$dir/life.log"; echo "lifecycle: exit $rc, expected 3"; exit 1
fi
echo "session lifecycle: ok (exit 3 as returned)"
if "$py" -c "import mpi4py" 2>/dev/null; then
  "$@" 2 "$py" "$root/bench/python_call.py" --iters 500 --repeats 1 > "$dir/bench.log" 2>&1 ||
    { cat "$dir/bench.log"; exit 1; }
  grep -q "Python call, pipelined" "$dir/bench.log" || { cat "$dir/bench.log"; exit 1; }
  if [[ $(tr -d '\000' < "$dir/bench.log" | wc -c) -ne $(wc -c < "$dir/bench.log") ]]; then
    echo "bench/python_call.py wrote a NUL byte (grep calls its output binary)"; exit 1
  fi
  echo "bench/python_call.py ran (figures from a short run are not measurements)"
else
  echo "bench/python_call.py skipped: no mpi4py (apt-get install python3-mpi4py)"
fi
