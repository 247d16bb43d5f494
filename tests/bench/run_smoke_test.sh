#!/usr/bin/env bash
# CTest bench.smoke: bench/decode_bench.py end to end on the tiny model, 1 repeat, 4 new tokens,
# batches 1 and 2, 1 and 2 ranks/threads, float32 and bfloat16 (disco timed with --disco-kv f16),
# with the baselines this machine has: torch and llama.cpp from build/venv-bench (bench/venv.sh)
# when it is there, else torch from the transformers environment launch/test already makes
# ($DISCO_HF_VENV, else .venv-hf: launch/common.sh's disco_hf_venv; no second download in CI),
# else disco alone, saying why.
# llama.cpp only where llama-cpp-python is already installed (CI never builds it: bench/venv.sh
# --llama-cpp does, in minutes). Checks the output's shape, not its speed (no timed test).
#   run_smoke_test.sh MPIEXEC DISCO_DEMO VENV_PYTHON [mpiexec flags...]
set -euo pipefail
mpiexec=$1 demo=$2 venv_py=$3
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3
hf=${DISCO_HF_VENV:-$(cd "$here/../.." && pwd)/.venv-hf}
if [[ -x $venv_py ]]; then
  py=$venv_py
elif [[ -f $hf/.disco-ready ]]; then
  py=$hf/bin/python
  echo "bench.smoke: no $venv_py (bench/venv.sh makes it): torch from $hf, llama.cpp skipped"
else
  echo "bench.smoke: no $venv_py nor $hf: torch and llama.cpp are skipped"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=()
for f in "$@"; do flags+=("--mpiexec-flag=$f"); done
"$py" "$here/../../bench/decode_bench.py" --models tiny --batches 1,2 --repeats 1 \
  --new-tokens 4 --stream-mib 16 --python "$py" --demo "$demo" --mpiexec "$mpiexec" --disco-kv f16 \
  "${flags[@]}" --cache "$work/cache" --json "$work/out.json" | tee "$work/out.txt"
"$py" - "$work/out.json" "$work/out.txt" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
rows = j["rows"]
for who in ("disco", "torch", "llama.cpp"):
    mine = [r for r in rows if r["who"] == who]
    if who in j["skipped"]:
        assert not mine and f"{who}: skipped: " in out, who
        print(f"bench.smoke: {who} skipped: {j['skipped'][who]}")
        continue
    dtypes = {r["dtype"] for r in mine}  # torch has no int8 row
    assert dtypes >= {"float32", "bfloat16"} and (who == "torch" or "int8" in dtypes), dtypes
    assert len(mine) == len(dtypes) * 2 * 2, (who, len(mine))  # dtypes x batches x ranks
    if any(r.get("excluded") for r in mine):  # reported, not timed: the harness did its job
        assert f"float32 tokens, {who} 1 thread against disco 1 rank: DIFFER" in out, who
        print(f"bench.smoke: {who} not timed: {mine[0]['excluded']}")
        continue
    assert all(r.get("decode_median", 0) > 0 and r.get("prefill_median", 0) > 0 for r in mine), mine
    # what n cores read beside each run (1 repeat: one figure), and the fraction of it
    assert all(len(r["read_beside"]) == 1 and r["read_beside"][0] > 0 and r["decode_of_beside"] > 0
               for r in mine), mine
    # disco timed with its float16 kv cache (--disco-kv f16), the others with float32 ones
    assert all(r["note"].endswith(", f16 kv cache") == (who == "disco") for r in mine), mine
    if who != "disco":
        assert f"float32 tokens, {who} 1 thread against disco 1 rank: the same" in out, who
assert j["machine"]["bandwidth"]["1"]["read"] > 0 and len(j["machine"]["spinners"]) == 2
assert "| model | dtype | batch | who |" in out and "| of read beside |" in out and "disco ranks = threads" in out
assert ("the machine was LOADED" in out) == bool(j["loaded"])
assert "float32 tokens, disco's float16 kv cache against its float32 one: " in out
print("bench.smoke: PASS")
PY
