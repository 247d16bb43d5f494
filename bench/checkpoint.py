"""The benchmark's checkpoints: a random Hugging Face Llama directory written once by
tests/llama/make_checkpoint.py into a cache, and read back as numpy arrays."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "llama"))
import make_checkpoint as mc  # noqa: E402
import safetensors_io as st  # noqa: E402

# The grid's models. 125m: the sizes bench/decode_vs_torch.py measured (~125M parameters with
# its 32000-token vocabulary); demo: disco-demo's default model (models/llama/driver.cc).
MODELS = {
    "125m": dict(hidden=768, layers=12, heads=12, kv_heads=4, ffn=2048, vocab=32000),
    "demo": dict(hidden=256, layers=4, heads=8, kv_heads=4, ffn=768, vocab=4096),
    # The smoke test's: small, and a vocabulary that holds llama.cpp's byte tokens (bench/gguf_export).
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=512),
}


def model_dir(cache, name, sizes, seed=0):
    """The checkpoint directory of these sizes, written once into `cache`."""
    key = (f"{name}-h{sizes['hidden']}-l{sizes['layers']}-a{sizes['heads']}-kv{sizes['kv_heads']}"
           f"-f{sizes['ffn']}-v{sizes['vocab']}-s{seed}")
    d = os.path.join(os.path.expanduser(cache), key)
    if not os.path.exists(os.path.join(d, "config.json")):
        tmp = d + f".tmp{os.getpid()}"
        print(f"writing the checkpoint {d} ...", flush=True)
        mc.make_checkpoint(tmp, seed=seed, dtype="float32", max_position_embeddings=4096, **sizes)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        os.rename(tmp, d)
    return d


def load(directory, bf16_round=False):
    """(config dict, {name: float32 numpy array}); bf16_round: each weight rounded to bfloat16
    (nearest even), as disco-demo --dtype bfloat16 rounds them."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    W = {}
    for fname in files:
        for name, arr in st.read(os.path.join(directory, fname)).items():
            W[name] = st.round_to_bf16(arr) if bf16_round else arr
    return cfg, W


def kv_bytes_per_position(cfg, elem_bytes):
    """Bytes of keys and values one position holds in the cache (every layer), which each later
    decode step of its sequence reads."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
    return cfg["num_hidden_layers"] * 2 * kv * hd * elem_bytes


def weight_bytes_per_token(cfg, dtype_bytes):
    """Bytes of weights a decode step reads (every matrix once: q/k/v/o, gate/up/down, the LM
    head; norms and the embedding row are negligible), for the bandwidth bound."""
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // heads
    per_layer = h * hd * (heads + 2 * kv) + heads * hd * h + 3 * h * f
    return (cfg["num_hidden_layers"] * per_layer + h * v) * dtype_bytes
