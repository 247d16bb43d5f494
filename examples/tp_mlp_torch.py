"""A tensor-parallel MLP whose worker functions are written in PyTorch.

    mpirun -n 2 python3 examples/tp_mlp_torch.py [--dtype float32|bfloat16] [--layers 2]
    python3 -m disco -n 2 examples/tp_mlp_torch.py            (the same, launched for you)
    python3 examples/tp_mlp_torch.py --process 2              (no mpirun: disco.ProcessSession)

L Megatron-style blocks over T tokens of width H, the ffn width F split over N workers:

    h = gelu(x W1 + b1)         W1 (H, F) split by columns: each worker holds F/N of them
    y = allreduce_sum(h W2)     W2 (F, H) split by rows: each worker's partial product
    x = layernorm(x + y)        replicated

The worker functions are registered with @disco.register_func(name, tensors="torch"): they get
torch.Tensors that share the registers' memory (bfloat16 as torch.bfloat16) and return torch
tensors. Each worker makes its own shards from the seed; the controller recomputes the stack with
PyTorch alone and compares (float32: 1e-4 absolute; bfloat16: 5e-2 relative to the largest value).
"""

import argparse
import sys

import numpy as np
import torch

import disco

# ---- worker functions (every rank imports this file, so they exist on every worker) -----------


def full_weights(hidden, ffn, layer, seed):
    g = torch.Generator().manual_seed(seed * 1000 + layer)
    w1 = (torch.rand(hidden, ffn, generator=g) * 2 - 1) / hidden ** 0.5
    b1 = (torch.rand(ffn, generator=g) * 2 - 1) * 0.02
    w2 = (torch.rand(ffn, hidden, generator=g) * 2 - 1) / ffn ** 0.5
    return w1, b1, w2


@disco.register_func("tp_mlp_torch.init_shards", tensors="torch")
def init_shards(hidden, ffn, layer, seed, dtype):
    """This worker's W1 columns, b1 part and W2 rows of `layer`, in `dtype`."""
    w = disco.this_worker()
    part = ffn // w.num_workers
    cols = slice(w.worker_id * part, (w.worker_id + 1) * part)
    w1, b1, w2 = full_weights(hidden, ffn, layer, seed)
    dt = getattr(torch, dtype)
    return (w1[:, cols].contiguous().to(dt), b1[cols].contiguous().to(dt),
            w2[cols, :].contiguous().to(dt))


@disco.register_func("tp_mlp_torch.up_down", tensors="torch")
def up_down(x, shards, partial):
    """partial = gelu(x W1 + b1) W2 for this worker's shards, written into the register."""
    w1, b1, w2 = shards
    with torch.no_grad():
        h = torch.nn.functional.gelu(x.float() @ w1.float() + b1.float())
        partial.copy_(h @ w2.float())


@disco.register_func("tp_mlp_torch.residual_norm", tensors="torch")
def residual_norm(x, y):
    """x = layernorm(x + y), in place (y: the allreduced partial products)."""
    with torch.no_grad():
        z = x.float() + y.float()
        x.copy_(torch.nn.functional.layer_norm(z, z.shape[-1:]))


@disco.register_func("tp_mlp_torch.tokens", tensors="torch")
def tokens(count, hidden, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(count, hidden, generator=g).to(getattr(torch, dtype))


# ---- the controller ------------------------------------------------------------------------


def reference(a):
    dt = getattr(torch, a.dtype)
    g = torch.Generator().manual_seed(a.seed)
    x = torch.randn(a.tokens, a.hidden, generator=g).to(dt)
    with torch.no_grad():
        for layer in range(a.layers):
            w1, b1, w2 = (t.to(dt) for t in full_weights(a.hidden, a.ffn, layer, a.seed))
            h = torch.nn.functional.gelu(x.float() @ w1.float() + b1.float())
            y = (h @ w2.float()).to(dt)  # the allreduce adds in the tensors' dtype
            x = torch.nn.functional.layer_norm(x.float() + y.float(), (a.hidden,)).to(dt)
    return x.float().numpy()


def run(sess, a):
    n = sess.num_workers
    if a.ffn % n:
        raise ValueError("--ffn %d cannot be split over %d workers" % (a.ffn, n))
    print("tp_mlp_torch.py: %d workers, %d layers, hidden %d, ffn %d, %d tokens, %s"
          % (n, a.layers, a.hidden, a.ffn, a.tokens, a.dtype), flush=True)
    sess.init_ccl("mpi")
    init = sess.get_global_func("tp_mlp_torch.init_shards")
    up_down_f = sess.get_global_func("tp_mlp_torch.up_down")
    norm = sess.get_global_func("tp_mlp_torch.residual_norm")
    shards = [init(a.hidden, a.ffn, layer, a.seed, a.dtype) for layer in range(a.layers)]
    x = sess.get_global_func("tp_mlp_torch.tokens")(a.tokens, a.hidden, a.seed, a.dtype)
    partial = sess.empty((a.tokens, a.hidden), a.dtype)
    for layer in range(a.layers):
        up_down_f(x, shards[layer], partial)
        sess.allreduce(partial, partial)
        norm(x, partial)
    got = x.debug_get_from_remote(0)
    if a.dtype == "bfloat16":  # numpy sees the bits
        got = (np.asarray(got).astype(np.uint32) << 16).view(np.float32)
    want = reference(a)
    err = float(np.max(np.abs(got - want)))
    scale = float(np.max(np.abs(want)))
    ok = err <= 1e-4 if a.dtype == "float32" else err <= 5e-2 * scale
    print("tp_mlp_torch.py: max |disco - torch| = %.3g (largest value %.3g): %s"
          % (err, scale, "OK" if ok else "MISMATCH"), flush=True)
    return 0 if ok else 1


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--process", type=int, default=0, metavar="N",
                   help="start N workers with disco.ProcessSession instead of running in a job")
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    if args.process:
        import os
        here = os.path.dirname(os.path.abspath(__file__))
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        with disco.ProcessSession(args.process, env={"PYTHONPATH": path}) as s:
            s.import_python_module("tp_mlp_torch")
            sys.exit(run(s, args))
    sys.exit(disco.main(lambda s: run(s, args)))
