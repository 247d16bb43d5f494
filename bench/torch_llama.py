"""A tuned PyTorch Llama decoder for CPU: the baseline a careful PyTorch user would write.

- Weights pre-transposed once to (in, out), contiguous; a product is torch.mv (one row) or
  torch.matmul (several) on them: BLAS reads them as they lie, with no F.linear call that may
  pack (copy) the weight on every call. q/k/v and gate/up are each one fused matrix.
- A preallocated KV cache for the B sequences (each at its own position: a mask hides the keys
  past it), grouped-query attention as one batched matmul per layer without copying the keys per
  query head, rotary tables computed once, logits of the last position only.
- Prompts are prefilled one by one (no padding; scaled_dot_product_attention); then B sequences
  decode together.
- compute="bfloat16": weights kept in bfloat16 and the products in bfloat16 (oneDNN's, with
  AVX512-BF16 where the CPU has it), everything else in float32; compute="float32": float32.

Threads are the caller's: one process per thread count, with OMP_NUM_THREADS, MKL_NUM_THREADS
and torch.set_num_threads(n), OMP_WAIT_POLICY=PASSIVE, and OPENBLAS_NUM_THREADS=1 so that
numpy's OpenBLAS (a second pool) never spins beside torch's (bench/baseline_worker.py).
"""

import math
import time

import torch
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


class TorchLlama:
    def __init__(self, cfg, W, max_batch, max_len, compute="float32"):
        """cfg: config.json's dict; W: {name: float32 numpy array or torch tensor}."""
        W = {k: torch.as_tensor(v) for k, v in W.items()}
        self.cdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[compute]
        self.H, self.KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.group = self.H // self.KV
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.scale = 1.0 / math.sqrt(self.hd)
        self.embed = W["model.embed_tokens.weight"].float().contiguous()
        self.layers = [self._layer(W, f"model.layers.{i}.")
                       for i in range(cfg["num_hidden_layers"])]
        self.norm = W["model.norm.weight"].float()
        tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in W
        self.lm_head = self._t(W["model.embed_tokens.weight" if tied else "lm_head.weight"])
        self._rope(float(cfg.get("rope_theta", 10000.0)), max_len)
        shape = (max_batch, self.KV, max_len, self.hd)
        self.k_cache = [torch.zeros(shape) for _ in self.layers]
        self.v_cache = [torch.zeros(shape) for _ in self.layers]
        self.split = [self.H * self.hd, self.KV * self.hd, self.KV * self.hd]
        self.rows_by_mv = {}  # rows -> one torch.mv per row (else torch.matmul), by tune()

    def _t(self, *ws):
        """The (out, in) matrices ws stacked by rows, then transposed to (in, out), contiguous."""
        return torch.cat([w.float() for w in ws]).t().contiguous().to(self.cdt)

    def _layer(self, W, p):
        a, m = p + "self_attn.", p + "mlp."
        return dict(
            ln1=W[p + "input_layernorm.weight"].float(),
            ln2=W[p + "post_attention_layernorm.weight"].float(),
            wqkv=self._t(W[a + "q_proj.weight"], W[a + "k_proj.weight"], W[a + "v_proj.weight"]),
            wo=self._t(W[a + "o_proj.weight"]),
            wgu=self._t(W[m + "gate_proj.weight"], W[m + "up_proj.weight"]),
            wd=self._t(W[m + "down_proj.weight"]))

    def _rope(self, theta, max_len):
        exponents = torch.arange(0, self.hd, 2, dtype=torch.int64).float() / self.hd
        inv_freq = 1.0 / (theta ** exponents)
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()
        self.max_len = max_len

    def lin(self, x, wt):
        """x (..., in) times wt (in, out), float32 out: torch.mv for one row (BLAS gemv on the
        weight as it lies); for a few rows (decode, B > 1) torch.matmul or one torch.mv per row,
        whichever tune() found faster for that row count; torch.matmul for many (prefill)."""
        x = x.to(self.cdt)
        if x.dim() == 1:
            return torch.mv(wt.t(), x).float()
        if x.shape[0] <= 8 and self.rows_by_mv.get(x.shape[0], x.shape[0] == 1):
            return torch.stack([torch.mv(wt.t(), r) for r in x]).float()
        return torch.matmul(x, wt).float()

    @torch.no_grad()
    def tune(self, batch, reps=5):
        """Picks, for `batch` rows, torch.matmul or one torch.mv per row on the largest matrix
        of a layer (BLAS's gemm may pack a weight that gemv streams); call after the thread
        count is set. Returns the choice ('mv' or 'matmul')."""
        wt = self.layers[0]["wgu"]
        x = torch.randn(batch, wt.shape[0]).to(self.cdt)
        best = {}
        for by_mv in (True, False):
            self.rows_by_mv[batch] = by_mv
            self.lin(x, wt)
            t = time.perf_counter()
            for _ in range(reps):
                self.lin(x, wt)
            best[by_mv] = time.perf_counter() - t
        self.rows_by_mv[batch] = best[True] <= best[False]
        return "mv" if self.rows_by_mv[batch] else "matmul"

    def mlp(self, L, x):
        gate, up = self.lin(x, L["wgu"]).chunk(2, dim=-1)
        return self.lin(F.silu(gate) * up, L["wd"])

    def prefill(self, b, ids):
        """Logits (vocab,) of the last prompt token of sequence b; fills its cache rows."""
        T = len(ids)
        x = self.embed[torch.tensor(ids)]                        # (T, h)
        cos, sin = self.cos[:T], self.sin[:T]
        for l, L in enumerate(self.layers):
            q, k, v = self.lin(rms_norm(x, L["ln1"], self.eps), L["wqkv"]).split(self.split, -1)
            q = q.view(T, self.H, self.hd).transpose(0, 1)        # (H, T, hd)
            k = k.view(T, self.KV, self.hd).transpose(0, 1)
            v = v.view(T, self.KV, self.hd).transpose(0, 1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            self.k_cache[l][b, :, :T] = k
            self.v_cache[l][b, :, :T] = v
            o = self._prefill_attention(q, k, v, T)
            x = x + self.lin(o.transpose(0, 1).reshape(T, self.H * self.hd), L["wo"])
            x = x + self.mlp(L, rms_norm(x, L["ln2"], self.eps))
        return self.lin(rms_norm(x[-1], self.norm, self.eps), self.lm_head)

    def _prefill_attention(self, q, k, v, T):
        if HAVE_SDPA:
            kk = k.repeat_interleave(self.group, dim=0)
            vv = v.repeat_interleave(self.group, dim=0)
            return F.scaled_dot_product_attention(q[None], kk[None], vv[None], is_causal=True)[0]
        qg = q.reshape(self.KV, self.group * T, self.hd)
        s = torch.matmul(qg, k.transpose(1, 2)).view(self.KV, self.group, T, T)
        s = s * self.scale + torch.full((T, T), float("-inf")).triu(1)
        o = torch.matmul(torch.softmax(s, dim=-1).view(self.KV, self.group * T, T), v)
        return o.view(self.H, T, self.hd)

    def decode(self, tokens, pos):
        """Logits (B, vocab) of tokens (B,) at positions pos (B,) after the cached ones."""
        B = tokens.shape[0]
        S = int(pos.max()) + 1
        rows = torch.arange(B)
        mask = torch.zeros(B, S).masked_fill_(torch.arange(S)[None, :] > pos[:, None],
                                              float("-inf")).view(B, 1, 1, S)
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        x = self.embed[tokens]                                    # (B, h)
        for l, L in enumerate(self.layers):
            q, k, v = self.lin(rms_norm(x, L["ln1"], self.eps), L["wqkv"]).split(self.split, -1)
            q = q.view(B, self.H, self.hd)
            k = k.view(B, self.KV, self.hd)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            kc, vc = self.k_cache[l], self.v_cache[l]
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v.view(B, self.KV, self.hd)
            keys, vals = kc[:B, :, :S], vc[:B, :, :S]              # (B, KV, S, hd)
            s = torch.matmul(q.view(B, self.KV, self.group, self.hd), keys.transpose(2, 3))
            s = s * self.scale + mask                              # (B, KV, group, S)
            o = torch.matmul(torch.softmax(s, dim=-1), vals)       # (B, KV, group, hd)
            x = x + self.lin(o.reshape(B, self.H * self.hd), L["wo"])
            x = x + self.mlp(L, rms_norm(x, L["ln2"], self.eps))
        return self.lin(rms_norm(x, self.norm, self.eps), self.lm_head)

    @torch.no_grad()
    def generate(self, prompts, new_tokens, keep_logits=False):
        """(tokens, logits (B, new_tokens, V) numpy or None, prefill seconds, decode seconds)."""
        assert max(map(len, prompts)) + new_tokens <= self.max_len
        rows = []
        t0 = time.perf_counter()
        first = torch.stack([self.prefill(b, p) for b, p in enumerate(prompts)])
        tok = torch.argmax(first, dim=-1)
        out = [tok]
        if keep_logits:
            rows.append(first.clone())
        t1 = time.perf_counter()
        pos = torch.tensor([len(p) for p in prompts])
        for _ in range(new_tokens - 1):
            logits = self.decode(tok, pos)
            tok = torch.argmax(logits, dim=-1)
            out.append(tok)
            if keep_logits:
                rows.append(logits.clone())
            pos = pos + 1
        t2 = time.perf_counter()
        toks = torch.stack(out, dim=1).tolist()
        logits = torch.stack(rows, dim=1).numpy() if keep_logits else None
        return toks, logits, t1 - t0, t2 - t1
