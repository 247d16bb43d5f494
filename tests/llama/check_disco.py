#!/usr/bin/env python3
"""disco-demo's Llama decoder against the NumPy reference (reference.py), at NP ranks in DTYPE.

    check_disco.py --mpiexec MPIEXEC --demo DISCO_DEMO --np NP --dtype float32|bfloat16
        [--mpiexec-flag FLAG ...] [--demo-flag FLAG ...] [--case NAME ...] [--no-errors]
        [--keep DIR]

--demo-flag adds a flag to every disco-demo run (e.g. --demo-flag=--device --demo-flag=cuda:
the same checks of the GPU path).

Exit 0: every case matched and every broken checkpoint failed as it should; 1: a failure;
77 (CTest's skip): disco-demo has no Llama mode yet (`disco-demo --help` does not list --model).

Cases (random checkpoints from make_checkpoint.py; heads, kv heads, ffn and vocab divisible by
1, 2 and 4): one float32 file with grouped-query attention (also run with --calls); float16
storage in 3 shards (model.safetensors.index.json) with tied embeddings; bfloat16 storage in 2
shards, kv heads = heads, rope_theta 500000, rms_norm_eps 1e-6, no head_dim key; a 4-layer model
with 4 query heads per kv head and a 40-token prompt. Each runs two prompts of different lengths
with --max-new-tokens 32 --dump-logits and needs:
- exactly two `generated:` lines, in prompt order, of 32 ids each, equal to the reference's;
- logits of shape (2, 32, vocab), float32, with max|a - b| <= TOL * max(1, max|ref|) over every
  row compared, TOL 1e-4 in float32 and 5e-2 in bfloat16 (the reference rounds every weight to
  bfloat16 and computes in float32, as disco's bfloat16 mode is to);
- the lines prefill:/decode: .. tokens/s, runtime share of a decode step: ..%, kv cache per
  rank: .. MiB, weights per rank: .. MiB, peak rss per rank (MiB): with NP numbers.
One allowance: where the reference's best two logits are within the tolerance of each other, a
different choice is not a bug; if disco's first different token is such a near tie (by the
reference's logits), the tokens after it are not compared (nor their logits) and the case says
so. Anything else different fails.

Broken checkpoints (each must exit non-zero within 120 s, message on stdout/stderr):
- model.layers.0.self_attn.q_proj.weight of shape (128, 136) where (128, 128) is needed: the
  message names the tensor and both shapes (as "128, 136" / "128x136" / "[128,136]" ...);
- model.layers.1.mlp.down_proj.weight missing: the message names it;
- the safetensors file cut in half: the message names the file or a tensor;
- (NP > 1) num_attention_heads = NP + 1 (and num_key_value_heads = 1), not divisible by NP: the
  message names num_attention_heads or num_key_value_heads.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_checkpoint as mc  # noqa: E402
import reference as ref  # noqa: E402

NEW_TOKENS = 32
TIMEOUT = 120

# name -> (make_checkpoint arguments, prompt lengths, extra disco-demo flags)
CASES = {
    "f32-gqa": (dict(hidden=128, layers=2, heads=8, kv_heads=4, ffn=256, vocab=512,
                     dtype="float32", seed=11), (7, 3), []),
    "f32-gqa-calls": (dict(hidden=128, layers=2, heads=8, kv_heads=4, ffn=256, vocab=512,
                           dtype="float32", seed=11), (5, 9), ["--calls"]),
    "f16-sharded-tied": (dict(hidden=96, layers=3, heads=8, kv_heads=4, ffn=160, vocab=384,
                              dtype="float16", seed=12, shards=3, tie_embeddings=True),
                         (4, 11), []),
    "bf16-sharded-mha": (dict(hidden=64, layers=2, heads=4, kv_heads=4, ffn=192, vocab=320,
                              dtype="bfloat16", seed=13, shards=2, rope_theta=500000.0,
                              rms_norm_eps=1e-6, head_dim_key=False), (6, 2), []),
    "f32-group4-long": (dict(hidden=128, layers=4, heads=16, kv_heads=4, ffn=128, vocab=256,
                             dtype="float32", seed=14), (40, 5), []),
}


def prompts_for(spec, lengths):
    rng = np.random.default_rng(spec["seed"] + 100)
    return [[int(t) for t in rng.integers(0, spec["vocab"], n)] for n in lengths]


class Runner:
    def __init__(self, a):
        self.a = a

    def run(self, np_, args):
        cmd = ([self.a.mpiexec, "-n", str(np_)] + self.a.mpiexec_flag + [self.a.demo] + args +
               self.a.demo_flag)
        # Its own process group, so that a hung job is ended whole (mpiexec and its ranks).
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=self.a.timeout)
            return p.returncode, out.decode(errors="replace"), cmd
        except subprocess.TimeoutExpired:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    out, _ = p.communicate(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    out = b""
            return 124, out.decode(errors="replace"), cmd


def has_model_mode(runner):
    rc, out, _ = runner.run(1, ["--help"])
    return "--model" in out, out


def check_perf_lines(out, np_):
    need = [r"^prefill: [0-9.eE+]+ tokens/s", r"^decode: [0-9.eE+]+ tokens/s",
            r"^runtime share of a decode step: [0-9.eE+]+%", r"^kv cache per rank: [0-9.eE+]+ MiB",
            r"^weights per rank: [0-9.eE+]+ MiB",
            r"^peak rss per rank \(MiB\):" + r"\s+[0-9.]+" * np_ + r"\s*$"]
    return [n for n in need if not re.search(n, out, re.M)]


def compare(name, ref_toks, ref_logits, got_toks, got_logits, tol):
    """(ok, message)."""
    if len(got_toks) != len(ref_toks):
        return False, f"{len(got_toks)} generated: lines, want {len(ref_toks)}"
    if got_logits.shape != ref_logits.shape or got_logits.dtype != np.float32:
        return False, f"logits {got_logits.dtype}{got_logits.shape}, want float32{ref_logits.shape}"
    scale = max(1.0, float(np.abs(ref_logits).max()))
    bound = tol * scale
    worst, notes = 0.0, []
    for b, (rt, gt) in enumerate(zip(ref_toks, got_toks)):
        if len(gt) != len(rt):
            return False, f"prompt {b}: {len(gt)} tokens, want {len(rt)}"
        n = len(rt)
        for i, (r, g) in enumerate(zip(rt, gt)):
            if r != g:
                row = ref_logits[b, i]
                gap = float(row[r] - row[g])
                if gap > bound:
                    return False, (f"prompt {b} token {i}: disco {g}, reference {r} (reference "
                                   f"logits {row[r]:.6f} vs {row[g]:.6f}: not a near tie)\n"
                                   f"  reference {rt}\n  disco     {gt}")
                n = i + 1
                notes.append(f"prompt {b}: near tie at token {i} (reference logit gap {gap:.2e} "
                             f"<= {bound:.2e}), {n} of {len(rt)} tokens compared")
                break
        err = float(np.abs(got_logits[b, :n] - ref_logits[b, :n]).max())
        worst = max(worst, err)
        if err > bound:
            i = int(np.argmax(np.abs(got_logits[b, :n] - ref_logits[b, :n]).max(axis=-1)))
            return False, (f"prompt {b}: logits differ by {err:.3e} > {bound:.3e} "
                           f"(= {tol} * {scale:.3f}), worst at token {i}")
    return True, (f"max |logit error| {worst:.2e} <= {bound:.2e}" +
                  "".join("; " + s for s in notes))


def run_case(runner, work, name, np_, dtype):
    spec, lengths, extra = CASES[name]
    d = os.path.join(work, name)
    mc.make_checkpoint(d, max_position_embeddings=128, **spec)
    prompts = prompts_for(spec, lengths)
    ref_toks, ref_logits = ref.generate(d, prompts, NEW_TOKENS, dtype)
    dump = os.path.join(work, name + ".npy")
    args = ["--model", d]
    for p in prompts:
        args += ["--prompt", ",".join(map(str, p))]
    args += ["--max-new-tokens", str(NEW_TOKENS), "--dtype", dtype, "--dump-logits", dump] + extra
    rc, out, cmd = runner.run(np_, args)
    if rc != 0:
        return False, f"exit {rc}{' (timeout)' if rc == 124 else ''}: {' '.join(cmd)}\n{out}"
    got = [[int(t) for t in m.split()] for m in re.findall(r"^generated:(.*)$", out, re.M)]
    if not os.path.exists(dump):
        return False, f"no {dump} written\n{out}"
    got_logits = np.load(dump)
    ok, msg = compare(name, ref_toks, ref_logits, got, got_logits,
                      1e-4 if dtype == "float32" else 5e-2)
    if not ok:
        return False, msg + "\n" + out
    missing = check_perf_lines(out, np_)
    if missing:
        return False, f"output lacks lines matching {missing}\n{out}"
    return True, msg


def shape_re(a, b):
    return re.compile(rf"(?<![0-9]){a}\D{{1,4}}{b}(?![0-9])")


def run_errors(runner, work, np_, dtype):
    """[(ok, message)] for the broken checkpoints."""
    base = dict(hidden=128, layers=2, heads=8, kv_heads=4, ffn=256, vocab=512, seed=21)
    cases = [
        ("wrong-shape", base, ["model.layers.0.self_attn.q_proj.weight", shape_re(128, 136),
                               shape_re(128, 128)]),
        ("missing", base, ["model.layers.1.mlp.down_proj.weight"]),
        ("truncated", base, [re.compile(r"model\.safetensors|model\.[a-z_]+\.|lm_head\.weight")]),
    ]
    if np_ > 1:
        heads = np_ + 1  # not divisible by np_
        spec = dict(hidden=16 * heads, layers=1, heads=heads, kv_heads=1, ffn=64 * np_,
                    vocab=64 * np_, seed=22)
        cases.append(("heads-not-divisible", spec,
                      [re.compile(r"num_attention_heads|num_key_value_heads")]))
    results = []
    for mode, spec, needles in cases:
        d = os.path.join(work, "bad-" + mode)
        mc.make_checkpoint(d, break_mode=mode if mode in mc.BREAKS else None, **spec)
        rc, out, cmd = runner.run(np_, ["--model", d, "--prompt", "1,2,3", "--max-new-tokens", "4",
                                        "--dtype", dtype])
        if rc == 0 or rc == 124:
            results.append((False, f"{mode}: exit {rc}{' (hang, killed)' if rc == 124 else ''}, "
                                   f"want a failure: {' '.join(cmd)}\n{out}"))
            continue
        lacking = [n if isinstance(n, str) else n.pattern for n in needles
                   if (n not in out if isinstance(n, str) else not n.search(out))]
        if lacking:
            results.append((False, f"{mode}: exit {rc} but the message lacks {lacking}:\n{out}"))
        else:
            n = needles[0]
            line = next((ln for ln in out.splitlines()
                         if (n in ln if isinstance(n, str) else n.search(ln))), "")
            results.append((True, f"{mode}: exit {rc}: {line.strip()}"))
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--demo", required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--mpiexec-flag", action="append", default=[])
    p.add_argument("--demo-flag", action="append", default=[])
    p.add_argument("--case", action="append", choices=list(CASES))
    p.add_argument("--no-errors", action="store_true", help="skip the broken checkpoints")
    p.add_argument("--timeout", type=float, default=TIMEOUT,
                   help="seconds a disco-demo run may take (default 120)")
    p.add_argument("--keep", help="work in this directory and keep it")
    a = p.parse_args(argv)
    runner = Runner(a)
    ok, help_out = has_model_mode(runner)
    if not ok:
        print("SKIP: disco-demo has no Llama mode (its --help lists no --model):")
        print(help_out)
        return 77
    work = a.keep or tempfile.mkdtemp(prefix="llama-check-")
    os.makedirs(work, exist_ok=True)
    failed = 0
    try:
        for name in a.case or list(CASES):
            good, msg = run_case(runner, work, name, a.np, a.dtype)
            print(f"{'ok' if good else 'FAIL'}: {name} at {a.np} rank(s), {a.dtype}: {msg}",
                  flush=True)
            failed += not good
        if not a.no_errors:
            for good, msg in run_errors(runner, work, a.np, a.dtype):
                print(f"{'ok' if good else 'FAIL'}: broken checkpoint {msg}", flush=True)
                failed += not good
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("PASS" if not failed else f"FAIL: {failed} check(s) failed")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
