#!/usr/bin/env bash
# disco-demo's Llama decoder on tiny checkpoints written by tiny_checkpoint.py (numpy):
#   - the generated ids are the same at 1, 2 and 4 ranks, by replay and call by call, from one
#     safetensors file (F32), sharded ones with an index (F16, BF16: the same values), in bfloat16,
#     and from the HDF5 file --convert wrote; --dump-logits holds (B, T, vocab) logits whose argmax
#     are the generated ids; the report lines are there;
#   - --kv-dtype float16 gives the same ids and logits close to float32's; refused on a GPU;
#   - checkpoints that do not fit their config fail naming the tensor (and the shapes), and sizes
#     the ranks cannot split name the number; nothing hangs;
#   - with a Python (PYTHONPATH holding disco), examples/generate.py prints the same lines.
#   run_llama_test.sh PYTHON MPIEXEC DEMO [mpiexec flags...]
set -euo pipefail
py=$1 mpiexec=$2 demo=$3
shift 3
flags=("$@")
here=$(cd "$(dirname "$0")" && pwd)
base=${DISCO_TEST_SHARED_DIR:-${TMPDIR:-/tmp}}  # every rank must see the checkpoints
mkdir -p "$base"
dir=$(mktemp -d -p "$base")
trap 'rm -rf "$dir"' EXIT
fail=0

mk() { "$py" "$here/tiny_checkpoint.py" "$@"; }
mk "$dir/f32"
mk "$dir/f16" --dtype F16 --shards 3
mk "$dir/bf16" --dtype BF16 --shards 2
# Four prompts of different lengths, one of 70 tokens (more than a Shape carries over the wire);
# 95 prompt tokens in all, so prefill takes the sgemm path.
long=$(seq -s, 10 79)
prompts=(--prompt 1,5,9 --prompt 4,2 --prompt 3,1,4,1,5,9,2,6,5,3,5,8,9,7,9,3,2,3,8,4
  --prompt "$long")

run() {  # run NP demo-args...: the demo's output; a non-zero exit fails the test
  local np=$1 out rc=0
  shift
  out=$(timeout 120 "$mpiexec" -n "$np" "${flags[@]}" "$demo" "${prompts[@]}" \
    --max-new-tokens 8 --warmup 0 "$@" 2>&1) || rc=$?
  if ((rc != 0)); then
    echo "FAIL: exit $rc at $np rank(s): $*" >&2
    echo "$out" >&2
    return 1
  fi
  echo "$out"
}
same() {  # same WHAT OUTPUT: its generated lines are the reference's
  local got
  got=$(grep '^generated:' <<<"$2" || true)
  if [[ $got == "$ref" ]]; then
    echo "ok: $1"
  else
    echo "FAIL: $1 generated other ids:"
    echo "$got"
    echo "reference (1 rank, F32):"
    echo "$ref"
    fail=1
  fi
}

out=$(run 1 --model "$dir/f32")
echo "$out"
ref=$(grep '^generated:' <<<"$out")
[[ $(wc -l <<<"$ref") -eq 4 ]] || { echo "FAIL: not one generated line per prompt"; exit 1; }
for want in '^prefill: [0-9.]+ tokens/s$' '^decode: [0-9.]+ tokens/s$' \
  '^runtime share of a decode step: [0-9.]+% \(by replay\), [0-9.]+% \(call by call\)$' \
  '^kv cache per rank: [0-9.]+ MiB \(float32\)$' '^peak rss per rank \(MiB\): [0-9.]+$' \
  '^weights per rank: [0-9.]+ MiB$'; do
  grep -Eq "$want" <<<"$out" || { echo "FAIL: no line matching $want"; fail=1; }
done

same "2 ranks" "$(run 2 --model "$dir/f32")"
out=$(run 4 --model "$dir/f32")
same "4 ranks" "$out"
grep -Eq '^peak rss per rank \(MiB\): [0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+$' <<<"$out" ||
  { echo "FAIL: not 4 peak RSS values"; fail=1; }
out=$(run 2 --model "$dir/f32" --calls)
same "2 ranks, call by call" "$out"
grep -Eq '^runtime share of a decode step: [0-9.]+% \(call by call\), [0-9.]+% \(by replay\)$' \
  <<<"$out" || { echo "FAIL: --calls does not report call by call first"; fail=1; }
same "4 ranks, F16 in 3 shards" "$(run 4 --model "$dir/f16")"
same "2 ranks, BF16 in 2 shards" "$(run 2 --model "$dir/bf16")"
same "2 ranks, --dtype bfloat16" "$(run 2 --model "$dir/bf16" --dtype bfloat16)"
same "1 rank, F32 into --dtype bfloat16" "$(run 1 --model "$dir/f32" --dtype bfloat16)"

# --dump-logits: (B, T, vocab) float32 whose argmax are the generated ids.
out=$(run 2 --model "$dir/f32" --dump-logits "$dir/logits.npy")
same "2 ranks, --dump-logits" "$out"
grep '^generated:' <<<"$out" >"$dir/generated.txt"
"$py" - "$dir/logits.npy" "$dir/generated.txt" <<'EOF' || fail=1
import sys
import numpy as np
logits = np.load(sys.argv[1])
ids = np.array([[int(t) for t in l.split()[1:]] for l in open(sys.argv[2])])
assert logits.dtype == np.float32 and logits.shape == (4, 8, 256), (logits.dtype, logits.shape)
assert (logits.argmax(-1) == ids).all(), (logits.argmax(-1), ids)
print("ok: --dump-logits", logits.shape, "argmax = the generated ids")
EOF
# --kv-dtype float16: the same ids, logits within float16's rounding of the keys and values of the
# float32 cache's; the line says float16. On a GPU it is refused before anything starts.
out=$(run 2 --model "$dir/f32" --kv-dtype float16 --dump-logits "$dir/logits16.npy")
same "2 ranks, --kv-dtype float16" "$out"
grep -q '^kv cache per rank: [0-9.]* MiB (float16)$' <<<"$out" ||
  { echo "FAIL: --kv-dtype float16 not in the kv cache line"; fail=1; }
"$py" - "$dir/logits.npy" "$dir/logits16.npy" <<'EOF' || fail=1
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
err = float(np.abs(a - b).max())
assert 0 < err < 2e-2 * float(np.abs(a).max()), (err, float(np.abs(a).max()))
print(f"ok: --kv-dtype float16 logits within {err:.2g} of float32's (max |logit| {np.abs(a).max():.3g})")
EOF
if out=$(timeout 60 "$mpiexec" -n 1 "${flags[@]}" "$demo" --kv-dtype float16 --device cuda 2>&1); then
  echo "FAIL: --kv-dtype float16 --device cuda accepted"; fail=1
elif ! grep -q "kv-dtype float16 is for the CPU" <<<"$out"; then
  echo "FAIL: --kv-dtype float16 --device cuda: $out"; fail=1
fi

# HDF5: converted at 2 ranks, loaded at 1 and 4.
run 2 --model "$dir/f32" --convert "$dir/m.h5" | grep '^converted' || fail=1
same "1 rank, HDF5" "$(run 1 --model "$dir/m.h5")"
same "4 ranks, HDF5" "$(run 4 --model "$dir/m.h5")"

# Checkpoints that do not fit, and sizes the ranks cannot split.
expect_failure() {  # expect_failure NEEDLE NP demo-args...
  local needle=$1 np=$2 out rc=0
  shift 2
  out=$(timeout 120 "$mpiexec" -n "$np" "${flags[@]}" "$demo" --prompt 1,2 --max-new-tokens 2 \
    --warmup 0 "$@" 2>&1) || rc=$?
  if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    echo "FAIL: exit $rc for: $*"; echo "$out"; fail=1
  elif ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: no '$needle' for: $*"; echo "$out"; fail=1
  else
    echo "ok: $needle"
  fi
}
for b in missing shape dtype truncated header; do mk "$dir/bad-$b" --break "$b"; done
mk "$dir/bad-index" --shards 2 --break index
mk "$dir/kv4" --hidden 96 --heads 12 --kv-heads 4
expect_failure "tensor 'model.layers.1.self_attn.k_proj.weight' is missing (the config needs [32, 64]" \
  2 --model "$dir/bad-missing"
expect_failure "tensor 'model.layers.0.self_attn.v_proj.weight' has shape [16, 64], but the config needs [32, 64]" \
  2 --model "$dir/bad-shape"
expect_failure "tensor 'model.layers.0.mlp.up_proj.weight' in $dir/bad-dtype/model.safetensors has dtype I32" \
  2 --model "$dir/bad-dtype"
expect_failure "tensor 'lm_head.weight': data_offsets [361728,427264] reach past the end of the data (427164 bytes): the file is truncated" \
  2 --model "$dir/bad-truncated"
expect_failure "$dir/bad-header/model.safetensors (safetensors header): byte" 2 \
  --model "$dir/bad-header"
expect_failure "maps tensor 'model.norm.weight' to model-00001-of-00002.safetensors, which does not hold it" \
  2 --model "$dir/bad-index"
expect_failure "num_key_value_heads 4 cannot be split over 3 ranks" 3 --model "$dir/kv4"
expect_failure "num_attention_heads 8 cannot be split over 3 ranks" 3 --model "$dir/f32"
expect_failure "num_attention_heads 8 cannot be split over 3 ranks" 3 --model "$dir/m.h5"
expect_failure "--model $dir/nothing: No such file or directory" 1 --model "$dir/nothing"
expect_failure "--prompt 2: token 300 is outside the vocabulary [0, 256)" 1 --model "$dir/f32" \
  --prompt 300

# The Python controller drives the same worker functions.
if "$py" -c "import disco" 2>/dev/null; then
  for way in "" --calls; do
    got=$(timeout 120 "$mpiexec" -n 2 "${flags[@]}" "$py" "$here/../../examples/generate.py" \
      --model "$dir/f32" "${prompts[@]}" --max-new-tokens 8 $way 2>&1) || { echo "$got"; fail=1; }
    same "examples/generate.py at 2 ranks ${way:-by replay}" "$got"
  done
else
  echo "skipped: examples/generate.py (no disco package for $py)"
fi
exit $fail
