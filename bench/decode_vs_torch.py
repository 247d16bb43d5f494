#!/usr/bin/env python3
"""Superseded by bench/decode_bench.py (every baseline, the machine measured, docs/performance.md):
the older disco-demo against PyTorch run, kept for its command line and for
tests/llama/test_bench.py. Its PyTorch side is now decode_bench's tuned one (bench/torch_llama.py:
pre-transposed weights, torch.mv / matmul, no F.linear), in this process, with
torch.set_num_threads(n) and OpenBLAS's own pool (Debian's torch calls a pthread OpenBLAS) set
to n; a ratio against torch at n threads is refused where torch at n threads is slower than at
1 (as decode_bench refuses it).

    /usr/bin/python3 bench/decode_vs_torch.py [--torch-only] [--demo build/src/tools/disco-demo]
        [--hidden 768 --layers 12 --heads 12 --kv-heads 4 --ffn 2048 --vocab 32000]
        [--batch 4] [--prompt-lens 16,32,48,64] [--new-tokens 64] [--repeats 5]
        [--threads 1,2] [--ranks 1,2] [--dtype float32|bfloat16] [--model DIR] [--json FILE]

The model is a random checkpoint written once into --cache (default ~/.cache/disco/llama-bench);
each repeat runs torch at each thread count, then disco-demo at each rank count (one compute
thread per rank unless --demo-threads); the table gives medians. bfloat16: disco keeps bfloat16
weights, torch computes in float32 on the same (rounded) weights. Prefill tokens/s = the B
prompts' tokens / the time to their first new token; decode tokens/s = B * (new_tokens - 1) /
the time of the rest.
"""

import argparse
import ctypes
import ctypes.util
import json
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoint  # noqa: E402
import disco_demo  # noqa: E402
from checkpoint import mc  # noqa: E402
from disco_demo import parse_demo  # noqa: E402,F401  (tests/llama/test_bench.py uses it)

import torch  # noqa: E402
from torch_llama import HAVE_SDPA, TorchLlama  # noqa: E402,F401


def load_hf_checkpoint(directory, dtype="float32"):
    """(config, {name: float32 torch tensor}); bfloat16: each weight rounded to bfloat16."""
    cfg, W = checkpoint.load(directory, bf16_round=dtype == "bfloat16")
    return cfg, {k: torch.from_numpy(v) for k, v in W.items()}


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
def run_demo(a, ranks, model_dir, prompts):
    return disco_demo.run_demo(a.demo, a.mpiexec, ranks, model_dir, prompts, a.new_tokens,
                               a.dtype, a.mpiexec_flag, a.demo_flag, a.demo_timeout,
                               one_thread=not a.demo_threads)


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
    def slower(k, m):  # torch at n threads slower than at 1: no ratio against it (decode_bench)
        k = med.get(k, {}).get("of", k)
        return k.startswith("torch") and k != "torch 1t" and "torch 1t" in med and \
            (get(k, m) or 0) < (get("torch 1t", m) or 0)
    for name, x, y, target in rows:
        rd = None if slower(y, "decode") else ratio(get(x, "decode"), get(y, "decode"))
        rp = None if slower(y, "prefill") else ratio(get(x, "prefill"), get(y, "prefill"))
        ratios[name] = {"decode": rd, "prefill": rp, "target": target}
        refused = "  (refused: torch slower there than at 1 thread)" if slower(y, "decode") else ""
        print(f"{name:46s} {fmt(rd, '{:.2f}'):>7s} {fmt(rp, '{:.2f}'):>8s}  "
              + (refused or (f">= {target}" + verdict(rd, rd is not None and rd >= target)
                             if target else "(for reference)")))
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
