#!/usr/bin/env python3
"""disco-demo against transformers itself, on a checkpoint of every family the loader reads.

    check_families.py --mpiexec MPIEXEC --demo DISCO_DEMO [--generate examples/generate.py]
        [--np 1,2,4] [--case NAME ...] [--mpiexec-flag FLAG ...] [--demo-flag FLAG ...]
        [--keep DIR] [--no-hdf5]

Runs in a Python with torch, transformers, safetensors and numpy (launch/test's venv:
run_families_test.sh finds it). For each case below it makes a small random model WITH
transformers (AutoConfig.for_model with tiny sizes, AutoModelForCausalLM.from_config, weights
redrawn well-conditioned, save_pretrained), computes the reference with transformers (greedy, 32
new tokens for each of 3 prompts of different lengths, one prompt at a time, the whole sequence
again at every step: eager attention, no KV cache), and runs disco-demo --model DIR on the same
prompts at each NP, with --dump-logits; then converts it to HDF5 at 2 ranks (disco-demo --convert:
config.json as disco writes it) and runs that file at the largest NP. With --generate, it runs
examples/generate.py (the Python controller, in this Python) the same ways. Storage in float32,
bfloat16 and float16 (every family), sharded or not. Pass, per case and run:
- the 3 `generated:` lines equal the reference's tokens (32 each);
- logits (3, 32, vocab) within TOL * max(1, max|ref|): TOL 1e-4 for float32 runs (whatever the
  storage: 16-bit values read in float32 are exact), 5e-2 for --dtype bfloat16 runs;
- and, so that equal tokens mean something, the reference's best two logits at every step are
  at least MARGIN * max(1, max|ref|) apart (5 times float32's tolerance): a case's first seed
  whose model has this margin is used (the seeds are fixed, so the choice is too).
The sliding-window case also checks that the window changes transformers' own logits (the test
would otherwise not see a model that ignores it).

Exit 0: every case passed; 1: a failure; 77 (CTest's skip): a module is missing.
"""

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

NEW_TOKENS = 32
PROMPT_LENGTHS = (3, 7, 12)
MARGIN = 5e-4  # 5 times float32's tolerance
TIMEOUT = 300
# By the run's --dtype: float32 1e-4 (float16 or bfloat16 storage read in float32 is the same
# values as transformers' float32 model of them: float32's tolerance holds), bfloat16 5e-2.
TOL = {"float32": 1e-4, "bfloat16": 5e-2}

# Shared by every case: 2 layers, hidden 64, 8 heads / 4 kv heads (head_dim 8), ffn 128,
# vocab 256 (heads, kv heads, ffn and vocab split over 1, 2 and 4 ranks).
BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=4, vocab_size=256, max_position_embeddings=256,
            rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)

# name -> model_type, config fields, storage dtype, disco --dtype, max_shard_size, legacy rope
# (config.json rewritten in transformers 4's form: rope_theta and rope_scaling with "type").
CASES = {
    # Llama 3's rope scaling (original context 16: every branch of the wavelengths' rule at these
    # lengths), q/k/v/o and MLP biases.
    "llama3-bias-f32": ("llama", dict(
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        attention_bias=True, mlp_bias=True), "float32", "float32", None, False),
    # Linear rope scaling as transformers 4 wrote it, tied embeddings, bfloat16 in 3 shards.
    "llama-linear-tied-bf16": ("llama", dict(
        rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_theta=5e5,
        tie_word_embeddings=True), "bfloat16", "bfloat16", "60KB", True),
    # A window of 6 positions: every prompt and generation runs past it; float32 in 3 shards.
    "mistral-window-f32": ("mistral", dict(sliding_window=6), "float32", "float32", "150KB",
                           False),
    # q/k/v biases (always on), tied embeddings; use_sliding_window false (its default).
    "qwen2-f32": ("qwen2", dict(tie_word_embeddings=True), "float32", "float32", None, False),
    # q/k norms, head_dim 16 (not hidden / heads).
    "qwen3-f32": ("qwen3", dict(head_dim=16), "float32", "float32", None, False),
    # and with attention_bias, bfloat16 in 2 shards.
    "qwen3-bias-bf16": ("qwen3", dict(head_dim=16, attention_bias=True), "bfloat16", "bfloat16",
                        "90KB", False),
    # float16 storage (torch_dtype float16), every family, read in float32; llama sharded.
    "llama3-bias-f16": ("llama", dict(
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        attention_bias=True, mlp_bias=True), "float16", "float32", "90KB", False),
    "mistral-window-f16": ("mistral", dict(sliding_window=6), "float16", "float32", None, False),
    "qwen2-f16": ("qwen2", dict(tie_word_embeddings=True), "float16", "float32", None, False),
    "qwen3-bias-f16": ("qwen3", dict(head_dim=16, attention_bias=True), "float16", "float32",
                       None, False),
}


def log(*a):
    print(*a, flush=True)


def well_conditioned(model, torch, seed):
    """Redraws every weight: transformers' init (std 0.02) gives near-uniform logits and argmax
    ties. Matrices N(0, 1/in); the embeddings and the LM head N(0, 9/hidden): logits of a few
    units, tied or not (embeddings of norm ~1 per element make a tied model's logits those of
    the last token's own row, whatever the layers do); norms 1 + N(0, 0.1^2), biases
    N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * r)
            elif name.endswith(".bias"):
                p.copy_(0.1 * r)
            elif "embed_tokens" in name or name == "lm_head.weight":
                p.copy_(r * 3 / p.shape[1] ** 0.5)
            else:
                p.copy_(r / p.shape[1] ** 0.5)


def legacy_rope(path):
    """config.json as transformers 4 wrote it (and most published checkpoints have it):
    rope_theta beside rope_scaling, whose type is "type"."""
    cfg = json.load(open(path))
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    rope["type"] = rope.pop("rope_type")
    cfg["rope_scaling"] = rope
    json.dump(cfg, open(path, "w"), indent=2)


def reference(model, torch, np, prompts):
    """Greedy tokens and the logits that chose them, (B, T) and (B, T, vocab): each prompt alone,
    the whole sequence through the model at every step."""
    tokens, logits = [], []
    with torch.no_grad():
        for p in prompts:
            ids = list(p)
            rows = []
            for _ in range(NEW_TOKENS):
                out = model(torch.tensor([ids]), use_cache=False).logits[0, -1].float()
                rows.append(out.numpy())
                ids.append(int(out.argmax()))
            tokens.append(ids[len(p):])
            logits.append(rows)
    return np.array(tokens, dtype=np.int64), np.array(logits, dtype=np.float32)


def make_case(name, out_dir, torch, transformers, np):
    """The case's checkpoint in out_dir, its prompts, and transformers' tokens and logits."""
    model_type, fields, storage, _, shard, legacy = CASES[name]
    for seed in range(sum(map(ord, name)), sum(map(ord, name)) + 8):
        shutil.rmtree(out_dir, ignore_errors=True)
        rng = np.random.default_rng(seed)
        prompts = [rng.integers(3, BASE["vocab_size"], n).tolist() for n in PROMPT_LENGTHS]
        kw = copy.deepcopy(dict(BASE, **fields))  # transformers changes the dicts it is given
        config = transformers.AutoConfig.for_model(model_type, **kw)
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        well_conditioned(model, torch, seed)
        if storage != "float32":
            model.to(getattr(torch, storage))
        model.save_pretrained(out_dir, **({"max_shard_size": shard} if shard else {}))
        if legacy:
            legacy_rope(os.path.join(out_dir, "config.json"))
        # The reference is the checkpoint as transformers reads it, in float32 (16-bit storage:
        # the same values; the model above has its rotary buffers rounded to 16 bits too).
        model = transformers.AutoModelForCausalLM.from_pretrained(
            out_dir, dtype=torch.float32, attn_implementation="eager").eval()
        tokens, logits = reference(model, torch, np, prompts)
        scale = max(1.0, float(np.abs(logits).max()))
        top2 = np.sort(logits, axis=-1)[..., -2:]
        margin = float((top2[..., 1] - top2[..., 0]).min())
        if margin >= MARGIN * scale:
            break
        log(f"{name}: seed {seed}: the best two logits come within {margin:.1e} "
            f"(max |logit| {scale:.1f}); the next seed")
    else:
        raise SystemExit(f"{name}: no seed gives a margin of {MARGIN} x max |logit|")
    if model_type == "mistral":  # the window must matter here
        model.config.sliding_window = None
        _, full = reference(model, torch, np, prompts)
        change = float(np.abs(full - logits).max())
        if change < 1e-2:
            raise SystemExit(f"{name}: the sliding window changes the logits by {change:.1e} only")
    shards = len([f for f in os.listdir(out_dir) if f.endswith(".safetensors")])
    log(f"{name}: {model_type} ({', '.join(f'{k}={v}' for k, v in fields.items())}), "
        f"{storage} in {shards} file(s); reference margin {margin:.3f}, max |logit| {scale:.2f}")
    return prompts, tokens, logits


def run_disco(args, name, model_dir, prompts, np_, dump, tool):
    """disco-demo, or examples/generate.py (tool "generate.py"), at np_ ranks."""
    dtype = CASES[name][3]
    prog = ([args.demo, "--warmup", "0", *args.demo_flag] if tool == "disco-demo"
            else [sys.executable, args.generate])
    cmd = [args.mpiexec, "-n", str(np_), *args.mpiexec_flag, *prog, "--model", model_dir,
           "--max-new-tokens", str(NEW_TOKENS), "--dtype", dtype, "--dump-logits", dump]
    for p in prompts:
        cmd += ["--prompt", ",".join(map(str, p))]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"no exit within {TIMEOUT} s"
    if r.returncode != 0:
        return None, f"exit {r.returncode}:\n" + "\n".join(r.stdout.splitlines()[-15:])
    return [[int(t) for t in line.split()[1:]] for line in r.stdout.splitlines()
            if line.startswith("generated:")], r.stdout


def convert(args, name, model_dir, out):
    """disco-demo --convert at 2 ranks: the checkpoint as HDF5 (config.json as disco writes it)."""
    cmd = [args.mpiexec, "-n", "2", *args.mpiexec_flag, args.demo, "--model", model_dir,
           "--dtype", CASES[name][3], "--convert", out]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=TIMEOUT)
    return None if r.returncode == 0 else f"--convert: exit {r.returncode}:\n{r.stdout[-2000:]}"


def check(what, name, got, dump, tokens, logits, np):
    tol = TOL[CASES[name][3]]
    if got != tokens.tolist():
        for b, (g, w) in enumerate(zip(got, tokens.tolist())):
            if g != w:
                log(f"  prompt {b}: disco {g}\n  prompt {b}: transformers {w}")
        return "tokens differ"
    d = np.load(dump)
    if d.shape != logits.shape:
        return f"logits of shape {d.shape}, not {logits.shape}"
    err = float(np.abs(d - logits).max())
    scale = max(1.0, float(np.abs(logits).max()))
    if err > tol * scale:
        return f"tokens equal, but logits differ by {err:.3e} (> {tol:g} x {scale:.2f})"
    log(f"ok: {what}: {NEW_TOKENS} tokens x {len(tokens)} prompts equal; "
        f"max |logit diff| {err:.2e} = {err / scale:.1e} of max |logit| (tolerance {tol:g})")


def tools(args):
    return ["disco-demo"] + (["generate.py"] if args.generate else [])


def runs_of(args, name, model_dir, h5):
    """(tool, ranks, model) of a case: each tool at every NP from the directory, then from the
    HDF5 file disco-demo --convert writes (at 2 ranks) at the largest NP; not for float16 storage,
    whose HDF5 file would hold the run's dtype, as another case's does."""
    nps = [int(n) for n in args.np.split(",")]
    runs = [(tool, n, model_dir) for tool in tools(args) for n in nps]
    if not args.no_hdf5 and CASES[name][2] != "float16":
        runs += [(tool, nps[-1], h5) for tool in tools(args)]
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--np", default="1,2,4")
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--mpiexec-flag", action="append", default=[])
    ap.add_argument("--demo-flag", action="append", default=[])
    ap.add_argument("--keep", help="make the checkpoints here and keep them")
    ap.add_argument("--no-hdf5", action="store_true", help="leave out the HDF5 round trip")
    ap.add_argument("--generate", help="examples/generate.py: run it too (this Python, which "
                    "must import disco)")
    args = ap.parse_args()
    try:
        import numpy as np
        import torch
        import transformers
    except ImportError as e:
        log(f"SKIP: {e} (this test runs in a Python with torch, transformers and numpy)")
        return 77
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    log(f"transformers {transformers.__version__}, torch {torch.__version__}")
    if args.generate and subprocess.run([sys.executable, "-c", "import disco"]).returncode != 0:
        log(f"FAIL: {sys.executable} cannot import disco "
            f"(PYTHONPATH={os.environ.get('PYTHONPATH')}); examples/generate.py needs it")
        return 1
    base = args.keep or tempfile.mkdtemp(prefix="disco-families-",
                                         dir=os.environ.get("DISCO_TEST_SHARED_DIR"))
    failures = []
    try:
        for name in args.case or CASES:
            model_dir = os.path.join(base, name)
            shutil.rmtree(model_dir, ignore_errors=True)
            prompts, tokens, logits = make_case(name, model_dir, torch, transformers, np)
            h5 = os.path.join(base, name + ".h5")
            for tool, np_, model in runs_of(args, name, model_dir, h5):
                what = (f"{name}: {tool} at {np_} rank(s)"
                        + (" from HDF5" if model == h5 else ""))
                dump = os.path.join(base, f"{name}.{tool}.np{np_}.npy")
                why = convert(args, name, model_dir, h5) if model == h5 and tool == "disco-demo" \
                    else None
                if not why:
                    got, out = run_disco(args, name, model, prompts, np_, dump, tool)
                    why = out if got is None else check(what, name, got, dump, tokens, logits, np)
                if why:
                    log(f"FAIL: {what}: {why}")
                    failures.append(what)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    log(f"FAIL: {', '.join(failures)}" if failures else f"PASS: {len(args.case or CASES)} "
        f"families' checkpoints, {' and '.join(tools(args))} equal to transformers at "
        f"{args.np} rank(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
