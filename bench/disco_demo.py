"""disco as a benchmark baseline: disco-demo --model DIR under mpirun, its figures parsed from
the lines it prints (docs/demo.md, "Output"): `prefill: X tokens/s`, `decode: Y tokens/s`,
`runtime share of a decode step: Z%`, the memory lines and one `generated:` line per prompt.
Each run is one process per rank, one compute thread per rank (OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = 1), so that N ranks use N cores, as a baseline at N
threads does."""

import os
import re
import subprocess

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
        "kernels": (re.search(r"^kernels: (.*)$", out, re.M) or [None, None])[1],
    }


def demo_env(one_thread=True, kernels=None):
    env = dict(os.environ)
    if kernels:  # DISCO_CPU_KERNELS (models/llama/kernels.h): auto, avx2, avx512, avx512bf16
        env["DISCO_CPU_KERNELS"] = kernels
    if one_thread:  # one compute thread per rank, as a baseline at n threads uses n cores
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = "1"
    if os.geteuid() == 0:  # Open MPI refuses root without consent
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def run_demo(demo, mpiexec, ranks, model_dir, prompts, new_tokens, dtype, mpiexec_flags=(),
             demo_flags=(), timeout=900, one_thread=True, kernels=None):
    """disco-demo's figures and tokens (parse_demo's dict); SystemExit with its output when it
    fails or leaves a figure out."""
    cmd = [mpiexec, "-n", str(ranks)] + list(mpiexec_flags) + [demo, "--model", model_dir]
    for p in prompts:
        cmd += ["--prompt", ",".join(map(str, p))]
    cmd += ["--max-new-tokens", str(new_tokens), "--dtype", dtype] + list(demo_flags)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", env=demo_env(one_thread, kernels), timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"disco-demo failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    r = parse_demo(p.stdout)
    missing = [k for k in ("prefill", "decode", "share") if r[k] is None]
    if missing:
        raise SystemExit(f"disco-demo printed no {missing} line(s): {' '.join(cmd)}\n{p.stdout}")
    return r
