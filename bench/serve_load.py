#!/usr/bin/env python3
"""disco-llm-server beside llama.cpp's own server (llama-server) under load, on the same weights.

Both servers run the benchmark's random checkpoint (bench/checkpoint.py; its GGUF, float32, for
llama.cpp, with the stand-in vocabulary of bench/gguf_export.py, which a tokenizer.json of the same
tokens mirrors for disco). Requests are drawn from a fixed seed: prompts of token ids and output
lengths, greedy, streamed; every request runs to its max_tokens (ignore_eos, both servers). At each
concurrency (clients sending back to back) the servers take turns, level by level and repeat by
repeat (interleaved), and the table gives medians over repeats: output tokens/s, time to first
token and inter-token latency p50/p99. disco's greedy tokens of every request are compared with
the same request's at concurrency 1 (alone): "same" counts those equal (the goal: all).

  serve_load.py [--model 125m|demo|tiny] [--np 2] [--concurrency 1,4,16,64] [--repeats 3]
                [--llama-server PATH] [--max-batch 16] [--out results.json]

disco: mpiexec -n NP disco-llm-server --max-batch B (one rank per core); llama.cpp: llama-server
-t NP -np B --cont-batching (NP threads, B slots), built natively from the llama.cpp that
llama-cpp-python's source distribution carries (bench/venv.sh's disco_bench_llama_server).
Left out when --llama-server is not given or not there (said so). Say when the machine was busy:
the figures of a loaded machine are not the servers'.
"""
import argparse
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoint  # noqa: E402
import machine  # noqa: E402

TIMEOUT = 600  # against a hang only
STALL = 30  # a request with no byte for this long: the server is stalled (said, not waited on)


def add_tokenizer(model_dir, vocab):
    """tokenizer.json with bench/gguf_export.py's stand-in tokens (<unk>, <s>, </s>, the 256 byte
    tokens, t259...): disco-llm-server needs one; the prompts are ids, the text is not compared."""
    path = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(path):
        return
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"t{i}" for i in range(len(tokens), vocab)]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": None, "post_processor": None,
           "decoder": {"type": "ByteFallback"},
           "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True,
                     "vocab": {t: i for i, t in enumerate(tokens)}, "merges": []}}
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(tok, f)
    os.replace(path + ".tmp", path)


def workload(n, seed, vocab, prompt_range, out_range):
    r = random.Random(seed)
    return [([r.randrange(259, vocab) for _ in range(r.randint(*prompt_range))],
             r.randint(*out_range)) for _ in range(n)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process: disco's (kind "disco") or llama.cpp's ("llama.cpp")."""

    def __init__(self, kind, cmd, port, env=None):
        self.kind, self.port = kind, port
        # Its output to a file, not a pipe nobody reads: llama-server logs every request, and a
        # full pipe would stop it.
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     env=env)
        self.wait_ready()

    def wait_ready(self):
        for _ in range(TIMEOUT * 10):
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"{self.kind} ended (exit {self.proc.returncode}):\n"
                                 f"{self.log.read()[-4000:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"{self.kind} did not answer /health")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def request(self, prompt, max_tokens):
        """Streams one greedy request: (ttft s, inter-token gaps s, token ids, end time)."""
        if self.kind == "disco":
            path, body = "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                              "temperature": 0, "stream": True,
                                              "return_token_ids": True, "ignore_eos": True}
        else:  # llama-server's own endpoint returns the ids
            path, body = "/completion", {"prompt": prompt, "n_predict": max_tokens,
                                         "temperature": 0, "top_k": 1, "stream": True,
                                         "ignore_eos": True, "return_tokens": True,
                                         "cache_prompt": False}
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=STALL)
        t0 = time.perf_counter()
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise SystemExit(f"{self.kind}: HTTP {r.status}: {r.read()[:300]!r}")
        ids, arrivals, counted = [], [], 0
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            j = json.loads(line[6:])
            now = time.perf_counter()
            if self.kind == "disco":
                got = j["choices"][0].get("token_ids", [])
                ids += got
                arrivals += [now] * len(got)
            else:
                # llama-server's chunks can leave a token out of "tokens" (one it held back as
                # part of a character); tokens_predicted counts them all.
                n = j.get("tokens_predicted", counted) - counted
                counted += n
                ids += j.get("tokens", [])
                arrivals += [now] * n
        c.close()
        if len(arrivals) != max_tokens:
            raise SystemExit(f"{self.kind}: {len(arrivals)} tokens, asked for {max_tokens}")
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
        return arrivals[0] - t0, gaps, ids, arrivals[-1]


def run_level(server, reqs, conc):
    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as pool:
        out = list(pool.map(lambda rq: server.request(*rq), reqs))
    wall = max(o[3] for o in out) - t0
    ttft = sorted(o[0] for o in out)
    gaps = sorted(g for o in out for g in o[1])

    def q(xs, p):
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")

    return {"tok_s": sum(len(o[1]) + 1 for o in out) / wall, "ttft_p50": q(ttft, .5),
            "ttft_p99": q(ttft, .99), "itl_p50": q(gaps, .5), "itl_p99": q(gaps, .99),
            "ids": [o[2] for o in out]}


def start_servers(a, model, gguf, max_len, with_llama=True):
    servers = []
    mpiexec = shutil.which("mpiexec")
    flags = ["--oversubscribe"] if "Open MPI" in subprocess.run(
        [mpiexec, "--version"], capture_output=True, text=True).stdout else []
    port = free_port()
    servers.append(Server("disco", [mpiexec, "-n", str(a.np), *flags, a.server, "--model", model,
                                    "--port", str(port), "--max-batch", str(a.max_batch),
                                    "--max-len", str(max_len)], port))
    if not with_llama:
        pass
    elif a.llama_server and os.path.exists(a.llama_server):
        port = free_port()
        servers.append(Server("llama.cpp", [a.llama_server, "-m", gguf, "--host", "127.0.0.1",
                                            "--port", str(port), "-t", str(a.np), "-tb",
                                            str(a.np), "-np", str(a.max_batch), "-c",
                                            str(a.max_batch * (max_len + 16)), "--cont-batching",
                                            "--no-webui", "--load-mode", "none"], port,
                                  # Its weights in 2 MiB pages, as disco's (docs/performance.md):
                                  # read into memory, not mapped, where malloc asks for them.
                                  env=machine.with_huge_pages(os.environ)))
    else:
        print(f"llama.cpp: left out (no llama-server at {a.llama_server!r}; "
              "bench/venv.sh's disco_bench_llama_server builds it)")
    return servers


def table(rows, levels, kinds, same):
    print(f"{'server':10} {'conc':>4} {'tok/s':>8} {'TTFT p50':>9} {'p99':>8} {'ITL p50':>8} "
          f"{'p99':>8}  same as alone")
    for c in levels:
        for k in kinds:
            rs = [r for r in rows if r["conc"] == c and r["server"] == k]
            if not rs:
                print(f"{k:10} {c:>4}  stalled (no answer in {STALL} s)")
                continue
            m = {f: statistics.median(r[f] for r in rs)
                 for f in ("tok_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99")}
            s = f"{same[c][0]}/{same[c][1]}" if k == "disco" else "-"
            print(f"{k:10} {c:>4} {m['tok_s']:8.1f} {m['ttft_p50'] * 1e3:7.0f}ms "
                  f"{m['ttft_p99'] * 1e3:6.0f}ms {m['itl_p50'] * 1e3:6.1f}ms "
                  f"{m['itl_p99'] * 1e3:6.1f}ms  {s}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(checkpoint.MODELS), default="125m")
    p.add_argument("--cache", default=os.path.expanduser("~/.cache/disco-bench"))
    p.add_argument("--server", default=os.path.join(HERE, "..", "build", "src", "tools",
                                                    "disco-llm-server"))
    p.add_argument("--llama-server", default="")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--concurrency", default="1,4,16,64")
    p.add_argument("--requests", type=int, default=0, help="per level (0: 2 x concurrency, >= 8)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompt-tokens", default="8,96")
    p.add_argument("--output-tokens", default="16,96")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="")
    p.add_argument("--stream-mib", type=int, default=256, help="the bandwidth test's arrays")
    a = p.parse_args(argv)
    levels = [int(x) for x in a.concurrency.split(",")]
    pr, orng = (tuple(int(x) for x in s.split(",")) for s in (a.prompt_tokens, a.output_tokens))
    sizes = checkpoint.MODELS[a.model]
    model = checkpoint.model_dir(a.cache, a.model, sizes)
    add_tokenizer(model, sizes["vocab"])
    import gguf_export  # the gguf package: bench/venv.sh's environment
    gguf = gguf_export.gguf_for(model, "f32") if a.llama_server else ""
    max_len = pr[1] + orng[1]
    busy = machine.measure(sorted({1, a.np}), os.path.join(HERE, "..", "build"),
                           a.stream_mib)["busy"]
    print("machine: " + ("BUSY: " + "; ".join(busy) + " (figures are not the servers')"
                         if busy else "quiet"))
    servers = start_servers(a, model, gguf, max_len)
    rows, ids, stalled = [], {}, set()
    try:
        for s in servers:  # warm up: one request each
            s.request([300, 301, 302], 4)
        for rep in range(a.repeats):
            for c in levels:
                reqs = workload(a.requests or max(2 * c, 8), a.seed + c, sizes["vocab"], pr, orng)
                for s in servers:
                    if s.kind in stalled:
                        continue
                    try:
                        r = run_level(s, reqs, c)
                    except OSError as e:  # socket.timeout included
                        print(f"  {s.kind} stalled at concurrency {c} ({e}): left out from here",
                              flush=True)
                        stalled.add(s.kind)
                        continue
                    if s.kind == "disco":
                        ids.setdefault(c, []).append(r["ids"])
                    rows.append(dict({k: v for k, v in r.items() if k != "ids"}, server=s.kind,
                                     conc=c, repeat=rep))
                    print(f"  repeat {rep} conc {c:>3} {s.kind:9} {r['tok_s']:8.1f} tok/s",
                          flush=True)
    finally:
        for s in servers:
            s.stop()
    # The same requests alone: every level's requests at concurrency 1 with disco.
    same = {}
    disco = start_servers(a, model, "", max_len, with_llama=False)[0]
    try:
        for c in levels:
            reqs = workload(a.requests or max(2 * c, 8), a.seed + c, sizes["vocab"], pr, orng)
            alone = [disco.request(*rq)[2] for rq in reqs]
            runs = ids[c]
            same[c] = (sum(run[i] == alone[i] for run in runs for i in range(len(reqs))),
                       len(runs) * len(reqs))
    finally:
        disco.stop()
    print(f"\n{a.model}, {a.np} rank(s)/thread(s), --max-batch {a.max_batch}, prompts "
          f"{pr[0]}-{pr[1]} tokens, outputs {orng[0]}-{orng[1]}, medians of {a.repeats}")
    table(rows, levels, [s.kind for s in servers], same)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "same": same, "busy": busy}, f, indent=1)
    return 0 if all(s[0] == s[1] for s in same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
