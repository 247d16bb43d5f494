#!/usr/bin/env python3
"""Writes a tiny Hugging Face Llama checkpoint (config.json + safetensors) with numpy alone.

The weights come from a seed and are rounded to values that float32, float16 and bfloat16 all hold
exactly, so the same seed in any --dtype (and any sharding) is the same model: runs on them must
generate the same tokens. --break makes a checkpoint that does not fit its config, for the error
tests.

  tiny_checkpoint.py OUT_DIR [--hidden 64 --layers 2 --heads 8 --kv-heads 4 --ffn 128
                              --vocab 256] [--dtype F32|F16|BF16] [--shards K] [--tie]
                             [--seed S] [--break missing|shape|dtype|truncated|header|index]
"""
import argparse
import json
import os
import struct

import numpy as np


def bf16_exact(a):
    """float32 values rounded to bfloat16 (nearest even), tiny ones flushed to 0 so that float16
    holds them exactly too."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = bits.astype(np.uint32).view(np.float32)
    out[np.abs(out) < 2.0 ** -14] = 0
    return out


def encode(a, dtype):
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    assert dtype == "BF16"
    return (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def weights(c, seed):
    rng = np.random.default_rng(seed)
    h, q = c["hidden_size"], c["num_attention_heads"] * c["head_dim"]
    kv, f, v = c["num_key_value_heads"] * c["head_dim"], c["intermediate_size"], c["vocab_size"]

    def lin(o, i):
        return bf16_exact(rng.uniform(-1, 1, (o, i)) / np.sqrt(i))

    def norm():
        return bf16_exact(1 + 0.1 * rng.uniform(-1, 1, (h,)))

    w = {"model.embed_tokens.weight": bf16_exact(rng.uniform(-1, 1, (v, h)))}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = norm()
        w[p + "self_attn.q_proj.weight"] = lin(q, h)
        w[p + "self_attn.k_proj.weight"] = lin(kv, h)
        w[p + "self_attn.v_proj.weight"] = lin(kv, h)
        w[p + "self_attn.o_proj.weight"] = lin(h, q)
        w[p + "post_attention_layernorm.weight"] = norm()
        w[p + "mlp.gate_proj.weight"] = lin(f, h)
        w[p + "mlp.up_proj.weight"] = lin(f, h)
        w[p + "mlp.down_proj.weight"] = lin(h, f)
    w["model.norm.weight"] = norm()
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(v, h)
    return w


def write_safetensors(path, tensors, dtype, dtype_names=None):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        data = encode(a, dtype)
        header[name] = {"dtype": (dtype_names or {}).get(name, dtype), "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for b in blobs:
            out.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tie", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--break", dest="breakage",
                    choices=["missing", "shape", "dtype", "truncated", "header", "index"])
    a = ap.parse_args()
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
         "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
         "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
         "head_dim": a.hidden // a.heads, "vocab_size": a.vocab, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": a.tie,
         "rope_scaling": None, "torch_dtype": "float32"}
    w = weights(c, a.seed)
    names = {}
    if a.breakage == "missing":
        del w["model.layers.1.self_attn.k_proj.weight"]
    elif a.breakage == "shape":
        k = "model.layers.0.self_attn.v_proj.weight"
        w[k] = w[k][: w[k].shape[0] // 2]
    elif a.breakage == "dtype":
        names["model.layers.0.mlp.up_proj.weight"] = "I16" if a.dtype != "F32" else "I32"
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    if a.shards == 1:
        path = os.path.join(a.out, "model.safetensors")
        write_safetensors(path, w, a.dtype, names)
        if a.breakage == "truncated":
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) - 100)
        elif a.breakage == "header":
            with open(path, "r+b") as f:
                f.seek(8)
                f.write(b"{\"model.embed")
                f.seek(8 + 13)
                f.write(b"\"\"")  # breaks the JSON right after the first key
        return
    items = list(w.items())
    per = -(-len(items) // a.shards)
    weight_map = {}
    for s in range(a.shards):
        fname = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = dict(items[s * per:(s + 1) * per])
        write_safetensors(os.path.join(a.out, fname), part, a.dtype, names)
        weight_map.update({k: fname for k in part})
    if a.breakage == "index":
        weight_map["model.norm.weight"] = f"model-00001-of-{a.shards:05d}.safetensors"
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(x.nbytes for x in w.values())},
                   "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
