#!/usr/bin/env python3
"""Writes the seed corpus of json_fuzz.cc (standard library only): each seed is the selector byte
the fuzz target reads first, then a config.json, an index or a safetensors header.

  make_json_seeds.py DIR
"""
import json
import os
import sys

# TinyLlama-1.1B's config.json as Hugging Face distributes it, and the tiny checkpoint's of
# tests/llama/tiny_checkpoint.py.
HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5632, "max_position_embeddings": 2048, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.35.0",
    "use_cache": True, "vocab_size": 32000}
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 8, "vocab_size": 256,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512,
        "tie_word_embeddings": False, "rope_scaling": None, "torch_dtype": "float32"}


def tiny_shapes(c):
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    s = {"model.embed_tokens.weight": [v, h]}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        s.update({p + "input_layernorm.weight": [h], p + "self_attn.q_proj.weight": [q, h],
                  p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.v_proj.weight": [kv, h],
                  p + "self_attn.o_proj.weight": [h, q], p + "post_attention_layernorm.weight": [h],
                  p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
                  p + "mlp.down_proj.weight": [h, f]})
    s["model.norm.weight"] = [h]
    s["lm_head.weight"] = [v, h]
    return s


def header(shapes, dtype="F32", size=4, metadata=None):
    """A safetensors header as the writers lay it out: __metadata__, the tensors back to back,
    the JSON padded with spaces to 8 bytes."""
    h, offset = {"__metadata__": metadata or {"format": "pt"}}, 0
    for name, shape in shapes.items():
        n = size
        for d in shape:
            n *= d
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(h, separators=(",", ":"))
    return text + " " * (-len(text) % 8)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    shapes = tiny_shapes(TINY)
    small = {"model.norm.weight": [64], "w": [2, 3], "scalar": [], "empty": [0, 4]}
    seeds = {
        "seed-0-config-hf": json.dumps(HF_CONFIG, indent=2),
        "seed-0-config-tiny": json.dumps(TINY, indent=2),
        "seed-0-index": json.dumps({"metadata": {"total_size": 1234},
                                    "weight_map": {k: "model-00001-of-00002.safetensors"
                                                   for k in list(shapes)[:6]}}, indent=2),
        "seed-1-header-tiny": header(shapes),
        "seed-1-header-bf16": header(shapes, "BF16", 2, {"format": "pt", "note": "\u00e9\\n"}),
        "seed-2-header-small": header(small),
        "seed-2-header-f16": header(small, "F16", 2),
    }
    for name, text in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([int(name.split("-")[1])]) + text.encode())


if __name__ == "__main__":
    main()
