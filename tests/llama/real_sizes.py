#!/usr/bin/env python3
"""Real sizes: random checkpoints with the shapes of Llama-3.2-1B and Qwen2.5-0.5B at 2 ranks.

    real_sizes.py --mpiexec MPIEXEC --demo DISCO_DEMO [--np 2] [--model NAME ...] [--dir DIR]
        [--keep] [--max-new-tokens 16] [--mpiexec-flag FLAG ...]

For each model it writes (once: with --keep a directory that already holds it is reused) a
Hugging Face directory of random bfloat16 weights with the published model's config.json values
and tensor names and shapes, streamed through a small buffer (nothing holds a whole tensor, let
alone a float32 model), then runs disco-demo --model DIR --dtype bfloat16 on 2 prompts of
different lengths and checks, from its output:
- it decodes (one `generated:` line per prompt, MAX_NEW_TOKENS ids each, decode tokens/s > 0);
- the weights per rank it reports are this rank's shard of the checkpoint (computed here from the
  shapes and the split), within 1 MiB;
- every rank's peak RSS (VmHWM) <= 1.1 x (shard + KV cache + 64 MiB);
and prints a table: model, dtype, shard MiB, KV MiB, peak RSS per rank, the bound, load s, MB/s
and decode tokens/s. Needs numpy (Debian's python3-numpy) and about 3.5 GB of disk.

Exit 0: every model within its bound; 1: a failure; 77 (CTest's skip): DISCO_REAL_SIZES is not
set (the checkpoints are 3.5 GB and a run takes minutes: not for every CI run).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The published config.json values (hub: meta-llama/Llama-3.2-1B, Qwen/Qwen2.5-0.5B).
MODELS = {
    "Llama-3.2-1B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "rope_scaling": {
            "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
        "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"},
    "Qwen2.5-0.5B": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "max_window_layers": 24, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": False,
        "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151643,
        "torch_dtype": "bfloat16"},
}
PROMPTS = ("1,5,9,200,31,7,1000,42", "4,2,77,3001,12")
POOL = 1 << 22  # random bfloat16 values drawn once, written from random offsets (8 MiB)
MIB = 1 << 20


def log(*a):
    print(*a, flush=True)


def weights(c):
    """(name, shape, split) of every tensor, as models/llama/config.cc's WeightSpecs: split 0 by
    rows, 1 by columns, -1 whole."""
    h, f, d = c["hidden_size"], c["intermediate_size"], c.get("head_dim")
    d = d or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    bias = c["model_type"] == "qwen2" or c.get("attention_bias", False)
    out = [("model.embed_tokens.weight", (c["vocab_size"], h), 0)]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out.append((p + "input_layernorm.weight", (h,), -1))
        for n, rows in (("q", q), ("k", kv), ("v", kv)):
            out.append((p + f"self_attn.{n}_proj.weight", (rows, h), 0))
            if bias:
                out.append((p + f"self_attn.{n}_proj.bias", (rows,), 0))
        out.append((p + "self_attn.o_proj.weight", (h, q), 1))
        out.append((p + "post_attention_layernorm.weight", (h,), -1))
        out += [(p + "mlp.gate_proj.weight", (f, h), 0), (p + "mlp.up_proj.weight", (f, h), 0),
                (p + "mlp.down_proj.weight", (h, f), 1)]
    out.append(("model.norm.weight", (h,), -1))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (c["vocab_size"], h), 0))
    return out


def shard_bytes(c, ranks):
    total = 0
    for _, shape, split in weights(c):
        n = 1
        for i, s in enumerate(shape):
            n *= s // ranks if i == split else s
        total += 2 * n
    return total


def write_checkpoint(np, out_dir, c):
    """config.json and model.safetensors (BF16): matrices N(0, 1/in), biases N(0, 0.01), norms 1;
    each tensor streamed from a pool of random values at a random offset."""
    tmp = out_dir + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = np.random.default_rng(0)
    pool = rng.standard_normal(POOL, dtype=np.float32)
    header, offset = {}, 0
    specs = weights(c)
    for name, shape, _ in specs:
        n = int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + 2 * n]}
        offset += 2 * n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape, _ in specs:
            n = int(np.prod(shape))
            if name.endswith("norm.weight"):
                scaled = np.ones(POOL, dtype=np.float32)
            else:
                scaled = pool * (0.1 if name.endswith(".bias") else shape[-1] ** -0.5)
            bits = (scaled.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16, truncated
            done = 0
            while done < n:
                start = int(rng.integers(0, POOL))
                k = min(n - done, POOL - start)
                f.write(bits[start:start + k].tobytes())
                done += k
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    os.rename(tmp, out_dir)


def value(out, pattern, what):
    m = re.search(pattern, out, re.M)
    if not m:
        raise ValueError(f"no line '{what}' in disco-demo's output")
    return m.groups()


def run(args, name, model_dir, c):
    """disco-demo at NP ranks; the table's row, or raises ValueError saying what failed."""
    cmd = [args.mpiexec, "-n", str(args.np), *args.mpiexec_flag, args.demo, "--model", model_dir,
           "--dtype", "bfloat16", "--max-new-tokens", str(args.max_new_tokens), "--warmup", "0",
           "--repeat", "1"]
    for p in PROMPTS:
        cmd += ["--prompt", p]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = r.stdout
    log("\n".join("  " + l for l in out.splitlines() if not l.startswith("generated:")))
    if r.returncode != 0:
        raise ValueError(f"disco-demo exit {r.returncode}")
    gen = [l.split()[1:] for l in out.splitlines() if l.startswith("generated:")]
    if len(gen) != len(PROMPTS) or any(len(g) != args.max_new_tokens for g in gen):
        raise ValueError(f"{len(gen)} generated lines, not {len(PROMPTS)} of "
                         f"{args.max_new_tokens} ids")
    _, _, load_s, mbs = value(
        out, r"^loaded: ([0-9.]+) (GB|MB) in ([0-9.]+) s \(([0-9]+) MB/s\)",
        "loaded: X GB in Y s (Z MB/s) per rank")
    kv = float(value(out, r"^kv cache per rank: ([0-9.]+) MiB", "kv cache per rank")[0])
    peaks = [float(x) for x in value(out, r"^peak rss per rank \(MiB\): ([0-9. ]+)$",
                                     "peak rss per rank (MiB)")[0].split()]
    reported = float(value(out, r"^weights per rank: ([0-9.]+) MiB", "weights per rank")[0])
    decode = float(value(out, r"^decode: ([0-9.]+) tokens/s", "decode: Y tokens/s")[0])
    shard = shard_bytes(c, args.np) / MIB
    if abs(reported - shard) > 1:
        raise ValueError(f"weights per rank {reported} MiB, but the shard is {shard:.1f} MiB")
    bound = 1.1 * (shard + kv + 64)
    row = (name, "bfloat16", shard, kv, peaks, bound, float(load_s), int(mbs), decode)
    if decode <= 0:
        raise ValueError("decode: 0 tokens/s")
    over = [p for p in peaks if p > bound]
    if over:
        raise ValueError(f"peak RSS {max(over):.1f} MiB > 1.1 x (shard {shard:.1f} + KV {kv:.1f} "
                         f"+ 64) = {bound:.1f} MiB")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    ap.add_argument("--dir", help="where the checkpoints go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the checkpoints")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--mpiexec-flag", action="append", default=[])
    args = ap.parse_args()
    if not os.environ.get("DISCO_REAL_SIZES"):
        log("SKIP: set DISCO_REAL_SIZES=1 to run (writes 3.5 GB of checkpoints; minutes)")
        return 77
    try:
        import numpy as np
    except ImportError as e:
        log(f"SKIP: {e} (this test needs numpy)")
        return 77
    base = args.dir or tempfile.mkdtemp(prefix="disco-real-sizes-",
                                        dir=os.environ.get("DISCO_TEST_SHARED_DIR"))
    rows, failures = [], []
    try:
        for name in args.model or MODELS:
            c = MODELS[name]
            model_dir = os.path.join(base, name)
            if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
                log(f"{name}: writing a random checkpoint to {model_dir}")
                write_checkpoint(np, model_dir, c)
            log(f"{name}: disco-demo at {args.np} ranks")
            try:
                rows.append(run(args, name, model_dir, c))
            except ValueError as e:
                log(f"FAIL: {name}: {e}")
                failures.append(name)
    finally:
        if not args.keep:  # what this run wrote: the temporary directory, or the models in --dir
            for d in [os.path.join(base, n) for n in MODELS] if args.dir else [base]:
                shutil.rmtree(d, ignore_errors=True)
    log("| model | dtype | shard MiB | KV MiB | peak RSS per rank MiB | bound MiB | load s | MB/s "
        "| decode tokens/s |\n|---|---|---|---|---|---|---|---|---|")
    for name, dt, shard, kv, peaks, bound, load_s, mbs, decode in rows:
        log(f"| {name} | {dt} | {shard:.1f} | {kv:.1f} | {' / '.join(f'{p:.1f}' for p in peaks)} "
            f"| {bound:.1f} | {load_s:.2f} | {mbs} | {decode:.1f} |")
    log(f"FAIL: {', '.join(failures)}" if failures else
        f"PASS: {len(rows)} real-size checkpoints within 1.1 x (shard + KV cache + 64 MiB) "
        "per rank")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
