"""The NumPy reference (reference.py) against an independent PyTorch transcription of
transformers' modeling_llama.py (LlamaForCausalLM, eager attention, use_cache=False: the whole
sequence is recomputed at every step, the prompts batched with left padding as generate() pads
them), and the checkpoint writer against the safetensors format. Runs without disco:

    /usr/bin/python3 -m pytest -q tests/llama/test_reference.py
"""

import json
import math
import os
import struct
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_checkpoint as mc  # noqa: E402
import reference as ref  # noqa: E402
import safetensors_io as st  # noqa: E402

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


# ---- PyTorch Llama, after transformers' modeling_llama.py (v4.40, eager attention) ------------
class LlamaRMSNorm(nn.Module):
    def __init__(self, weight, eps):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(
            position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen,
                                                           head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def linear(w):
    m = nn.Linear(w.shape[1], w.shape[0], bias=False)
    m.weight = nn.Parameter(w)
    return m


class LlamaAttention(nn.Module):
    def __init__(self, cfg, W, p):
        super().__init__()
        self.num_heads = cfg["num_attention_heads"]
        self.num_key_value_heads = cfg["num_key_value_heads"]
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.num_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.q_proj = linear(W[p + "q_proj.weight"])
        self.k_proj = linear(W[p + "k_proj.weight"])
        self.v_proj = linear(W[p + "v_proj.weight"])
        self.o_proj = linear(W[p + "o_proj.weight"])
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, cfg.get("rope_theta", 10000.0))

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads,
                                            self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads,
                                            self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads,
                                            self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(v, position_ids)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.num_key_value_groups)
        v = repeat_kv(v, self.num_key_value_groups)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v)
        attn_output = attn_output.transpose(1, 2).contiguous().reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self, W, p):
        super().__init__()
        self.gate_proj = linear(W[p + "gate_proj.weight"])
        self.up_proj = linear(W[p + "up_proj.weight"])
        self.down_proj = linear(W[p + "down_proj.weight"])

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg, W, i):
        super().__init__()
        p, eps = f"model.layers.{i}.", cfg["rms_norm_eps"]
        self.self_attn = LlamaAttention(cfg, W, p + "self_attn.")
        self.mlp = LlamaMLP(W, p + "mlp.")
        self.input_layernorm = LlamaRMSNorm(W[p + "input_layernorm.weight"], eps)
        self.post_attention_layernorm = LlamaRMSNorm(W[p + "post_attention_layernorm.weight"], eps)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask, position_ids)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg, W):
        super().__init__()
        self.embed_tokens = nn.Embedding.from_pretrained(W["model.embed_tokens.weight"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, W, i)
                                    for i in range(cfg["num_hidden_layers"]))
        self.norm = LlamaRMSNorm(W["model.norm.weight"], cfg["rms_norm_eps"])
        if cfg.get("tie_word_embeddings", False):
            self.lm_head = linear(W["model.embed_tokens.weight"])
        else:
            self.lm_head = linear(W["lm_head.weight"])

    def forward(self, input_ids, attention_mask_2d):
        dtype = self.embed_tokens.weight.dtype
        bsz, seq = input_ids.shape
        # generate(): position_ids from the attention mask (left padding).
        position_ids = attention_mask_2d.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask_2d == 0, 1)
        # _update_causal_mask: causal plus padding, the dtype's minimum where masked.
        min_dtype = torch.finfo(dtype).min
        causal = torch.triu(torch.full((seq, seq), min_dtype, dtype=dtype), diagonal=1)
        causal = causal[None, None].expand(bsz, 1, -1, -1).clone()
        pad = attention_mask_2d[:, None, None, :] == 0
        causal = causal.masked_fill(pad, min_dtype)
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, causal, position_ids)
        return self.lm_head(self.norm(h))


@torch.no_grad()
def torch_greedy(cfg, W, prompts, max_new_tokens):
    """Batched greedy generation, left padded, recomputing the whole sequence at each step."""
    model = LlamaForCausalLM(cfg, W)
    seqs = [list(p) for p in prompts]
    rows = [[] for _ in prompts]
    for _ in range(max_new_tokens):
        n = max(len(s) for s in seqs)
        ids = torch.tensor([[0] * (n - len(s)) + s for s in seqs])
        mask = torch.tensor([[0] * (n - len(s)) + [1] * len(s) for s in seqs])
        logits = model(ids, mask)[:, -1, :]
        for b, s in enumerate(seqs):
            rows[b].append(logits[b].float().numpy().copy())
            s.append(int(torch.argmax(logits[b])))
    toks = [s[len(p):] for s, p in zip(seqs, prompts)]
    return toks, np.stack([np.stack(r) for r in rows])


def close(a, b, tol):
    return np.max(np.abs(a - b)) <= tol * max(1.0, float(np.max(np.abs(b))))


PROMPTS = [[1, 5, 9, 3, 7, 100, 200, 17, 42], [4, 2], [250, 3, 3, 3, 3]]

CONFIGS = [
    dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256, dtype="float32", seed=1),
    dict(hidden=96, layers=3, heads=8, kv_heads=4, ffn=160, vocab=384, dtype="float16", seed=2,
         shards=3, tie_embeddings=True),
    dict(hidden=64, layers=2, heads=4, kv_heads=4, ffn=192, vocab=320, dtype="bfloat16", seed=3,
         shards=2, rope_theta=500000.0, rms_norm_eps=1e-6, head_dim_key=False),
    dict(hidden=128, layers=2, heads=8, kv_heads=1, ffn=256, vocab=512, dtype="float32", seed=4,
         tie_embeddings=True),
]


@pytest.mark.parametrize("spec", CONFIGS, ids=lambda c: f"h{c['hidden']}-{c['dtype']}")
def test_reference_matches_torch_hf_llama(tmp_path, spec):
    mc.make_checkpoint(str(tmp_path), **spec)
    cfg, W = ref.load_checkpoint(str(tmp_path))
    toks, logits = ref.generate(str(tmp_path), PROMPTS, 24)
    ttoks, tlogits = torch_greedy(cfg, {n: torch.from_numpy(w) for n, w in W.items()}, PROMPTS, 24)
    assert toks == ttoks
    assert logits.shape == (len(PROMPTS), 24, cfg["vocab_size"]) and logits.dtype == np.float32
    assert close(logits, tlogits, 1e-5), np.max(np.abs(logits - tlogits))
    assert len(set(toks[0])) > 4, f"degenerate greedy tokens {toks[0]}"


def test_bfloat16_mode_matches_torch_bf16_weights(tmp_path):
    mc.make_checkpoint(str(tmp_path), hidden=64, layers=2, heads=4, kv_heads=2, ffn=128,
                       vocab=256, seed=5, dtype="float32")
    cfg, W = ref.load_checkpoint(str(tmp_path))
    _, Wb = ref.load_checkpoint(str(tmp_path), "bfloat16")
    for n, w in W.items():  # our rounding is torch's
        assert np.array_equal(Wb[n], torch.from_numpy(w).to(torch.bfloat16).float().numpy()), n
    toks, logits = ref.generate(str(tmp_path), PROMPTS, 16, dtype="bfloat16")
    Wt = {n: torch.from_numpy(w).to(torch.bfloat16).float() for n, w in W.items()}
    ttoks, tlogits = torch_greedy(cfg, Wt, PROMPTS, 16)
    assert toks == ttoks and close(logits, tlogits, 1e-5)


def test_cli_prints_generated_lines_and_dumps_logits(tmp_path, capsys):
    mc.make_checkpoint(str(tmp_path / "m"), seed=6)
    out = tmp_path / "l.npy"
    assert ref.main(["--model", str(tmp_path / "m"), "--prompt", "1,5,9", "--prompt", "4,2",
                     "--max-new-tokens", "5", "--dump-logits", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    toks, logits = ref.generate(str(tmp_path / "m"), [[1, 5, 9], [4, 2]], 5)
    assert lines == ["generated: " + " ".join(map(str, t)) for t in toks]
    assert np.array_equal(np.load(out), logits)


# ---- The checkpoint files -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_safetensors_layout_and_values(tmp_path, dtype):
    cfg = mc.make_checkpoint(str(tmp_path), seed=7, dtype=dtype)
    raw = (tmp_path / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0 and raw[8 + n - 1:8 + n] in (b"}", b" ")
    header = json.loads(raw[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt"}
    code = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[dtype]
    item = {"F32": 4, "F16": 2, "BF16": 2}[code]
    end = 0
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        info = header[name]
        assert info["dtype"] == code
        assert info["data_offsets"][0] == end  # contiguous, from 0
        end = info["data_offsets"][1]
        assert end - info["data_offsets"][0] == item * int(np.prod(info["shape"]))
    assert 8 + n + end == len(raw)
    shapes = {k: tuple(v["shape"]) for k, v in header.items()}
    assert shapes == ref.expected_shapes(cfg)
    # Stored values are torch's conversion of the float32 weights.
    W = mc.random_weights(cfg, 7)
    _, got = ref.load_checkpoint(str(tmp_path))
    tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    for name, w in W.items():
        assert np.array_equal(got[name], torch.from_numpy(w).to(tdt).float().numpy()), name
    with open(tmp_path / "config.json") as f:
        c = json.load(f)
    assert c["architectures"] == ["LlamaForCausalLM"] and c["model_type"] == "llama"
    assert c["torch_dtype"] == dtype and c["tie_word_embeddings"] is False


def test_sharded_index_and_tied_embeddings(tmp_path):
    cfg = mc.make_checkpoint(str(tmp_path), layers=3, shards=3, tie_embeddings=True, seed=8)
    with open(tmp_path / "model.safetensors.index.json") as f:
        index = json.load(f)
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert not (tmp_path / "model.safetensors").exists()
    assert set(index["weight_map"]) == set(ref.expected_shapes(cfg))
    assert "lm_head.weight" not in index["weight_map"]
    total = 0
    for fname in files:
        header, _, _, _ = st.read_header(str(tmp_path / fname))
        assert {n for n, f in index["weight_map"].items() if f == fname} == set(header)
        total += sum(v["data_offsets"][1] - v["data_offsets"][0] for v in header.values())
    assert index["metadata"]["total_size"] == total
    # The same weights as one file.
    mc.make_checkpoint(str(tmp_path / "one"), layers=3, tie_embeddings=True, seed=8)
    _, a = ref.load_checkpoint(str(tmp_path))
    _, b = ref.load_checkpoint(str(tmp_path / "one"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("mode,needle", [
    ("wrong-shape", "'model.layers.0.self_attn.q_proj.weight' has shape (64, 72)"),
    ("missing", "'model.layers.1.mlp.down_proj.weight' is missing"),
    ("truncated", "model.safetensors"),
])
def test_broken_checkpoints(tmp_path, mode, needle):
    mc.make_checkpoint(str(tmp_path), seed=9, break_mode=mode)
    with pytest.raises(ref.CheckpointError, match=None) as e:
        ref.load_checkpoint(str(tmp_path))
    assert needle in str(e.value)
