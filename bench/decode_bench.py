#!/usr/bin/env python3
"""Llama greedy decoding: disco against a tuned PyTorch and llama.cpp on the same weights, in one
run, on a machine measured first (docs/performance.md).

    bench/venv.sh --llama-cpp          # once: build/venv-bench with torch, gguf, llama-cpp-python
    /usr/bin/python3 bench/decode_bench.py [--models 125m,demo] [--batches 1,4]
        [--ranks 1,2] [--threads 1,2] [--dtypes float32,bfloat16,int8] [--repeats 5]
        [--new-tokens 32] [--prompt-len 32] [--llamacpp-kv f32] [--disco-kv f32]
        [--baselines disco,torch,llama.cpp]
        [--json FILE]
        [--python build/venv-bench/bin/python (the baselines': the default when it is there)]

1. The machine: read and triad bandwidth at each thread count (bench/stream.c, -O3
   -march=native), sgemm peak, two spinners (do 2 threads get 2 cores?), the load average.
2. For each model (bench/checkpoint.py: 125m, demo, tiny; a random checkpoint written once to
   --cache, and its GGUF files, bench/gguf_export.py): a float32 greedy run of every baseline at 1
   thread against disco at 1 rank, same prompts, before any timing; a baseline whose tokens
   differ is reported and not timed.
3. For each dtype: every configuration (disco at each rank count, each baseline at each thread
   count, one process each, bench/baseline_worker.py) runs once per batch size per repeat, in
   turn (A B C A B C ...: a slow minute of the machine hits every one); after one untimed
   warm-up of each. Medians over the repeats.
4. The table: prefill and decode tokens/s, decode as a fraction of the bandwidth bound (the bytes
   a step reads, every weight once and each sequence's keys and values at its mean position of
   the decode, over the read bandwidth at n threads: B tokens per step) and of the bound by
   what n cores read beside it (before each batch of each repeat, n one-thread processes side by
   side, the median over the repeats: the host's other tenants move it), prefill as a fraction
   of sgemm peak; ratios disco n ranks / baseline n threads, refused against a baseline whose
   n-thread run is slower than its 1-thread run; a warning when the machine was loaded.

Prefill tokens/s = the B prompts' tokens / the time to their first new tokens; decode tokens/s =
B * (new_tokens - 1) / the time of the rest. bfloat16: disco keeps bfloat16 weights and computes
in float32, torch multiplies in bfloat16, llama.cpp runs a bf16 GGUF; llama.cpp q8_0 (8-bit
weights, so not the same weights) is an extra row of the bfloat16 grid. int8: disco --dtype int8
against llama.cpp's q8_0 GGUF of the same checkpoint (the same blocks and scales, q8.h), no torch
row. --prompt-len L: batch 1 one prompt of L tokens, batch B lengths L/2..2L evenly (default
32). The KV caches are float32 everywhere (torch's and disco's always; llama.cpp's by default,
where the float32 token check compares the same arithmetic); --llamacpp-kv f16 times llama.cpp
with its own default, float16 keys and values (half the bytes at long prompts; the token check
still in float32), the notes saying so; --disco-kv f16 times disco with its float16 cache
(disco-demo --kv-dtype float16) likewise.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoint  # noqa: E402
import disco_demo  # noqa: E402
import machine  # noqa: E402
import report  # noqa: E402

ROOT = os.path.dirname(HERE)
VENV_PY = os.path.join(ROOT, "build", "venv-bench", "bin", "python")
NEEDS = {"torch": "torch", "llama.cpp": "llama_cpp, gguf"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="125m,demo", help=f"of {','.join(checkpoint.MODELS)}")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtypes", default="float32,bfloat16,int8")
    p.add_argument("--baselines", default="disco,torch,llama.cpp")
    p.add_argument("--disco-kernels", default="auto",
                   help="DISCO_CPU_KERNELS values, one disco row each (auto: the row 'disco', "
                        "the ratios' own; e.g. auto,avx2 for before/after)")
    p.add_argument("--no-q8", action="store_true", help="no llama.cpp q8_0 row")
    p.add_argument("--baseline-pages", choices=["4k", "2m"], default="2m",
                   help="the baselines' weights in 4 KiB or 2 MiB pages (disco's are in 2 MiB "
                        "pages where the kernel gives them; baseline_worker.py)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=32,
                   help="batch 1's prompt length; batch B's are L/2..2L evenly")
    p.add_argument("--llamacpp-kv", choices=["f32", "f16"], default="f32",
                   help="llama.cpp's KV cache in the timed runs (f16: its own default; the "
                        "token check stays f32)")
    p.add_argument("--disco-kv", choices=["f32", "f16"], default="f32",
                   help="disco's KV cache in the timed runs (f16: --kv-dtype float16; the token "
                        "check stays f32)")
    p.add_argument("--python", default=VENV_PY if os.path.exists(VENV_PY) else sys.executable,
                   help="the baselines' Python (default build/venv-bench's when it is there)")
    p.add_argument("--demo", default=os.path.join(ROOT, "build", "src", "tools", "disco-demo"))
    p.add_argument("--mpiexec", default="mpirun")
    p.add_argument("--mpiexec-flag", action="append", default=[], help="repeatable")
    p.add_argument("--cache",
                   default=os.environ.get("DISCO_BENCH_CACHE", "~/.cache/disco/llama-bench"))
    p.add_argument("--stream-mib", type=int, default=256, help="bandwidth arrays, MiB each")
    p.add_argument("--json", help="write every figure here too")
    a = p.parse_args(argv)
    for k in ("batches", "ranks", "threads"):
        setattr(a, k, [int(x) for x in getattr(a, k).split(",") if x])
    for k in ("models", "dtypes", "baselines", "disco_kernels"):
        setattr(a, k, [x for x in getattr(a, k).split(",") if x])
    if a.new_tokens < 2:
        raise SystemExit("--new-tokens must be at least 2 (one prefill token, then decode)")
    if a.prompt_len < 2:
        raise SystemExit("--prompt-len must be at least 2 (batch B's prompts start at half of it)")
    return a


def unavailable(a):
    """{baseline: why it cannot run here} for the baselines asked for."""
    why = {}
    for who in a.baselines:
        if who == "disco":
            if not os.path.exists(a.demo):
                why[who] = f"no disco-demo at {a.demo} (build it, or --demo PATH)"
        elif who in NEEDS:
            code = f"import {NEEDS[who]}"
            if subprocess.run([a.python, "-c", code], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode != 0:
                why[who] = (f"{a.python} cannot `{code}`: run bench/venv.sh"
                            + (" --llama-cpp (builds llama.cpp: minutes)"
                               if who == "llama.cpp" else ""))
        else:
            raise SystemExit(f"unknown baseline {who!r} (disco, torch, llama.cpp)")
    return why


def make_prompts(batch, vocab, length=32, seed=0):
    """batch 1: one prompt of `length` tokens; else lengths length/2..2 length evenly
    (padding-free per sequence)."""
    rng = np.random.default_rng(seed + batch)
    lens = ([length] if batch == 1 else
            [int(round(x)) for x in np.linspace(length // 2, 2 * length, batch)])
    return [[int(t) for t in rng.integers(3, vocab, n)] for n in lens]


class Worker:
    """A baseline at one thread count in its own process (bench/baseline_worker.py)."""

    def __init__(self, a, who, n, model_dir, dtype, max_batch, max_len, kv="f32"):
        import gguf_export
        kind = "torch" if who == "torch" else "llamacpp"
        cmd = [a.python, os.path.join(HERE, "baseline_worker.py"), kind, "--model", model_dir,
               "--threads", str(n), "--dtype", dtype, "--max-batch", str(max_batch),
               "--max-len", str(max_len), "--pages", a.baseline_pages]
        if kind == "llamacpp":
            qtype = "q8_0" if who.endswith("q8_0") else {"float32": "f32", "bfloat16": "bf16",
                                                          "int8": "q8_0"}[dtype]
            cmd += ["--gguf", self._gguf(a, gguf_export, model_dir, qtype), "--kv", kv]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._read().get("info", "")

    @staticmethod
    def _gguf(a, gguf_export, model_dir, qtype):
        path = os.path.join(model_dir, f"model-{qtype}.gguf")
        if not os.path.exists(path):  # written by the venv's Python: it has the gguf package
            subprocess.run([a.python, os.path.join(HERE, "gguf_export.py"), model_dir, path,
                            "--type", qtype], check=True)
        return path

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"a baseline worker ended (exit {self.p.wait()}): {self.p.args}")
        return json.loads(line)

    def run(self, prompts, new_tokens):
        self.p.stdin.write(json.dumps({"prompts": prompts, "new_tokens": new_tokens}) + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def disco_who(kernels):
    return "disco" if kernels == "auto" else f"disco {kernels}"


def run_disco(a, ranks, model_dir, prompts, dtype, who="disco", kv="f32"):
    kernels = who[len("disco "):] if who != "disco" else None
    d = disco_demo.run_demo(a.demo, a.mpiexec, ranks, model_dir, prompts, a.new_tokens, dtype,
                            a.mpiexec_flag, kernels=kernels,
                            demo_flags=["--kv-dtype", "float16"] if kv == "f16" else [])
    return {"tokens": d["tokens"], "prefill": d["prefill"], "decode": d["decode"],
            "note": f"runtime share {d['share']:.2f}%", "kernels": d["kernels"]}


def run_worker(w, prompts, new_tokens):
    r = w.run(prompts, new_tokens)
    B = len(prompts)
    return {"tokens": r["tokens"], "prefill": sum(map(len, prompts)) / r["prefill_s"],
            "decode": B * (new_tokens - 1) / r["decode_s"],
            "note": f"{r['os_threads']} OS threads"}


def first_difference(x, y):
    for b, (s, t) in enumerate(zip(x, y)):
        for i, (u, v) in enumerate(zip(s, t)):
            if u != v:
                return f"sequence {b}, token {i}: {v} where disco made {u}"
    return None if x == y else "a different number of tokens"


def token_check(a, model_dir, cfg, baselines):
    """Float32, before any timing: each baseline at 1 thread against disco at 1 rank, greedy, on
    the largest batch's prompts. {baseline: why it is excluded} for those that differ."""
    prompts = make_prompts(max(a.batches), cfg["vocab_size"], a.prompt_len)
    for k in a.disco_kernels:
        r = run_disco(a, 1, model_dir, prompts, "float32", disco_who(k))
        print(f"  {disco_who(k)} kernels: {r['kernels']}", flush=True)
    ref = run_disco(a, 1, model_dir, prompts, "float32")["tokens"]
    if a.disco_kv == "f16":  # told, not excluded: the rounding of a cache may move a close token
        diff = first_difference(ref, run_disco(a, 1, model_dir, prompts, "float32", kv="f16")[
            "tokens"])
        print("  float32 tokens, disco's float16 kv cache against its float32 one: "
              + ("the same" if diff is None else f"differ ({diff})"), flush=True)
    excluded = {}
    for who in baselines:
        w = Worker(a, who, 1, model_dir, "float32", len(prompts),
                   max(map(len, prompts)) + a.new_tokens)
        try:
            diff = first_difference(ref, run_worker(w, prompts, a.new_tokens)["tokens"])
        finally:
            w.close()
        print(f"  float32 tokens, {who} 1 thread against disco 1 rank: "
              + ("the same" if diff is None else f"DIFFER ({diff}): not timed"), flush=True)
        if diff is not None:
            excluded[who] = f"float32 tokens differ from disco's ({diff})"
    return excluded


def configs(a, baselines, dtype):
    """[(who, n)] of one cell, in the order of each repeat."""
    out = ([(disco_who(k), r) for k in a.disco_kernels for r in a.ranks]
           if "disco" in a.baselines else [])
    for who in baselines:
        if who == "torch" and dtype == "int8":  # no 8-bit weights: no row
            continue
        out += [(who, t) for t in a.threads]
        if who == "llama.cpp" and dtype == "bfloat16" and not a.no_q8:
            out += [("llama.cpp q8_0", t) for t in a.threads]
    return out


def measure_cell(a, name, model_dir, cfg, dtype, baselines):
    """The rows of one (model, dtype): every configuration, batch and repeat, interleaved."""
    prompts = {b: make_prompts(b, cfg["vocab_size"], a.prompt_len) for b in a.batches}
    max_len = max(len(p) for ps in prompts.values() for p in ps) + a.new_tokens
    cfgs = configs(a, baselines, dtype)
    workers = {c: Worker(a, c[0], c[1], model_dir, dtype, max(a.batches), max_len,
                         a.llamacpp_kv)
               for c in cfgs if not c[0].startswith("disco")}

    def kv_f16(who):  # the timed runs' cache in float16
        return (who.startswith("llama.cpp") and a.llamacpp_kv == "f16" or
                who.startswith("disco") and a.disco_kv == "f16")

    def kv_bytes(who, b):  # what a decode step reads of the b sequences' caches, at mid-decode
        return sum(len(p) + a.new_tokens / 2 for p in prompts[b]) * \
            checkpoint.kv_bytes_per_position(cfg, 2 if kv_f16(who) else 4)

    rows = {(c, b): dict(model=name, dtype=dtype, batch=b, who=c[0], n=c[1], prefill=[],
                         decode=[], read_beside=[], kv_bytes=kv_bytes(c[0], b),
                         prompt_len=a.prompt_len,
                         weights="q8_0" if c[0].endswith("q8_0") else dtype)
            for c in cfgs for b in a.batches}
    for c, w in workers.items():
        print(f"  {report.label(*c)}: {w.info}", flush=True)
    stream = machine.compile_stream(os.path.join(os.path.expanduser(a.cache), "bin"))
    try:
        for w in workers.values():  # warm-up, untimed
            for b in a.batches:
                w.run(prompts[b], a.new_tokens)
        for rep in range(a.repeats):
            for b in a.batches:
                # What 1 and n cores read in this minute, for the rows that run next.
                beside = {n: machine.read_beside(stream, n, a.stream_mib)
                          for n in sorted({c[1] for c in cfgs})}
                for c in cfgs:
                    r = (run_disco(a, c[1], model_dir, prompts[b], dtype, c[0], a.disco_kv)
                         if c[0].startswith("disco")
                         else run_worker(workers[c], prompts[b], a.new_tokens))
                    row = rows[(c, b)]
                    row["prefill"].append(r["prefill"])
                    row["decode"].append(r["decode"])
                    row["read_beside"].append(beside[c[1]])
                    row["note"] = r["note"] + (", f16 kv cache" if kv_f16(c[0]) else "")
            print(f"  {name} {dtype} repeat {rep + 1}/{a.repeats} done", flush=True)
    finally:
        for w in workers.values():
            w.close()
    return list(rows.values())


def run_grid(a, why_not, m):
    """Every model's token check, then its cells; the rows with their medians and bounds."""
    rows = []
    for name in a.models:
        if name not in checkpoint.MODELS:
            raise SystemExit(f"unknown model {name!r} ({', '.join(checkpoint.MODELS)})")
        model_dir = checkpoint.model_dir(a.cache, name, checkpoint.MODELS[name])
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        longest = max(len(p) for b in a.batches
                      for p in make_prompts(b, cfg["vocab_size"], a.prompt_len))
        if longest + a.new_tokens > cfg.get("max_position_embeddings", float("inf")):
            raise SystemExit(
                f"--prompt-len {a.prompt_len}: prompts of up to {longest} tokens (batch "
                f"{max(a.batches)}: up to twice it) and {a.new_tokens} new tokens pass model "
                f"{name}'s {cfg['max_position_embeddings']} positions")
        baselines = [w for w in a.baselines if w != "disco" and w not in why_not]
        print(f"model {name}: {model_dir}", flush=True)
        excluded = token_check(a, model_dir, cfg, baselines) if "disco" not in why_not else {}
        for who, why in excluded.items():
            rows += [dict(model=name, dtype=d, batch=b, who=who, n=t, excluded=why)
                     for d in a.dtypes for b in a.batches for t in a.threads]
        timed = [w for w in baselines if w not in excluded]
        for dtype in a.dtypes:
            for r in measure_cell(a, name, model_dir, cfg, dtype, timed):
                rows.append(report.bounds(report.medians([r])[0], cfg, m))
    return rows


def build_flags(a):
    """llama-cpp-python's build flags, as bench/venv.sh wrote them beside the venv (or None)."""
    path = os.path.join(os.path.dirname(os.path.dirname(a.python)), "llama-cpp-build-flags.txt")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().strip()


def main(argv=None):
    a = parse_args(argv)
    why_not = unavailable(a)
    for who, why in why_not.items():
        print(f"{who}: skipped: {why}", flush=True)
    if "disco" in why_not:
        raise SystemExit(why_not["disco"])
    m = machine.measure(sorted(set(a.threads) | set(a.ranks)),
                        os.path.join(os.path.expanduser(a.cache), "bin"), a.stream_mib, a.python)
    build = build_flags(a)
    if build and "llama.cpp" not in why_not:
        print("llama.cpp build: " + build.replace("\n", "; "), flush=True)
    print(f"prompts: batch 1 one of {a.prompt_len} tokens, batch B of {a.prompt_len // 2}.."
          f"{2 * a.prompt_len} evenly; {a.new_tokens} new tokens; disco's KV cache "
          f"{a.disco_kv}, llama.cpp's "
          f"{a.llamacpp_kv} in the timed runs", flush=True)
    rows = run_grid(a, why_not, m)
    refusals = report.scaling_refusals(rows)
    rs = report.ratios(rows, refusals)
    print("\n" + "\n".join(report.table(rows)) + "\n\n" + "\n".join(report.ratio_table(rs)))
    m["loadavg_end"] = os.getloadavg()[0]  # counts this run's own processes: not judged
    m["spinners_end"] = machine.spinners()
    loaded = machine.busy_reasons(dict(m, spinners=m["spinners"] + m["spinners_end"]))
    print("\nthe machine was LOADED (" + "; ".join(loaded) + "): these figures are not reliable"
          if loaded else "\nthe machine was quiet (the load average before the run, the spinner "
          "check before and after it: " + " ".join(f"{x:.2f}" for x in m["spinners_end"]) + ")")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": m, "llama_cpp_build": build, "skipped": why_not,
                       "rows": rows, "ratios": rs, "loaded": loaded,
                       "args": {k: v for k, v in vars(a).items()}}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
