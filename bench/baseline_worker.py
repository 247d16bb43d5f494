"""One baseline at one thread count, in a process of its own (bench/decode_bench.py starts it):
the thread settings go into the environment before torch, numpy or llama.cpp load, so that each
thread count gets one pool of its own size and no second pool spins beside it.

    python bench/baseline_worker.py torch|llamacpp --model DIR --threads N --dtype D
        --max-batch B --max-len T [--gguf FILE] [--pages 4k|2m]

--pages 2m (decode_bench.py's default) puts the weights in 2 MiB pages, as disco's are: glibc's
malloc asks for transparent huge pages (machine.with_huge_pages: GLIBC_TUNABLES, read when a
process starts, so the worker starts itself again with it), and llama.cpp reads the GGUF into
memory rather than mapping the file (the page cache has 4 KiB pages). On this project's Zen 4
both baselines decode faster so (docs/performance.md).

Prints one JSON line when ready ({"ready": true, "info": ...}); then reads one JSON request a
line ({"prompts": [[ids]...], "new_tokens": N}) and answers each with one JSON line
({"tokens": ..., "prefill_s": ..., "decode_s": ..., "os_threads": ...}) until its input ends.
"""

import argparse
import json
import os
import sys


def set_thread_env(kind, threads):
    """Before any library loads. torch: OpenMP and MKL at N threads, passive waiting (a waiting
    OpenMP thread sleeps rather than spins: nothing else must lose its core to it), and numpy's
    OpenBLAS, a second pool in the same process, at 1. llama.cpp: its own pool of n_threads;
    numpy's OpenBLAS at 1 too."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if kind == "torch":
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)


def open_torch(a):
    import torch
    import checkpoint
    import torch_llama
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    cfg, W = checkpoint.load(a.model, bf16_round=a.dtype == "bfloat16")
    m = torch_llama.TorchLlama(cfg, W, a.max_batch, a.max_len, compute=a.dtype)
    choice = {b: m.tune(b) for b in sorted({1, a.max_batch})}
    info = (f"torch {torch.__version__}, MKL {torch.backends.mkl.is_available()}, "
            f"{torch.get_num_threads()} threads, decode products by "
            + ", ".join(f"B={b}: {c}" for b, c in choice.items()))
    return m, info


def huge_mib():
    """MiB of this process's anonymous memory in huge pages (0 when unknown)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def open_llamacpp(a):
    import llama_cpp
    import llamacpp_llama
    m = llamacpp_llama.LlamaCpp(a.gguf, a.threads, a.max_batch, a.max_len,
                                use_mmap=a.pages == "4k", kv=a.kv)
    info = (f"llama-cpp-python {llama_cpp.__version__}, {a.threads} threads, "
            f"{os.path.basename(a.gguf)}, {a.kv} kv cache; "
            + llama_cpp.llama_print_system_info().decode(errors="replace").strip())
    return m, info


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["torch", "llamacpp"])
    p.add_argument("--model", required=True)
    p.add_argument("--gguf")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-batch", type=int, required=True)
    p.add_argument("--max-len", type=int, required=True)
    p.add_argument("--pages", choices=["4k", "2m"], default="4k")
    p.add_argument("--kv", choices=["f32", "f16"], default="f32", help="llama.cpp's KV cache")
    a = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import machine
    env = machine.with_huge_pages(os.environ)
    if a.pages == "2m" and env.get("GLIBC_TUNABLES") != os.environ.get("GLIBC_TUNABLES"):
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    set_thread_env(a.kind, a.threads)
    # The answers go to the original stdout; anything a library prints there goes to stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    model, info = (open_torch if a.kind == "torch" else open_llamacpp)(a)
    info += f"; pages {a.pages} ({huge_mib():.0f} MiB in huge pages)"
    print(json.dumps({"ready": True, "info": info}), file=answers, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        toks, _, tp, td = model.generate(req["prompts"], req["new_tokens"])
        print(json.dumps({"tokens": toks, "prefill_s": tp, "decode_s": td,
                          "os_threads": len(os.listdir("/proc/self/task"))}), file=answers,
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
