"""What the machine can do, measured before the benchmark: memory bandwidth at 1 and 2 threads
(a STREAM-like read and triad, a C program compiled here with -O3 -march=native: numpy's
temporaries would measure numpy; in 4 KiB and in 2 MiB pages, the faster being the limit), sgemm
peak at 1 and 2 threads (torch's BLAS where `python` has torch, else numpy's), a two-spinner
check that 2 threads get 2 cores, and the load average.

    python3 bench/machine.py [--threads 1,2] [--json FILE]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STREAM_C = os.path.join(HERE, "stream.c")


# glibc's malloc asking for transparent huge pages (read when a process starts): the baselines'
# weights in 2 MiB pages, as disco's are (docs/performance.md).
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"


def with_huge_pages(env):
    """`env` (a dict) with HUGE_PAGES_TUNABLE added to its GLIBC_TUNABLES."""
    have = env.get("GLIBC_TUNABLES")
    if have and HUGE_PAGES_TUNABLE in have.split(":"):
        return dict(env)
    return dict(env, GLIBC_TUNABLES=":".join(t for t in (have, HUGE_PAGES_TUNABLE) if t))


def compile_stream(build_dir):
    """The path of bench/stream.c built with -O3 -march=native -fopenmp (cached in build_dir)."""
    exe = os.path.join(build_dir, "disco-bench-stream")
    if os.path.exists(exe) and os.path.getmtime(exe) >= os.path.getmtime(STREAM_C):
        return exe
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no C compiler (cc): needed for the bandwidth kernel (bench/stream.c)")
    os.makedirs(build_dir, exist_ok=True)
    cmd = [cc, "-O3", "-march=native", "-fopenmp", "-o", exe + ".tmp", STREAM_C]
    subprocess.run(cmd, check=True)
    os.replace(exe + ".tmp", exe)
    return exe


def _stream(exe, mib, arg, threads, procs, window=0.5):
    """One run of the stream kernel: `procs` processes of `threads` OpenMP threads each, their
    reads and triads summed; above one thread, all read (then write) within one window of
    `window` seconds that starts once each process has its arrays. (The best passes of processes
    started together, summed, overstated what the cores read side by side: 84 GB/s against 51
    read together, on the Zen 5 host of 2026-12-05; and both processes' threads sat on CPU 0.)"""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread",
               OMP_WAIT_POLICY="PASSIVE")
    lead = 0.5 + 1.5 * mib / 1024  # seconds for every process to allocate and touch its arrays
    for _ in range(4):
        sync = [f"{time.time() + lead:.3f}", str(window)] if procs * threads > 1 else []
        # Above one process, process i on CPU i (OMP_PROC_BIND alone put every process's one
        # thread on the first CPU, where they took turns).
        ps = [subprocess.Popen([exe, str(mib), arg] + sync, stdout=subprocess.PIPE, text=True,
                               env=dict(env, OMP_PLACES=f"{{{i % (os.cpu_count() or 1)}}}")
                               if procs > 1 else env) for i in range(procs)]
        total = {"read": 0.0, "triad": 0.0, "huge_mib": 0.0, "late": 0.0}
        for p in ps:
            try:
                out, _ = p.communicate(timeout=lead + 2 * window + 120)
            except subprocess.TimeoutExpired:
                for q in ps:
                    q.kill()
                raise SystemExit(f"{exe} did not finish in {lead + 2 * window + 120:.0f} s")
            if p.returncode != 0:
                raise SystemExit(f"{exe} failed (exit {p.returncode})")
            for k, v in (line.split() for line in out.splitlines() if line.strip()):
                total[k] += float(v)
        if not total.pop("late"):
            return total
        lead *= 2
    raise SystemExit(f"{exe}: {procs} processes could not start their window together")


def bandwidth(exe, threads, mib):
    """{'read': GB/s, 'triad': GB/s, 'read_4k', 'read_2m', 'huge_mib'} of the stream kernel at
    `threads` threads: read and triad are the best of its runs in 4 KiB and in 2 MiB pages (where
    the kernel gives them: huge_mib of its arrays were), 3 each (the host's other tenants make
    single runs vary), and above one thread both as one process of n OpenMP threads and as n
    processes of one thread side by side (disco's ranks), each in one shared window (_stream)."""
    runs = {}
    for pages, arg in (("4k", "small"), ("2m", "huge")):
        shapes = [(threads, 1)] + ([(1, threads)] if threads > 1 else [])
        for t, procs in shapes * 3:
            r = _stream(exe, mib, arg, t, procs)
            if pages not in runs or r["read"] > runs[pages]["read"]:
                runs[pages] = r
    best = max(runs.values(), key=lambda r: r["read"])
    return {"read": best["read"], "triad": best["triad"], "read_4k": runs["4k"]["read"],
            "read_2m": runs["2m"]["read"], "huge_mib": runs["2m"]["huge_mib"]}


def read_beside(exe, n, mib):
    """GB/s that n one-thread processes of the stream kernel read side by side now, in 2 MiB
    pages (one window, _stream): the bound of a run of n ranks or threads in the same minute. The
    host's other tenants move it: on the Zen 5 host of 2026-12-06 two cores read 53 GB/s for
    minutes on end, where the best of bandwidth()'s runs had caught 78."""
    return _stream(exe, mib, "huge", 1, n)["read"]


def sgemm_peak(threads, python=sys.executable, n=1024, reps=5):
    """GFLOP/s of an n x n x n float32 product, best of `reps`, at `threads` threads (run in a
    child so that each thread count gets its own BLAS pool, set before the library starts)."""
    code = f"""
import time
try:
    import torch
    torch.set_num_threads({threads})
    a = torch.rand({n}, {n}); b = torch.rand({n}, {n}); mm = torch.matmul; who = "torch"
except ImportError:
    import numpy as np
    a = np.random.rand({n}, {n}).astype("float32"); b = a.copy(); mm = np.matmul; who = "numpy"
mm(a, b)
best = 1e9
for _ in range({reps}):
    t = time.perf_counter(); mm(a, b); best = min(best, time.perf_counter() - t)
print(who, 2 * {n}**3 / best / 1e9)
"""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run([python, "-c", code], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout.split()
    return {"by": out[0], "gflops": float(out[1])}


def spinners(seconds=1.0):
    """Two busy processes at once: the CPU time each got over the wall time (about 1.0 each when
    the machine has 2 free cores; about 0.5 when the 2 vCPUs share one core or others load it)."""
    code = ("import time,sys\nt=time.perf_counter();c=time.process_time()\n"
            f"while time.perf_counter()-t<{seconds}: pass\n"
            "print((time.process_time()-c)/(time.perf_counter()-t))")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    return [float(p.communicate()[0]) for p in procs]


def measure(threads, build_dir, mib=256, python=sys.executable):
    """Everything above, as one dict; prints one line per figure."""
    m = {"cpu": cpu_name(), "cpus": os.cpu_count(), "loadavg_before": os.getloadavg()[0]}
    exe = compile_stream(build_dir)
    m["bandwidth"], m["sgemm"] = {}, {}
    for t in threads:
        m["bandwidth"][t] = bandwidth(exe, t, mib)
        m["sgemm"][t] = sgemm_peak(t, python)
    m["spinners"] = spinners()
    m["loadavg"] = os.getloadavg()[0]
    m["busy"] = busy_reasons(m)
    for t in threads:
        b, s = m["bandwidth"][t], m["sgemm"][t]
        print(f"machine: {t} thread(s): read {b['read']:.1f} GB/s (4 KiB pages {b['read_4k']:.1f}, "
              f"2 MiB pages {b['read_2m']:.1f}: {b['huge_mib']:.0f} MiB given), triad "
              f"{b['triad']:.1f} GB/s, sgemm {s['gflops']:.1f} GFLOP/s ({s['by']})", flush=True)
    print(f"machine: {m['cpu']}, {m['cpus']} CPUs; two spinners got "
          + " and ".join(f"{x:.2f}" for x in m["spinners"]) + f" of a core; load average "
          f"{m['loadavg']:.2f}" + ("" if not m["busy"] else "; LOADED: " + "; ".join(m["busy"])),
          flush=True)
    return m


def busy_reasons(m):
    """Why the figures of this machine are not to be trusted now (empty: they are)."""
    why = []
    if min(m["spinners"]) < 0.85:
        why.append("two busy threads did not each get a core (%s)"
                   % ", ".join(f"{x:.2f}" for x in m["spinners"]))
    # The load average before this program started anything: later ones count its own runs.
    load = m.get("loadavg_before", 0.0)
    if load > 0.5 * (m["cpus"] or 1):
        why.append(f"load average {load:.2f} on {m['cpus']} CPUs before the run")
    return why


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--mib", type=int, default=256, help="the stream arrays' size, each")
    p.add_argument("--build-dir", default=os.path.join(tempfile.gettempdir(), "disco-bench"))
    p.add_argument("--json")
    a = p.parse_args(argv)
    m = measure([int(t) for t in a.threads.split(",")], a.build_dir, a.mib)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(m, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
