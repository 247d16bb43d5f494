#!/usr/bin/env python3
"""Write a small random Hugging Face Llama checkpoint directory (numpy only).

    make_checkpoint.py DIR [--hidden 64] [--layers 2] [--heads 4] [--kv-heads 2] [--ffn 128]
        [--vocab 256] [--seed 0] [--dtype float32|float16|bfloat16] [--shards K]
        [--tie-embeddings] [--rope-theta 10000] [--rms-norm-eps 1e-5]
        [--max-position-embeddings 256] [--no-head-dim-key]
        [--break wrong-shape|missing|truncated]

DIR gets config.json (the standard LlamaForCausalLM keys) and model.safetensors, or with
--shards K > 1 model-0000i-of-0000K.safetensors and model.safetensors.index.json (weight_map).
Tensor names and shapes are Hugging Face's (nn.Linear weights are (out, in)); with
--tie-embeddings lm_head.weight is left out, as transformers leaves it out when saving.

Weights are random, scaled so that activations stay O(1) and greedy tokens vary: projections
N(0, 1/fan_in), embeddings N(0, 1), lm_head N(0, 4/hidden) so that logits have a standard
deviation of about 2, norm weights 1 + N(0, 0.1^2). Tied embeddings would otherwise make the
model repeat its last token (its own row dominates the logits): tied, the embedding rows are
scaled to norm 2 (the lm_head scale) and o_proj/down_proj get 4x their scale.

--break writes a checkpoint that does not fit its config, for error tests:
  wrong-shape  model.layers.0.self_attn.q_proj.weight is (heads*head_dim, hidden + 8)
  missing      model.layers.<last>.mlp.down_proj.weight is absent (from the index too)
  truncated    the (last) safetensors file is cut to half its size
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402

BREAKS = ("wrong-shape", "missing", "truncated")


def tensor_shapes(cfg):
    """[(name, shape)] of a LlamaForCausalLM checkpoint, in model order."""
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (q, h)),
                (p + "self_attn.k_proj.weight", (kv, h)),
                (p + "self_attn.v_proj.weight", (kv, h)),
                (p + "self_attn.o_proj.weight", (h, q)),
                (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (f, h)),
                (p + "mlp.up_proj.weight", (f, h)),
                (p + "mlp.down_proj.weight", (h, f))]
    out.append(("model.norm.weight", (h,)))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (v, h)))
    return out


def make_config(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256, dtype="float32",
                tie_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-5,
                max_position_embeddings=256, head_dim_key=True):
    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise ValueError("need hidden % heads == 0, heads % kv_heads == 0 and an even head_dim")
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": rms_norm_eps,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "hidden_act": "silu",
        "tie_word_embeddings": bool(tie_embeddings),
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "use_cache": True,
        "torch_dtype": dtype,
        "transformers_version": "4.40.0",
    }
    if head_dim_key:
        cfg["head_dim"] = hidden // heads
    return cfg


def random_weights(cfg, seed=0):
    """{name: float32 array} in model order."""
    rng = np.random.default_rng(seed)
    h = cfg["hidden_size"]
    lm_std = 2.0 / np.sqrt(h)
    tied = cfg["tie_word_embeddings"]
    out = {}
    for name, shape in tensor_shapes(cfg):
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            w = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif name == "model.embed_tokens.weight":
            w = rng.standard_normal(shape, dtype=np.float32)
            if tied:
                w *= np.float32(2.0) / np.linalg.norm(w, axis=1, keepdims=True)
        elif name == "lm_head.weight":
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(lm_std)
        else:
            gain = 4.0 if tied and name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(gain / np.sqrt(shape[1]))
        out[name] = w
    return out


def write_checkpoint(directory, cfg, weights, dtype="float32", shards=1, break_mode=None):
    """Write config.json and the safetensors file(s) of weights stored as dtype."""
    if break_mode is not None and break_mode not in BREAKS:
        raise ValueError(f"--break must be one of {BREAKS}")
    os.makedirs(directory, exist_ok=True)
    for old in os.listdir(directory):  # a directory reused for another checkpoint
        if old.endswith(".safetensors") or old in ("model.safetensors.index.json", "config.json"):
            os.remove(os.path.join(directory, old))
    names = list(weights)
    encoded = {n: st.encode(weights[n], dtype) for n in names}
    if break_mode == "wrong-shape":
        n = "model.layers.0.self_attn.q_proj.weight"
        rows, cols = encoded[n][1].shape
        bad = np.random.default_rng(1).standard_normal((rows, cols + 8), dtype=np.float32) * 0.1
        encoded[n] = st.encode(bad, dtype)
    if break_mode == "missing":
        n = f"model.layers.{cfg['num_hidden_layers'] - 1}.mlp.down_proj.weight"
        names.remove(n)
        del encoded[n]
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    shards = max(1, min(shards, len(names)))
    if shards == 1:
        files = {"model.safetensors": names}
    else:
        # Split in model order by bytes, as transformers' save_pretrained(max_shard_size) does:
        # a layer's tensors may land in two files.
        sizes = [encoded[n][1].nbytes for n in names]
        total, files, acc = sum(sizes), {}, 0
        groups = [[] for _ in range(shards)]
        for n, s in zip(names, sizes):
            k = min(shards - 1, int(acc * shards // total))
            groups[k].append(n)
            acc += s
        groups = [g for g in groups if g]
        shards = len(groups)
        for i, g in enumerate(groups):
            files[f"model-{i + 1:05d}-of-{shards:05d}.safetensors"] = g
        index = {"metadata": {"total_size": int(sum(sizes))},
                 "weight_map": {n: fname for fname, g in files.items() for n in g}}
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    for fname, g in files.items():
        # Names sorted in the file, as the safetensors library orders them.
        st.write(os.path.join(directory, fname), {n: encoded[n] for n in sorted(g)},
                 metadata={"format": "pt"})
    if break_mode == "truncated":
        last = os.path.join(directory, list(files)[-1])
        size = os.path.getsize(last)
        with open(last, "r+b") as f:
            f.truncate(size // 2)
    return list(files)


def make_checkpoint(directory, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256,
                    seed=0, dtype="float32", shards=1, tie_embeddings=False, rope_theta=10000.0,
                    rms_norm_eps=1e-5, max_position_embeddings=256, head_dim_key=True,
                    break_mode=None):
    cfg = make_config(hidden, layers, heads, kv_heads, ffn, vocab, dtype, tie_embeddings,
                      rope_theta, rms_norm_eps, max_position_embeddings, head_dim_key)
    write_checkpoint(directory, cfg, random_weights(cfg, seed), dtype, shards, break_mode)
    return cfg


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=128)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=list(st.STORAGE), default="float32")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--tie-embeddings", action="store_true")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-norm-eps", type=float, default=1e-5)
    p.add_argument("--max-position-embeddings", type=int, default=256)
    p.add_argument("--no-head-dim-key", action="store_true",
                   help="leave head_dim out of config.json (older configs): hidden/heads")
    p.add_argument("--break", dest="break_mode", choices=BREAKS)
    a = p.parse_args(argv)
    cfg = make_checkpoint(a.dir, a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, a.seed,
                          a.dtype, a.shards, a.tie_embeddings, a.rope_theta, a.rms_norm_eps,
                          a.max_position_embeddings, not a.no_head_dim_key, a.break_mode)
    params = sum(int(np.prod(s)) for _, s in tensor_shapes(cfg))
    print(f"wrote {a.dir}: {params / 1e6:.2f}M parameters, {a.dtype}, {a.shards} file(s)"
          + (f", broken: {a.break_mode}" if a.break_mode else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
