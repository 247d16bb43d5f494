#!/usr/bin/env python3
"""disco-demo --dtype int8 (the linear layers' weights as llama.cpp's Q8_0, models/llama/q8.h)
against --dtype float32 on the AVX2 path, on the demo's random checkpoints (default sizes; sizes
whose k is no multiple of 32, so short last blocks, a split of 167 columns a rank; tied
embeddings), at 1 and 2 ranks, under each int8 kernel set this CPU has (avx2, avx512):

- logits: while a prompt's int8 tokens equal float32's (the same inputs), every step's logits
  within TOL of float32's largest in magnitude (the measured figure is printed);
- tokens: at each such step, int8's greedy token equals float32's wherever float32's top-2
  margin exceeds 2 * TOL * its largest logit (each of the two logits moves by at most the bound);
  a smaller margin may flip the token, and the prompt is compared no further;
- the kernel sets against each other: the same tokens, logits within TOL_KERNELS (the same int8
  weights: only the order of additions differs);
- refusals: --dtype int4 (naming the value), int8 with --convert, in one line.

    check_q8.py --mpiexec MPIEXEC --demo DISCO_DEMO [--mpiexec-flag F ...]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

KERNELS = ("avx2", "avx512")
# The AVX-512 int8 kernel needs VNNI too (without it the avx512 set runs int8 on AVX2).
NEEDS = {"avx2": ("avx2", "fma", "f16c"),
         "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512_vnni")}
ODD = ["--hidden", "200", "--heads", "6", "--kv-heads", "2", "--head-dim", "36", "--ffn", "334",
       "--vocab", "1002", "--layers", "2", "--seed", "7"]
PROMPTS = ["--prompt", "1,5,9", "--prompt", "4,2", "--prompt", "7,3,11,19,2,8",
           "--prompt", "30,31,32,33"]
CASES = [  # (name, ranks, model flags)
    ("default sizes", 1, []),
    ("default sizes, 2 ranks", 2, []),
    ("odd sizes (short blocks)", 1, ODD),
    ("odd sizes, 2 ranks (167 columns a rank)", 2, ODD),
    ("tied embeddings, 2 ranks", 2, ["--tie-embeddings", "--seed", "3"]),
]
STEPS = 12
TOL = 1e-2
TOL_KERNELS = 1e-4


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def run(a, tmp, ranks, args, kernels, dump=None):
    env = dict(os.environ, TMPDIR=tmp, DISCO_CPU_KERNELS=kernels)
    cmd = [a.mpiexec, "-n", str(ranks)] + a.mpiexec_flag + [a.demo] + args
    if dump:
        cmd += ["--dump-logits", dump]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=300)
    return p.returncode, p.stdout


def tokens(out):
    return [[int(t) for t in line.split()[1:]] for line in out.splitlines()
            if line.startswith("generated:")]


def compare(ref, ref_tok, q, q_tok):
    """(max logit error / largest, steps compared, steps the margin rule decided, failures)."""
    worst, compared, decided, bad = 0.0, 0, 0, []
    for p in range(ref.shape[0]):
        for t in range(ref.shape[1]):
            scale = float(np.abs(ref[p, t]).max())
            worst = max(worst, float(np.abs(q[p, t] - ref[p, t]).max()) / scale)
            compared += 1
            top2 = np.sort(ref[p, t])[-2:]
            if top2[1] - top2[0] > 2 * TOL * scale:
                decided += 1
                if q_tok[p][t] != ref_tok[p][t]:
                    bad.append(f"prompt {p} step {t}: token {q_tok[p][t]}, float32's "
                               f"{ref_tok[p][t]}, whose margin {top2[1] - top2[0]:.3g} exceeds "
                               f"the bound {2 * TOL * scale:.3g}")
            if q_tok[p][t] != ref_tok[p][t]:
                break  # later steps have other inputs
    return worst, compared, decided, bad


def check_case(a, tmp, name, ranks, model, have):
    args = model + PROMPTS + ["--max-new-tokens", str(STEPS)]
    ref_npy = os.path.join(tmp, "ref.npy")
    rc, out = run(a, tmp, ranks, args + ["--dtype", "float32"], "avx2", ref_npy)
    if rc != 0:
        return [f"{name}: float32 failed (exit {rc}):\n{out}"]
    ref, ref_tok = np.load(ref_npy), tokens(out)
    bad, first = [], None
    for k in have:
        npy = os.path.join(tmp, f"int8-{k}.npy")
        rc, out = run(a, tmp, ranks, args + ["--dtype", "int8"], k, npy)
        what = f"{name}, int8, DISCO_CPU_KERNELS={k}"
        if rc != 0:
            bad.append(f"{what}: exit {rc}:\n{out}")
            continue
        if "linear weights stored int8 Q8_0" not in out or f"int8: {k} (" not in out:
            bad.append(f"{what}: the header or kernels line does not say int8 Q8_0 / {k}:\n{out}")
        q, q_tok = np.load(npy), tokens(out)
        worst, compared, decided, fails = compare(ref, ref_tok, q, q_tok)
        print(f"  {what}: logits within {worst:.2e} of float32's largest over {compared} steps; "
              f"tokens equal at the {decided} steps the margin rule decides"
              + ("" if not fails else f", {len(fails)} NOT"))
        bad += [f"{what}: {f}" for f in fails]
        if not worst <= TOL:
            bad.append(f"{what}: logit error {worst:.3e} of the largest > {TOL}")
        if decided == 0:
            bad.append(f"{what}: no step had a margin above the bound: the check decided nothing")
        if first is None:
            first = (q, q_tok)
            continue
        kerr = float(np.abs(q - first[0]).max()) / float(np.abs(first[0]).max())
        if q_tok != first[1] or not kerr <= TOL_KERNELS:
            bad.append(f"{what}: differs from {have[0]}'s (tokens "
                       f"{'equal' if q_tok == first[1] else 'differ'}, logits {kerr:.2e})")
    return bad


def check_refusals(a, tmp):
    bad = []
    for args, want in [(["--dtype", "int4"], "int4"), (["--dtype", "int8", "--convert",
                                                         os.path.join(tmp, "x.h5")], "--convert")]:
        rc, out = run(a, tmp, 1, args + ["--max-new-tokens", "1"], "auto")
        lines = [line for line in out.splitlines() if want in line]
        print(f"  {' '.join(args[:3])}: exit {rc}: {lines[0] if lines else out.strip()}")
        if rc == 0 or len(lines) != 1:
            bad.append(f"{args}: not refused in one line naming {want}:\n{out}")
    return bad


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--demo", required=True)
    p.add_argument("--mpiexec-flag", action="append", default=[])
    a = p.parse_args()
    flags = cpu_flags()
    have = [k for k in KERNELS if all(f in flags for f in NEEDS[k])]
    print(f"int8 kernel sets this CPU has: {', '.join(have) or 'none'}")
    if "avx2" not in have:
        print("SKIP: this CPU has no AVX2, FMA and F16C (the float32 reference's path)")
        return 77
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, ranks, model in CASES:
            bad += check_case(a, tmp, name, ranks, model, have)
        bad += check_refusals(a, tmp)
    for b in bad:
        print("FAIL: " + b)
    print("PASS" if not bad else f"FAIL ({len(bad)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
