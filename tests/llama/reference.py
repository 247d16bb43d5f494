#!/usr/bin/env python3
"""Single-process NumPy reference of Hugging Face LlamaForCausalLM greedy generation.

    reference.py --model DIR --prompt 1,5,9 [--prompt 4,2] [--max-new-tokens 16]
        [--dtype float32|bfloat16] [--dump-logits FILE.npy]

prints `generated: <ids>` per prompt, as disco-demo does. Written from the transformers Llama
definition (modeling_llama.py), independently of disco:
- RMSNorm: x * rsqrt(mean(x^2) + eps) * w, in float32;
- rotary embedding: inv_freq = 1 / theta^(arange(0, d, 2) / d), cos/sin of
  cat(pos*inv_freq, pos*inv_freq), q*cos + rotate_half(q)*sin with rotate_half = cat(-x2, x1);
- grouped-query attention: head h reads key/value head h // (heads / kv_heads) (repeat_kv),
  causal softmax of q.k / sqrt(head_dim), in float32;
- SwiGLU MLP down(silu(gate(x)) * up(x)), residuals around both, final norm, lm_head (or the
  embedding matrix when tie_word_embeddings).
Each prompt is generated on its own, positions from 0, with a KV cache: a prefill of the prompt,
then one token at a time. Greedy: argmax, ties to the smallest index (np.argmax). No stop at
eos_token_id: exactly max_new_tokens tokens per prompt. Weights stored as float16/bfloat16 are
upcast to float32; --dtype bfloat16 rounds every weight to bfloat16 first (disco's bfloat16
mode: weights in bfloat16, compute in float32).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402


class CheckpointError(ValueError):
    pass


def expected_shapes(cfg):
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = head_dim(cfg)
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                    p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                    p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                    p + "mlp.down_proj.weight": (h, f)})
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (v, h)
    return out


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def load_checkpoint(directory, dtype="float32"):
    """(config dict, {name: float32 array}); raises CheckpointError naming the tensor."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for fname in files:
        try:
            weights.update(st.read(os.path.join(directory, fname)))
        except (st.FormatError, ValueError, OSError) as e:
            raise CheckpointError(f"{fname}: {e}") from e
    for name, shape in expected_shapes(cfg).items():
        if name not in weights:
            raise CheckpointError(f"tensor '{name}' is missing from the checkpoint")
        if tuple(weights[name].shape) != shape:
            raise CheckpointError(f"tensor '{name}' has shape {tuple(weights[name].shape)}, "
                                  f"the config needs {shape}")
    if dtype == "bfloat16":
        weights = {n: st.round_to_bf16(w) for n, w in weights.items()}
    elif dtype != "float32":
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype}")
    return cfg, weights


def rms_norm(x, w, eps):
    x = x.astype(np.float32)
    var = np.mean(x * x, axis=-1, keepdims=True)
    return (x * (np.float32(1.0) / np.sqrt(var + np.float32(eps)))) * w


def silu(x):
    return x * (np.float32(0.5) * (np.float32(1.0) + np.tanh(x * np.float32(0.5))))


def rotate_half(x):
    d = x.shape[-1] // 2
    return np.concatenate([-x[..., d:], x[..., :d]], axis=-1)


class Llama:
    def __init__(self, cfg, weights):
        self.cfg, self.w = cfg, weights
        self.H, self.KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = head_dim(cfg)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        theta = float(cfg.get("rope_theta", 10000.0))
        self.inv_freq = (np.float32(1.0) / (np.float32(theta) ** (
            np.arange(0, self.hd, 2, dtype=np.int64).astype(np.float32) / np.float32(self.hd))))
        self.lm_head = weights.get("lm_head.weight")
        if self.lm_head is None or cfg.get("tie_word_embeddings", False):
            self.lm_head = weights["model.embed_tokens.weight"]

    def rope(self, positions):
        freqs = positions.astype(np.float32)[:, None] * self.inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)

    def forward(self, ids, cache):
        """Logits (T, vocab) of tokens ids following the cache; appends their keys/values."""
        cfg, w, H, KV, hd = self.cfg, self.w, self.H, self.KV, self.hd
        start = cache[0][0].shape[1] if cache else 0
        T = len(ids)
        positions = np.arange(start, start + T)
        cos, sin = self.rope(positions)
        x = w["model.embed_tokens.weight"][np.asarray(ids)]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], self.eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd).transpose(1, 0, 2)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hd).transpose(1, 0, 2)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hd).transpose(1, 0, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if len(cache) <= i:
                cache.append((k, v))
            else:
                k = np.concatenate([cache[i][0], k], axis=1)
                v = np.concatenate([cache[i][1], v], axis=1)
                cache[i] = (k, v)
            S = k.shape[1]
            rep = H // KV
            kr, vr = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)  # repeat_kv
            scores = (q @ kr.transpose(0, 2, 1)) / np.float32(np.sqrt(hd))   # (H, T, S)
            allowed = np.arange(S)[None, :] <= positions[:, None]              # causal
            scores = np.where(allowed[None], scores, -np.inf).astype(np.float32)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            attn = (probs @ vr).transpose(1, 0, 2).reshape(T, H * hd)
            x = x + attn @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], self.eps)
            g = h @ w[p + "mlp.gate_proj.weight"].T
            u = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
        x = rms_norm(x, w["model.norm.weight"], self.eps)
        return (x @ self.lm_head.T).astype(np.float32)

    def generate(self, prompt, max_new_tokens):
        """(new token ids, float32 (max_new_tokens, vocab) logits rows that chose them)."""
        cache, tokens, rows = [], [], []
        logits = self.forward(list(prompt), cache)[-1]
        for step in range(max_new_tokens):
            tok = int(np.argmax(logits))  # ties: the smallest index
            tokens.append(tok)
            rows.append(logits)
            if step + 1 < max_new_tokens:
                logits = self.forward([tok], cache)[-1]
        return tokens, np.stack(rows).astype(np.float32)


def generate(directory_or_model, prompts, max_new_tokens, dtype="float32"):
    """(list of token lists, float32 (B, max_new_tokens, vocab)) for each prompt on its own."""
    if isinstance(directory_or_model, Llama):
        model = directory_or_model
    else:
        model = Llama(*load_checkpoint(directory_or_model, dtype))
    toks, logits = [], []
    for prompt in prompts:
        t, l = model.generate(prompt, max_new_tokens)
        toks.append(t)
        logits.append(l)
    return toks, np.stack(logits)


def parse_prompt(text):
    return [int(t) for t in text.split(",") if t.strip() != ""]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", action="append", required=True, type=parse_prompt)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--dump-logits")
    a = p.parse_args(argv)
    toks, logits = generate(a.model, a.prompt, a.max_new_tokens, a.dtype)
    for t in toks:
        print("generated: " + " ".join(map(str, t)))
    if a.dump_logits:
        np.save(a.dump_logits, logits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
