#!/usr/bin/env bash
# Checkpoints made to break the loader (outside testing, round 3) are refused at once with one
# line naming the field, tensor or file, and nothing is allocated from their sizes first:
#   - architectures this loader does not implement (a model_type other than llama's, mistral's,
#     qwen2's and qwen3's, or architectures other than its own), Qwen2 without its biases, and
#     tensors the model would not read (T8: Qwen2's q/k/v biases, Qwen3's q/k norms under llama);
#     rope types other than default, linear and llama3, Qwen's sliding-window layers;
#     the rotary inverse frequencies older Llama checkpoints carry are not refused;
#   - config.json sizes past their bounds (head_dim 2^61+2 wrapped a product to 16 and wrote past
#     a buffer: T2; num_hidden_layers 2^40 built specs until memory ran out: T3), and products of
#     sizes that are each in bounds;
#   - a FIFO as config.json, model.safetensors or a shard (the loader waited forever: T5);
#   - tensor shapes whose element count wraps (T11);
#   - llama.new_state arguments whose buffers would not fit (with the Python package): sizes
#     that wrap, and a kv cache the node's memory cannot hold (which the OOM killer ended);
#     kv_dtype float16 halving the cache, a bad kv_dtype or argument count refused naming it;
#   - keys or values past float16's range refused by a float16 kv cache (float32 decodes them).
#   run_hostile_checkpoint_test.sh PYTHON MPIEXEC DEMO [mpiexec flags...]
set -uo pipefail
py=$1 mpiexec=$2 demo=$3
shift 3
flags=("$@")
here=$(cd "$(dirname "$0")" && pwd)
base=${DISCO_TEST_SHARED_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$base"
dir=$(mktemp -d -p "$base")
trap 'rm -rf "$dir"' EXIT
fail=0

"$py" "$here/tiny_checkpoint.py" "$dir/good" || exit 1
ref=$(timeout 300 "$mpiexec" -n 2 "${flags[@]}" "$demo" --model "$dir/good" --prompt 1,2 \
  --max-new-tokens 2 --warmup 0 2>&1 | grep '^generated:') || { echo "FAIL: the good checkpoint"; exit 1; }

# variant NAME PYTHON-CODE: a copy of the good checkpoint, changed by the code (cfg: config.json as
# a dict, written back; tensors: extra tensors (name -> (dtype, shape, bytes)) added to the file).
variant() {
  local name=$1 code=$2
  cp -r "$dir/good" "$dir/$name"
  "$py" - "$dir/$name" "$here" <<PYEOF || { echo "FAIL: making $name"; fail=1; }
import json, os, struct, sys
sys.path.insert(0, sys.argv[2])
d = sys.argv[1]
cfg = json.load(open(os.path.join(d, "config.json")))
tensors = {}
$code
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
if tensors:
    path = os.path.join(d, "model.safetensors")
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    for k, (dt, shape, b) in tensors.items():
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PYEOF
}

# expect NEEDLE MODEL: disco-demo at 2 ranks on MODEL fails (not by the guard's timeout) with a line
# holding NEEDLE.
expect() {
  local needle=$1 model=$2 out rc=0
  out=$(timeout 120 "$mpiexec" -n 2 "${flags[@]}" "$demo" --model "$model" --prompt 1,2 \
    --max-new-tokens 2 --warmup 0 2>&1) || rc=$?
  if ((rc == 0 || rc == 124)); then
    echo "FAIL: exit $rc for $model"; echo "$out" | tail -5; fail=1
  elif ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: no '$needle' for $model:"; echo "$out" | tail -5; fail=1
  else
    echo "ok: $(basename "$model"): $needle"
  fi
}

f32() { echo "('F32', [$1], struct.pack('<$1f', *([0.5] * $1)))"; }
variant gemma "cfg['model_type'] = 'gemma'; cfg['architectures'] = ['GemmaForCausalLM']"
expect "model_type \"gemma\" is not supported; this loader reads \"llama\", \"mistral\"" "$dir/gemma"
# A Qwen2 checkpoint that lacks its q/k/v biases: the first one missing is named.
variant qwen2 "cfg['model_type'] = 'qwen2'; cfg['architectures'] = ['Qwen2ForCausalLM']
tensors['model.layers.0.self_attn.q_proj.bias'] = $(f32 64)"
expect "tensor 'model.layers.0.self_attn.k_proj.bias' is missing" "$dir/qwen2"
# Qwen2's tensors under a llama model_type: the bias the model would drop is named.
variant bias "tensors['model.layers.0.self_attn.q_proj.bias'] = $(f32 64)"
expect "tensor 'model.layers.0.self_attn.q_proj.bias' in $dir/bias/model.safetensors is not one this model reads" "$dir/bias"
# A tensor name with a newline and a terminal escape (T-round 6): refused, shown without them, not
# printed as a forged line.
variant forged "tensors['x\\n[rank 1/2 vm] FORGED\\x1b]0;t\\x07'] = $(f32 8)"
expect "model.safetensors: a tensor name holds the control character 0x0a (at byte 1): 'x?[rank 1/2 vm] FORGED?]0;t?'" "$dir/forged"
# Unicode's C1 controls and direction overrides count as control characters; a long name is cut.
variant c1 "tensors['x\\u009b31m'] = $(f32 8)"
expect "a tensor name holds the control character 0xc29b (at byte 1)" "$dir/c1"
variant bidi "tensors['x\\u202ey'] = $(f32 8)"
expect "a tensor name holds the control character 0xe280ae (at byte 1)" "$dir/bidi"
variant longname "tensors['A' * 100000] = $(f32 8)"
expect "tensor 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA... (100000 bytes)' in" "$dir/longname"
# A directory whose config.json's path passes the system's limit: said so, not "has no config.json".
long=$("$py" -c '
import os, sys
d = sys.argv[1]
while len(d) < 4090:  # config.json past PATH_MAX (4096 with its NUL)
    d = os.path.join(d, "d" * min(200, 4089 - len(d)))
os.makedirs(d)
print(d)' "$dir/long")
expect "config.json: File name too long" "$long"
variant qknorm "cfg['attention_bias'] = False
tensors['model.layers.1.self_attn.q_norm.weight'] = $(f32 8)"
expect "tensor 'model.layers.1.self_attn.q_norm.weight' in" "$dir/qknorm"
variant mistral "cfg['architectures'] = ['MistralForCausalLM']"
expect "architectures [\"MistralForCausalLM\"] is not supported" "$dir/mistral"
# What a family has that the model does not implement: refused, naming it.
variant yarn "cfg['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0}"
expect "rope_scaling: rope type \"yarn\" is not supported (only \"default\", \"linear\" and \"llama3\")" "$dir/yarn"
variant yarn5 "cfg['rope_parameters'] = {'rope_type': 'dynamic', 'factor': 4.0, 'rope_theta': 1e4}"
expect "rope_parameters: rope type \"dynamic\" is not supported" "$dir/yarn5"
variant llama3 "cfg['rope_scaling'] = {'rope_type': 'llama3', 'factor': 8.0}"
expect "rope type \"llama3\" needs \"low_freq_factor\"" "$dir/llama3"
# An outside round: settings read past (top-level partial_rotary_factor, a factor without its
# type, a per-layer-type map, two objects that disagree) and values whose frequencies overflow.
variant toppartial "cfg['partial_rotary_factor'] = 0.5"
expect "partial_rotary_factor 0.5 is not supported (only 1)" "$dir/toppartial"
variant ropenotype "cfg['rope_scaling'] = {'factor': 4.0}"
expect "rope_scaling has \"factor\" but no \"rope_type\" (nor \"type\")" "$dir/ropenotype"
variant perlayer "cfg['rope_parameters'] = {'full_attention': {'rope_type': 'linear', 'factor': 2.0}}"
expect "rope_parameters has \"full_attention\" but no \"rope_type\"" "$dir/perlayer"
variant both "cfg['rope_parameters'] = {'rope_type': 'default', 'rope_theta': 1e4}; cfg['rope_scaling'] = {'rope_type': 'linear', 'factor': 2.0}"
expect "rope_parameters and rope_scaling say different things" "$dir/both"
variant tinyfactor "cfg['rope_scaling'] = {'rope_type': 'linear', 'factor': 1e-308}"
expect "rope_scaling: \"factor\" 1e-308 is outside [0.001, 1e+06]" "$dir/tinyfactor"
variant tinytheta "cfg['rope_theta'] = 1e-300"
expect "\"rope_theta\" 1e-300 is outside [1, 1e+12]" "$dir/tinytheta"
variant qwenwindow "cfg['model_type'] = 'qwen2'; cfg['architectures'] = ['Qwen2ForCausalLM']
cfg['use_sliding_window'] = True; cfg['sliding_window'] = 4"
expect "\"use_sliding_window\": true is not supported (qwen2's sliding-window layers)" "$dir/qwenwindow"
variant layertypes "cfg['model_type'] = 'qwen3'; cfg['architectures'] = ['Qwen3ForCausalLM']
cfg['layer_types'] = ['full_attention', 'sliding_attention']"
expect "is not supported: every layer must be \"full_attention\"" "$dir/layertypes"
variant notype "del cfg['model_type']"
expect "\"model_type\" is missing; this loader reads \"llama\", \"mistral\"" "$dir/notype"
# What older Llama checkpoints carry and the model computes itself is read past.
variant invfreq "tensors['model.layers.0.self_attn.rotary_emb.inv_freq'] = $(f32 4)"
got=$(timeout 120 "$mpiexec" -n 2 "${flags[@]}" "$demo" --model "$dir/invfreq" --prompt 1,2 \
  --max-new-tokens 2 --warmup 0 2>&1 | grep '^generated:')
[[ $got == "$ref" ]] && echo "ok: rotary_emb.inv_freq read past" ||
  { echo "FAIL: a checkpoint with rotary_emb.inv_freq: '$got', not '$ref'"; fail=1; }

# Sizes (T2, T3) and their products.
variant headdim "cfg['head_dim'] = 2**61 + 2"
expect "\"head_dim\" is 2305843009213693954, more than this loader accepts (4096)" "$dir/headdim"
variant layers "cfg['num_hidden_layers'] = 2**40"
expect "\"num_hidden_layers\" is 1099511627776, more than this loader accepts (4096)" "$dir/layers"
variant vocab "cfg['vocab_size'] = 2**24; cfg['hidden_size'] = 2**17; cfg['head_dim'] = 8"
expect "vocab_size x hidden_size (embeddings) is more than 1099511627776 elements" "$dir/vocab"
variant heads "cfg['num_attention_heads'] = 4096; cfg['num_key_value_heads'] = 4096
cfg['head_dim'] = 4096; cfg['hidden_size'] = 2**17"
expect "num_attention_heads x head_dim x hidden_size (q_proj) is more than" "$dir/heads"

# Shapes that wrap (T11): refused by the header's check, before the model looks at them.
variant wrap "tensors['extra'] = ('F32', [2**39, 2**39], b'')"
expect "tensor 'extra': shape [549755813888,549755813888] has more than 1125899906842624 elements" "$dir/wrap"
variant wrap2 "tensors['extra'] = ('F32', [2**39, 2**25], b'')"
expect "tensor 'extra': shape [549755813888,33554432] has more than" "$dir/wrap2"

# Two tensors whose data overlap (one would read the other's bytes): refused.
variant overlap "tensors['model.layers.0.self_attn.q_proj.bias'] = $(f32 64)"
"$py" - "$dir/overlap/model.safetensors" <<'PYEOF' || fail=1
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
del h["model.layers.0.self_attn.q_proj.bias"]
h["lm_head.weight"]["data_offsets"] = h["model.embed_tokens.weight"]["data_offsets"]
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(t)) + t + raw[8 + n:])
PYEOF
expect "overlap: the file is damaged or forged" "$dir/overlap"

# FIFOs (T5): refused at once, named.
for f in config.json model.safetensors; do
  cp -r "$dir/good" "$dir/fifo-$f"
  rm "$dir/fifo-$f/$f" && mkfifo "$dir/fifo-$f/$f"
  expect "$dir/fifo-$f/$f is not a regular file (a FIFO)" "$dir/fifo-$f"
done
"$py" "$here/tiny_checkpoint.py" "$dir/fifo-shard" --shards 2 >/dev/null || fail=1
rm "$dir/fifo-shard/model-00002-of-00002.safetensors"
mkfifo "$dir/fifo-shard/model-00002-of-00002.safetensors"
expect "model-00002-of-00002.safetensors is not a regular file (a FIFO)" "$dir/fifo-shard"
# Symbolic links that lead nowhere (a Hugging Face cache whose blob was never written; a loop):
# named as such, not "has no config.json".
for f in config.json model.safetensors; do
  cp -r "$dir/good" "$dir/link-$f"
  rm "$dir/link-$f/$f" && ln -s "$dir/no-such-blob" "$dir/link-$f/$f"
  expect "$dir/link-$f/$f is a symbolic link that leads nowhere: No such file" "$dir/link-$f"
done
rm "$dir/link-config.json/config.json" && ln -s config.json "$dir/link-config.json/config.json"
expect "config.json is a symbolic link that leads nowhere: Too many levels" "$dir/link-config.json"

# Values past float16's range (65504) in layer 0's values of kv head 2 (rank 1's: rank 0's all
# fit): a float16 kv cache refuses them naming the layer, position and head, without leaving rank
# 0 in the attention's allreduce; a float32 one decodes.
variant huge-values "
import numpy as np
path = os.path.join(d, 'model.safetensors')
raw = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
e = json.loads(raw[8:8 + n])['model.layers.0.self_attn.v_proj.weight']
assert e['dtype'] == 'F32' and cfg['num_key_value_heads'] == 4
row = 4 * e['shape'][1] * cfg.get('head_dim', cfg['hidden_size'] // cfg['num_attention_heads'])
a = 8 + n + e['data_offsets'][0] + 2 * row  # kv head 2's values: rank 1's first of 2
b = a + row
raw[a:b] = (np.frombuffer(bytes(raw[a:b]), np.float32) * 1e7).astype(np.float32).tobytes()
open(path, 'wb').write(raw)"
out=$(timeout 120 "$mpiexec" -n 2 "${flags[@]}" "$demo" --model "$dir/huge-values" --prompt 1,2 \
  --max-new-tokens 2 --warmup 0 --kv-dtype float16 2>&1) && rc=0 || rc=$?
if ((rc == 0 || rc == 124)) ||
  ! grep -q "llama.attention: layer 0, sequence 0, position 0: a key or value of kv head 2 is past float16's range" <<<"$out"; then
  echo "FAIL: values past float16's range in a float16 kv cache (exit $rc)"; echo "$out" | tail -5; fail=1
elif ! timeout 120 "$mpiexec" -n 2 "${flags[@]}" "$demo" --model "$dir/huge-values" --prompt 1,2 \
  --max-new-tokens 2 --warmup 0 >/dev/null 2>&1; then
  echo "FAIL: the huge-values checkpoint with a float32 kv cache"; fail=1
else
  echo "ok: huge-values: refused by a float16 kv cache, decoded with a float32 one"
fi

# A NaN weight that int8 cannot quantize, in rank 1's rows of q_proj: named by its row in the full
# tensor (40), with the shard's own (8).
variant nan-weight "
import numpy as np
path = os.path.join(d, 'model.safetensors')
raw = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
e = json.loads(raw[8:8 + n])['model.layers.0.self_attn.q_proj.weight']
assert e['dtype'] == 'F32' and e['shape'] == [64, 64]
at = 8 + n + e['data_offsets'][0] + 4 * (40 * 64 + 3)
raw[at:at + 4] = struct.pack('<f', float('nan'))
open(path, 'wb').write(raw)"
out=$(timeout 120 "$mpiexec" -n 2 "${flags[@]}" "$demo" --model "$dir/nan-weight" --prompt 1,2 \
  --max-new-tokens 2 --warmup 0 --dtype int8 2>&1) && rc=0 || rc=$?
if ((rc == 0 || rc == 124)) || ! grep -qF "weight 'model.layers.0.self_attn.q_proj.weight' (this worker's shard: its row 0 is row 32, its column 0 column 0): row 8, column 3 is nan" <<<"$out"; then
  echo "FAIL: a NaN weight under int8 (exit $rc)"; echo "$out" | tail -5; fail=1
else
  echo "ok: nan-weight: int8 names the weight's row in the full tensor"
fi

# Weights the node's memory cannot hold (a sparse file of 120 GB in bfloat16 whose float32 shards
# would take 113 GiB per worker): refused by llama.open naming the sizes and the limit, at once,
# not ended by the OOM killer in the middle of the load.
mkdir "$dir/huge"
"$py" - "$dir/good" "$dir/huge" <<'PYEOF' || { echo "FAIL: making huge"; fail=1; }
import json, os, struct, sys
cfg = json.load(open(os.path.join(sys.argv[1], "config.json")))
cfg.update(hidden_size=16384, intermediate_size=65536, num_hidden_layers=16,
           num_attention_heads=128, num_key_value_heads=8, head_dim=128, vocab_size=32000,
           tie_word_embeddings=False)
h, f, v, kv = 16384, 65536, 32000, 8 * 128
shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h], "lm_head.weight": [v, h]}
for i in range(16):
    p = f"model.layers.{i}."
    shapes.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                   p + "self_attn.q_proj.weight": [h, h], p + "self_attn.k_proj.weight": [kv, h],
                   p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, h],
                   p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
                   p + "mlp.down_proj.weight": [h, f]})
header, at = {}, 0
for name, shape in shapes.items():
    n = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
    header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + n]}
    at += n
raw = json.dumps(header).encode()
raw += b" " * (-len(raw) % 8)
json.dump(cfg, open(os.path.join(sys.argv[2], "config.json"), "w"))
with open(os.path.join(sys.argv[2], "model.safetensors"), "wb") as out:
    out.write(struct.pack("<Q", len(raw)) + raw)
    out.truncate(8 + len(raw) + at)  # sparse: no disk taken
PYEOF
expect "llama.open('$dir/huge', 'float32') (the weights of 1 of 2 workers) needs 11" "$dir/huge"
expect "more than the " "$dir/huge"
expect "or give a smaller dtype (bfloat16 holds half of float32, int8 a quarter)" "$dir/huge"
rm -f "$dir/huge/model.safetensors"

# llama.new_state's arguments: every buffer's size is checked before anything is allocated.
if "$py" -c "import disco" 2>/dev/null; then
  cat >"$dir/new_state.py" <<'PYEOF'
import sys
import disco
sys.path.insert(0, sys.argv[2])
from generate import find_library


def controller(sess):
    fn = sess.get_global_func
    fn("disco.load_library")(find_library(None))
    sess.init_ccl("mpi")
    model = fn("llama.open")(sys.argv[1], "float32")
    sess.sync_all()
    # Past the element cap (three), then under it but 4 TiB of kv cache per worker.
    for args in [(2**40, 2**40, 2**40, 1), (1, 2**62, 1, 1), (2**20, 2**20, 2**20, 2**20),
                 (1, 2**34, 1, 1)]:
        try:
            fn("llama.new_state")(model, *args, False)
            sess.sync_all()
            print("accepted", args, flush=True)
        except disco.RemoteError as e:
            print("refused:", str(e).splitlines()[0], flush=True)
    # kv_dtype, the optional 7th argument: half the bytes in float16; a bad one or a bad count
    # refused naming it.
    for args in [(1, 2**34, 1, 1, False, "float16"), (1, 64, 1, 1, False, "bfloat16"),
                 (1, 64, 1, 1, False, 16), (1, 64, 1, 1, False, "float16", 1), (1, 64, 1, 1)]:
        try:
            fn("llama.new_state")(model, *args)
            sess.sync_all()
            print("accepted", args, flush=True)
        except (disco.RemoteError, TypeError, ValueError) as e:
            print("refused:", str(e).splitlines()[0], flush=True)
    fn("llama.new_state")(model, 2, 64, 8, 4, False, "float16")
    sess.sync_all()
    print("accepted a float16 kv cache", flush=True)
    return 0


sys.exit(disco.main(controller))
PYEOF
  out=$(timeout 120 "$mpiexec" -n 2 "${flags[@]}" "$py" "$dir/new_state.py" "$dir/good" \
    "$here/../../examples" 2>&1)
  echo "$out" | grep -E "refused|accepted"
  if [[ $(grep -c "is more than 1099511627776 elements" <<<"$out") -ne 3 ]]; then
    echo "FAIL: llama.new_state with sizes that do not fit"; echo "$out" | tail -8; fail=1
  fi
  if ! grep -q "GiB per worker, [0-9.]* GiB for the 2 workers bound by host .*, more than the .* it can give" <<<"$out"; then
    echo "FAIL: llama.new_state past the node's memory"; echo "$out" | tail -8; fail=1
  fi
  for want in "max_new_tokens 1, kv float16) needs [0-9.]* GiB per worker" \
    "kv_dtype is 'float32' or 'float16', not 'bfloat16'" \
    "argument 6 (kv_dtype): expected string, got int" \
    "expected 6 or 7 arguments (model, batch, max_len, max_rows, max_new_tokens, keep_logits\[, kv_dtype\]), got 8" \
    "got 5" "accepted a float16 kv cache"; do
    grep -q "$want" <<<"$out" || { echo "FAIL: llama.new_state: no '$want'"; echo "$out" | tail -8; fail=1; }
  done
  # Checkpoints the workers do not agree on (relative paths, the ranks in other directories): one
  # that a worker cannot open (that worker's error first, the other's pointing at it), one that is
  # another model on one worker, or the same model with other weights (refused on both, not
  # decoded from mixed shards), and a path with a NUL byte (named, not cut short). No wait in
  # llama.open's collectives.
  cat >"$dir/open_one.py" <<'PYEOF'
import sys
import disco
sys.path.insert(0, sys.argv[1])
from generate import find_library


def controller(sess):
    fn = sess.get_global_func
    fn("disco.load_library")(find_library(None))
    sess.init_ccl("mpi")
    for path in ["good", "same", "seeded", "good\0x"]:
        fn("llama.open")(path, "float32")
        try:
            sess.sync_all()
            print("accepted", flush=True)
        except disco.RemoteError as e:
            print("refused:", str(e), flush=True)
    return 0


sys.exit(disco.main(controller))
PYEOF
  "$py" "$here/tiny_checkpoint.py" "$dir/other" --layers 3 || exit 1
  mkdir -p "$dir/elsewhere"
  ln -s "$dir/good" "$dir/same"
  ln -s "$dir/other" "$dir/elsewhere/same"
  "$py" "$here/tiny_checkpoint.py" "$dir/reseeded" --seed 2 || exit 1
  ln -s "$dir/good" "$dir/seeded"
  ln -s "$dir/reseeded" "$dir/elsewhere/seeded"
  out=$(timeout 120 "$mpiexec" "${flags[@]}" -n 1 -wdir "$dir" "$py" "$dir/open_one.py" \
    "$here/../../examples" : -n 1 -wdir "$dir/elsewhere" "$py" "$dir/open_one.py" \
    "$here/../../examples" 2>&1)
  for want in "^refused: worker 1 failed in 'llama.open' .*good is not a directory" \
    "worker 0 in 'llama.open' .*: worker 1 failed (its error says why)" \
    "^refused: worker 0 failed in 'llama.open' .*llama.open('same', 'float32'): the workers did not open the same checkpoint: worker 1 found a config.json or weights" \
    "^refused: worker 0 failed in 'llama.open' .*llama.open('seeded', 'float32'): the workers did not open the same checkpoint: worker 1 found" \
    "^refused: worker 0 .*llama.open('good?x', 'float32'): the path holds a NUL byte (at byte 4)"; do
    grep -q "$want" <<<"$out" || { echo "FAIL: llama.open on other checkpoints: no '$want'"; echo "$out" | tail -12; fail=1; }
  done
  ((fail == 0)) && echo "ok: llama.open on checkpoints the workers do not agree on"
else
  echo "skipped: llama.new_state from Python (no disco package for $py)"
fi
((fail == 0)) && echo "PASS: hostile checkpoints refused"
exit $fail
