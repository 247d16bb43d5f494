#!/usr/bin/env python3
"""Llama greedy generation: disco-demo (tensor parallel, MPI ranks) against PyTorch on the same
checkpoint, prompts and token counts, measured in one run.

    /usr/bin/python3 bench/decode_vs_torch.py [--torch-only] [--demo build/src/tools/disco-demo]
        [--hidden 768 --layers 12 --heads 12 --kv-heads 4 --ffn 2048 --vocab 32000]
        [--batch 4] [--prompt-lens 16,32,48,64] [--new-tokens 64] [--repeats 5]
        [--threads 1,2] [--ranks 1,2] [--dtype float32|bfloat16] [--model DIR] [--json FILE]

The model (default ~125M parameters, float32) is a random Hugging Face checkpoint written once by
tests/llama/make_checkpoint.py into --cache (default ~/.cache/disco/llama-bench). Everything
runs one thing at a time (never two at once: the machine may have 2 cores); each repeat runs
every configuration in turn (torch at each thread count, then disco-demo at each rank count), and
the table gives medians over the repeats, after one warm-up of each torch configuration.

The PyTorch baseline is what a PyTorch user would write for batched greedy decoding on CPU:
torch.no_grad, the safetensors weights loaded into torch tensors, q/k/v and gate/up each fused into
one F.linear, a preallocated KV cache for the B sequences (each at its own position: a mask hides
the keys past it), grouped-query attention as one batched matmul per layer without copying the
keys per query head, rotary tables computed once, logits of the last position only. Prompts are
prefilled one by one (no padding; scaled_dot_product_attention when this torch has it, else
matmul + causal mask + softmax); then B sequences decode together. Threads: torch.set_num_threads(n)
and OpenBLAS's own thread count set to n (Debian's torch calls a pthread OpenBLAS, which
torch.set_num_threads leaves at all cores). disco-demo runs get OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = 1 (unless --demo-threads): N ranks, N cores.
bfloat16 mode: disco keeps weights in bfloat16 and computes in float32; torch computes in float32
on the same (bf16-rounded) weights.

Figures: prefill tokens/s = prompt tokens of all B prompts / time to their first new token;
decode tokens/s = B * (new_tokens - 1) / time of the rest (each decode step makes B tokens).
disco-demo's own figures are parsed from its `prefill: X tokens/s`, `decode: Y tokens/s` and
`runtime share of a decode step: Z%` lines (and its kv cache / weights / peak rss lines); its
tokens are compared with torch's. Targets: decode disco 2 ranks / torch 2 threads >= 1.0,
disco 1 rank / torch 1 thread >= 0.9, disco 2 ranks / disco 1 rank >= 1.7, runtime share <= 2%.
"""

import argparse
import ctypes
import ctypes.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "llama"))
import make_checkpoint as mc  # noqa: E402
import safetensors_io as st  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


# ---- Loading the checkpoint into torch tensors ---------------------------------------------------
def load_hf_checkpoint(directory, dtype="float32"):
    """(config, {name: float32 torch tensor}) from config.json and the safetensors file(s)."""
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
            if dtype == "bfloat16":
                arr = st.round_to_bf16(arr)
            W[name] = torch.from_numpy(arr)
    return cfg, W


# ---- The PyTorch baseline ------------------------------------------------------------------------
def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


class TorchLlama:
    def __init__(self, cfg, W, max_batch, max_len):
        self.cfg = cfg
        self.H, self.KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.group = self.H // self.KV
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.scale = 1.0 / math.sqrt(self.hd)
        self.embed = W["model.embed_tokens.weight"].contiguous()
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            self.layers.append(dict(
                ln1=W[p + "input_layernorm.weight"], ln2=W[p + "post_attention_layernorm.weight"],
                wqkv=torch.cat([W[p + "self_attn.q_proj.weight"], W[p + "self_attn.k_proj.weight"],
                                W[p + "self_attn.v_proj.weight"]]).contiguous(),
                wo=W[p + "self_attn.o_proj.weight"].contiguous(),
                wgu=torch.cat([W[p + "mlp.gate_proj.weight"],
                               W[p + "mlp.up_proj.weight"]]).contiguous(),
                wd=W[p + "mlp.down_proj.weight"].contiguous()))
        self.norm = W["model.norm.weight"]
        tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in W
        self.lm_head = self.embed if tied else W["lm_head.weight"].contiguous()
        theta = float(cfg.get("rope_theta", 10000.0))
        exponents = torch.arange(0, self.hd, 2, dtype=torch.int64).float() / self.hd
        inv_freq = 1.0 / (theta ** exponents)
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()
        self.max_len = max_len
        shape = (max_batch, self.KV, max_len, self.hd)
        self.k_cache = [torch.zeros(shape) for _ in self.layers]
        self.v_cache = [torch.zeros(shape) for _ in self.layers]
        self.split = [self.H * self.hd, self.KV * self.hd, self.KV * self.hd]

    def mlp(self, L, x):
        gate, up = F.linear(x, L["wgu"]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, L["wd"])

    def prefill(self, b, ids):
        """Logits (vocab,) of the last prompt token of sequence b; fills its cache rows."""
        T = len(ids)
        x = self.embed[torch.tensor(ids)]                        # (T, h)
        cos, sin = self.cos[:T], self.sin[:T]
        for l, L in enumerate(self.layers):
            q, k, v = F.linear(rms_norm(x, L["ln1"], self.eps), L["wqkv"]).split(self.split, -1)
            q = q.view(T, self.H, self.hd).transpose(0, 1)        # (H, T, hd)
            k = k.view(T, self.KV, self.hd).transpose(0, 1)
            v = v.view(T, self.KV, self.hd).transpose(0, 1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            self.k_cache[l][b, :, :T] = k
            self.v_cache[l][b, :, :T] = v
            if HAVE_SDPA:
                kk = k.repeat_interleave(self.group, dim=0)
                vv = v.repeat_interleave(self.group, dim=0)
                o = F.scaled_dot_product_attention(q[None], kk[None], vv[None], is_causal=True)[0]
            else:
                qg = q.reshape(self.KV, self.group * T, self.hd)
                s = torch.matmul(qg, k.transpose(1, 2)).view(self.KV, self.group, T, T)
                s = s * self.scale + self.causal(T)
                o = torch.matmul(torch.softmax(s, dim=-1).view(self.KV, self.group * T, T), v)
                o = o.view(self.H, T, self.hd)
            x = x + F.linear(o.transpose(0, 1).reshape(T, self.H * self.hd), L["wo"])
            x = x + self.mlp(L, rms_norm(x, L["ln2"], self.eps))
        return F.linear(rms_norm(x[-1], self.norm, self.eps), self.lm_head)

    def causal(self, T):
        return torch.full((T, T), float("-inf")).triu(1)

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
            q, k, v = F.linear(rms_norm(x, L["ln1"], self.eps), L["wqkv"]).split(self.split, -1)
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
            x = x + F.linear(o.reshape(B, self.H * self.hd), L["wo"])
            x = x + self.mlp(L, rms_norm(x, L["ln2"], self.eps))
        return F.linear(rms_norm(x, self.norm, self.eps), self.lm_head)

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


# ---- Threads -------------------------------------------------------------------------------------
def _openblas():
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_set_num_threads
            return lib
        except (OSError, AttributeError):
            pass
    return None


OPENBLAS = _openblas()


def set_threads(n):
    torch.set_num_threads(n)
    if OPENBLAS is not None:
        OPENBLAS.openblas_set_num_threads(n)


# ---- disco-demo ----------------------------------------------------------------------------------
NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"


def parse_demo(out):
    def one(pattern):
        m = re.search(pattern, out, re.M)
        return float(m.group(1)) if m else None
    rss = re.search(r"^peak rss per rank \(MiB\):(.*)$", out, re.M)
    return {
        "prefill": one(rf"^prefill: {NUM} tokens/s"),
        "decode": one(rf"^decode: {NUM} tokens/s"),
        "share": one(rf"^runtime share of a decode step: {NUM}%"),
        "kv_mib": one(rf"^kv cache per rank: {NUM} MiB"),
        "weights_mib": one(rf"^weights per rank: {NUM} MiB"),
        "rss_mib": [float(v) for v in rss.group(1).split()] if rss else None,
        "tokens": [[int(t) for t in m.split()] for m in re.findall(r"^generated:(.*)$", out, re.M)],
    }


def run_demo(a, ranks, model_dir, prompts):
    cmd = [a.mpiexec, "-n", str(ranks)] + a.mpiexec_flag + [a.demo, "--model", model_dir]
    for p in prompts:
        cmd += ["--prompt", ",".join(map(str, p))]
    cmd += ["--max-new-tokens", str(a.new_tokens), "--dtype", a.dtype] + a.demo_flag
    env = dict(os.environ)
    if not a.demo_threads:  # one compute thread per rank, as torch at n threads uses n cores
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = "1"
    if os.geteuid() == 0:  # Open MPI refuses root without consent
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", env=env, timeout=a.demo_timeout)
    if p.returncode != 0:
        raise SystemExit(f"disco-demo failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    r = parse_demo(p.stdout)
    missing = [k for k in ("prefill", "decode", "share") if r[k] is None]
    if missing:
        raise SystemExit(f"disco-demo printed no {missing} line(s): {' '.join(cmd)}\n{p.stdout}")
    return r


# ---- The run -------------------------------------------------------------------------------------
def model_dir_for(a):
    if a.model:
        return a.model
    key = (f"h{a.hidden}-l{a.layers}-a{a.heads}-kv{a.kv_heads}-f{a.ffn}-v{a.vocab}"
           f"-{a.storage}-s{a.seed}")
    d = os.path.join(os.path.expanduser(a.cache), key)
    if not os.path.exists(os.path.join(d, "config.json")):
        tmp = d + f".tmp{os.getpid()}"
        print(f"writing the checkpoint {d} ...", flush=True)
        mc.make_checkpoint(tmp, a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, a.seed,
                           a.storage, max_position_embeddings=4096)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        os.rename(tmp, d)
    return d


def make_prompts(a, vocab):
    rng = np.random.default_rng(a.seed + 1)
    lens = [int(x) for x in a.prompt_lens.split(",")] if a.prompt_lens else \
        [int(round(x)) for x in np.linspace(16, 64, a.batch)]
    if len(lens) != a.batch:
        raise SystemExit(f"--prompt-lens gives {len(lens)} lengths for --batch {a.batch}")
    return [[int(t) for t in rng.integers(3, vocab, n)] for n in lens]


def label(key):
    """'torch 2t' -> 'torch 2 threads', 'disco 1r' -> 'disco 1 rank'."""
    who, n = key.split()
    unit = {"t": "thread", "r": "rank"}[n[-1]]
    return f"{who} {n[:-1]} {unit}{'' if n[:-1] == '1' else 's'}"


def fmt(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def ratio(a_, b_):
    return None if a_ is None or b_ is None or b_ == 0 else a_ / b_


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torch-only", action="store_true", help="no disco-demo runs")
    p.add_argument("--demo",
                   default=os.path.join(HERE, "..", "build", "src", "tools", "disco-demo"))
    p.add_argument("--mpiexec", default="mpirun")
    p.add_argument("--mpiexec-flag", action="append", default=[], help="repeatable")
    p.add_argument("--demo-flag", action="append", default=[],
                   help="extra disco-demo flag, repeatable (e.g. --demo-flag=--calls)")
    p.add_argument("--demo-timeout", type=float, default=900)
    p.add_argument("--demo-threads", action="store_true",
                   help="leave OMP/OPENBLAS/MKL_NUM_THREADS of the disco-demo runs alone (by "
                        "default 1: a rank is one core, so that N ranks compare with N threads)")
    p.add_argument("--model", help="an existing HF Llama checkpoint directory (sizes ignored)")
    p.add_argument("--cache",
                   default=os.environ.get("DISCO_BENCH_CACHE", "~/.cache/disco/llama-bench"))
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--storage", choices=["float32", "float16", "bfloat16"], default="float32",
                   help="dtype of the written checkpoint")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="disco-demo --dtype (torch computes in float32 either way)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt-lens", help="comma-separated, one per prompt (default 16..64)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--json", help="write the figures here too")
    return p.parse_args(argv)


def measure(a, model, model_dir, prompts, threads, ranks):
    """Torch at each thread count, then disco-demo at each rank count, --repeats times over."""
    n_prompt = sum(map(len, prompts))
    n_decode = a.batch * (a.new_tokens - 1)
    results = {f"torch {n}t": {"prefill": [], "decode": [], "tokens": None} for n in threads}
    results.update({f"disco {r}r": {"prefill": [], "decode": [], "share": [], "runs": []}
                    for r in ranks})
    for n in threads:  # warm-up
        set_threads(n)
        toks, _, _, _ = model.generate(prompts, a.new_tokens)
        results[f"torch {n}t"]["tokens"] = toks
    for rep in range(a.repeats):
        for n in threads:
            set_threads(n)
            toks, _, tp, td = model.generate(prompts, a.new_tokens)
            r = results[f"torch {n}t"]
            r["prefill"].append(n_prompt / tp)
            r["decode"].append(n_decode / td)
            r["same_tokens"] = r.get("same_tokens", True) and toks == r["tokens"]
        for nr in ranks:
            d = run_demo(a, nr, model_dir, prompts)
            r = results[f"disco {nr}r"]
            r["prefill"].append(d["prefill"])
            r["decode"].append(d["decode"])
            r["share"].append(d["share"])
            r["runs"].append(d)
        print(f"  repeat {rep + 1}/{a.repeats}: " + ", ".join(
            f"{k} {v['decode'][-1]:.1f}" for k, v in results.items()) + " decode tokens/s",
            flush=True)
    return results


def print_table(a, results, med, torch_ref):
    """One line per configuration: the medians, and notes (spread, memory, same tokens)."""
    print(f"\n{'':22s} {'prefill tok/s':>14s} {'decode tok/s':>13s} {'ms/step':>8s} "
          f"{'runtime share':>14s}  notes")
    for k, v in results.items():
        m = med[k]
        step = None if "decode" not in m else 1000.0 * a.batch / m["decode"]
        note = ""
        if k.startswith("torch"):
            spread = f"decode min-max {min(v['decode']):.1f}-{max(v['decode']):.1f}"
            note = spread + ("" if v.get("same_tokens", True) else "; tokens vary between runs!")
        else:
            last = v["runs"][-1]
            same = torch_ref is not None and last["tokens"] == torch_ref
            rss = " ".join(f"{x:.0f}" for x in last["rss_mib"] or [])
            note = (f"weights {fmt(last['weights_mib'])} MiB/rank, kv "
                    f"{fmt(last['kv_mib'], '{:.2f}')} MiB/rank, peak rss {rss} MiB; tokens "
                    + ("= torch's" if same else "DIFFER from torch's"
                       if torch_ref is not None else "(no torch run)"))
        print(f"{label(k):22s} "
              f"{fmt(m.get('prefill')):>14s} {fmt(m.get('decode')):>13s} {fmt(step, '{:.2f}'):>8s} "
              f"{fmt(m.get('share'), '{:.2f}%'):>14s}  {note}")


def print_ratios(med, threads, ranks):
    """The ratios of the medians against their targets; returns them (for --json)."""
    def get(k, m):
        return med.get(k, {}).get(m)

    print(f"\n{'ratio (medians)':46s} {'decode':>7s} {'prefill':>8s}  target (decode)")
    rows = [("disco 2 ranks / torch 2 threads", "disco 2r", "torch 2t", 1.0),
            ("disco 1 rank / torch 1 thread", "disco 1r", "torch 1t", 0.9),
            ("disco 2 ranks / disco 1 rank", "disco 2r", "disco 1r", 1.7),
            ("torch 2 threads / torch 1 thread", "torch 2t", "torch 1t", None)]
    # Where more threads make torch slower (a busy machine), a torch user would take fewer: disco
    # at its most ranks against torch at its best thread count, as a stricter reference.
    torch_keys = [f"torch {n}t" for n in threads]
    if ranks and torch_keys:
        best = max(torch_keys, key=lambda k: get(k, "decode") or 0)
        med["torch best"] = dict(med[best], of=best)
        rows.append((f"disco {max(ranks)} ranks / torch best ({label(best)})",
                     f"disco {max(ranks)}r", "torch best", None))
    ratios = {}

    def verdict(value, ok):
        return "  (not measured)" if value is None else ("  met" if ok else "  MISSED")
    for name, x, y, target in rows:
        rd = ratio(get(x, "decode"), get(y, "decode"))
        rp = ratio(get(x, "prefill"), get(y, "prefill"))
        ratios[name] = {"decode": rd, "prefill": rp, "target": target}
        print(f"{name:46s} {fmt(rd, '{:.2f}'):>7s} {fmt(rp, '{:.2f}'):>8s}  "
              + (f">= {target}" + verdict(rd, rd is not None and rd >= target) if target
                 else "(for reference)"))
    share = get("disco 2r", "share")
    print(f"{'runtime share of a decode step, 2 ranks':46s} {fmt(share, '{:.2f}%'):>7s} "
          f"{'':8s}  <= 2%" + verdict(share, share is not None and share <= 2.0))
    return ratios


def main(argv=None):
    a = parse_args(argv)
    if a.new_tokens < 2:
        raise SystemExit("--new-tokens must be at least 2 (one prefill token, then decode)")
    threads = [int(x) for x in a.threads.split(",") if x]
    ranks = [] if a.torch_only else [int(x) for x in a.ranks.split(",") if x]
    if ranks and not os.path.exists(a.demo):
        raise SystemExit(f"no disco-demo at {a.demo} (--demo PATH, or --torch-only)")

    model_dir = model_dir_for(a)
    cfg, W = load_hf_checkpoint(model_dir, a.dtype)
    params = sum(w.numel() for w in W.values())
    prompts = make_prompts(a, cfg["vocab_size"])
    n_prompt = sum(map(len, prompts))
    model = TorchLlama(cfg, W, a.batch, max(map(len, prompts)) + a.new_tokens)
    load0 = os.getloadavg()

    print(f"model: {model_dir}\n  {params / 1e6:.1f}M parameters, hidden {cfg['hidden_size']}, "
          f"{cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads "
          f"({cfg['num_key_value_heads']} kv), ffn {cfg['intermediate_size']}, vocab "
          f"{cfg['vocab_size']}; storage {a.storage}, disco --dtype {a.dtype}\n"
          f"  batch {a.batch}: prompts of {','.join(str(len(q)) for q in prompts)} tokens "
          f"({n_prompt}), {a.new_tokens} new tokens each; {a.repeats} repeats (medians)\n"
          f"  torch {torch.__version__}, attention: "
          + ("scaled_dot_product_attention" if HAVE_SDPA
             else "matmul+softmax (no SDPA in this torch)") +
          f", OpenBLAS threads {'set' if OPENBLAS else 'not found'}; load average at start "
          f"{load0[0]:.2f}", flush=True)

    results = measure(a, model, model_dir, prompts, threads, ranks)
    load1 = os.getloadavg()

    med = {}
    for k, v in results.items():
        med[k] = {m: statistics.median(v[m]) for m in ("prefill", "decode", "share") if v.get(m)}
    torch_ref = results[f"torch {threads[0]}t"]["tokens"] if threads else None
    print_table(a, results, med, torch_ref)
    ratios = print_ratios(med, threads, ranks)
    busy = max(load0[0], load1[0]) > 0.5 * (os.cpu_count() or 1)
    print(f"\nload average at start {load0[0]:.2f}, at the end {load1[0]:.2f} "
          f"({os.cpu_count()} CPUs)" + (": WARNING, the machine was busy with other work; "
                                        "these figures are not reliable" if busy else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": model_dir, "params": params, "prompts": [len(q) for q in prompts],
                       "new_tokens": a.new_tokens, "repeats": a.repeats, "dtype": a.dtype,
                       "raw": {k: {m: v[m] for m in ("prefill", "decode", "share") if m in v}
                               for k, v in results.items()},
                       "medians": med, "ratios": ratios, "loadavg": [load0[0], load1[0]]},
                      f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
