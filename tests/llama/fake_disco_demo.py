#!/usr/bin/env python3
"""A stand-in for disco-demo's Llama mode, for testing check_disco.py and the benchmark before the
model lands. It honours the disco-demo contract (see docs/demo.md) with the NumPy reference on rank
0; the other ranks only check their share. Run it under mpiexec like disco-demo.

Environment knobs, to test the tests:
  FAKE_DISCO_NO_MODEL=1   behave like a disco-demo without --model (--help does not list it and
                          --model is an unknown option, exit 2)
  FAKE_DISCO_BUG=position the decode positions are off by one from step 8 on (logits and tokens
                          go wrong)
  FAKE_DISCO_BUG=swap     the two prompts' outputs swapped
  FAKE_DISCO_BUG=hang     a mismatching checkpoint hangs instead of failing
"""

import argparse
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
SIZE = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
BUG = os.environ.get("FAKE_DISCO_BUG", "")
NO_MODEL = os.environ.get("FAKE_DISCO_NO_MODEL") == "1"

USAGE = """usage: disco-demo [--hidden H] [--ffn F] [--layers L] [--tokens T] [--steps S]
                  [--dtype float32|bfloat16] [--checkpoint FILE.h5] [--calls]"""
USAGE += "" if NO_MODEL else ("""
       disco-demo --model DIR --prompt 1,5,9 [--prompt ...] [--max-new-tokens N]
                  [--dtype float32|bfloat16] [--dump-logits FILE.npy] [--calls]""")


def fail(msg):
    if RANK == 0:
        print(f"disco-demo: {msg}", file=sys.stderr, flush=True)
    else:
        # mpirun ends the job at the first non-zero exit: rank 0's message must be out first.
        time.sleep(3)
    sys.exit(1)


def main():
    if "--help" in sys.argv or "-h" in sys.argv:
        print(USAGE)
        return 0
    if NO_MODEL and "--model" in sys.argv:
        print("disco-demo: unknown option --model", file=sys.stderr)
        print(USAGE, file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", action="append", required=True, type=ref.parse_prompt)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--dump-logits")
    p.add_argument("--calls", action="store_true")
    a = p.parse_args()
    try:
        cfg, W = ref.load_checkpoint(a.model, a.dtype)
    except (ref.CheckpointError, OSError, KeyError, ValueError) as e:
        if BUG == "hang":
            time.sleep(3600)
        fail(str(e))
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        if cfg[key] % SIZE:
            fail(f"{key} = {cfg[key]} is not divisible by the {SIZE} ranks")
    if RANK != 0:
        return 0
    model = ref.Llama(cfg, W)
    t0 = time.perf_counter()
    toks, logits = [], []
    if BUG == "position":
        orig = model.forward

        def forward(ids, cache):
            if cache and len(ids) == 1 and cache[0][0].shape[1] >= len(a.prompt[0]) + 8:
                cache[:] = [(k[:, :-1], v[:, :-1]) for k, v in cache]  # drops the newest key
            return orig(ids, cache)
        model.forward = forward
    for prompt in a.prompt:
        t, l = model.generate(prompt, a.max_new_tokens)
        toks.append(t)
        logits.append(l)
    if BUG == "swap":
        toks.reverse()
        logits.reverse()
    dt = time.perf_counter() - t0
    for t in toks:
        print("generated: " + " ".join(map(str, t)))
    if a.dump_logits:
        np.save(a.dump_logits, np.stack(logits).astype(np.float32))
    n_prompt = sum(len(q) for q in a.prompt)
    n_decode = len(a.prompt) * (a.max_new_tokens - 1)
    hd = ref.head_dim(cfg)
    positions = max(map(len, a.prompt)) + a.max_new_tokens
    kv = (2 * cfg["num_hidden_layers"] * len(a.prompt) * positions * cfg["num_key_value_heads"]
          * hd * 4 / SIZE)
    wbytes = sum(w.size for w in W.values()) * (2 if a.dtype == "bfloat16" else 4) / SIZE
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"prefill: {n_prompt / (0.1 * dt):.1f} tokens/s")
    print(f"decode: {n_decode / (0.9 * dt):.1f} tokens/s")
    print(f"runtime share of a decode step: 1.3% (fake, by {'calls' if a.calls else 'replay'})")
    print(f"kv cache per rank: {kv / 2**20:.2f} MiB")
    print(f"weights per rank: {wbytes / 2**20:.2f} MiB")
    print("peak rss per rank (MiB): " + " ".join(f"{rss:.0f}" for _ in range(SIZE)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
