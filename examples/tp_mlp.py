"""The tensor-parallel MLP of disco-demo --mlp, with numpy worker functions.

    mpirun -n 4 python3 examples/tp_mlp.py [--checkpoint FILE.h5] [--dtype float32|bfloat16]
                                           [--calls]

A stack of L Megatron-style MLP blocks over T tokens of width H, as in disco-demo:

    h = gelu(x W1 + b1)         W1 (H, F) split by columns: each worker holds F/N of them
    y = allreduce_sum(h W2)     W2 (F, H) split by rows: each worker's partial product
    x = layernorm(x + y + b2)   b2, gamma (ln_g), beta (ln_b) replicated

Each worker loads only its shards of the checkpoint (session.load_tensors). With --checkpoint,
any checkpoint disco-demo wrote works (same dataset names and layout, e.g.
/tmp/disco-demo-u0-float32-h1024-f4096-l4-s1234.h5 for root); without one, the workers write one from the seed
first (session.save_tensors). The controller then recomputes the whole stack alone with numpy
from the checkpoint (loaded whole through disco) and compares, like disco-demo.

numpy has no bfloat16: in bfloat16 runs the worker functions see the tensors' raw bits (uint16),
compute in float32 and store bfloat16 again (round to nearest even); the allreduce runs in
bfloat16, as in disco-demo.
"""

import argparse
import os
import sys
import time

import numpy as np

import disco

# ---- numerics shared by the workers and the reference ----------------------------------------


def to_f32(a, bf16):
    return (a.astype(np.uint32) << 16).view(np.float32) if bf16 else a


def store(dst, v, bf16):
    """dst[...] = v, rounding to bfloat16 (nearest even) for a bfloat16 tensor's bits."""
    if bf16:
        bits = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        dst[...] = bits.astype(np.uint16)
    else:
        dst[...] = v


def gelu(v):
    return 0.5 * v * (1.0 + np.tanh(np.float32(0.7978845608) * (v + np.float32(0.044715) * v ** 3)))


def residual_layernorm(x, y, b2, g, beta):
    z = x + y + b2
    mean = z.mean(axis=1, keepdims=True, dtype=np.float64)
    var = ((z - mean) ** 2).mean(axis=1, keepdims=True)
    return ((z - mean.astype(np.float32)) / np.sqrt(var + 1e-5).astype(np.float32)) * g + beta


# ---- worker functions (every rank runs this script, so they exist on every worker) -------------

@disco.register_func("tp_mlp.up_down")
def up_down(x, w1, b1, w2, partial, dtype):
    """partial = gelu(x W1 + b1) W2 for this worker's shards (W1 columns, W2 rows)."""
    bf16 = dtype == "bfloat16"
    h = gelu(to_f32(x, bf16) @ to_f32(w1, bf16) + to_f32(b1, bf16))
    store(partial, h @ to_f32(w2, bf16), bf16)


@disco.register_func("tp_mlp.residual_norm")
def residual_norm(x, y, b2, g, beta, dtype):
    """x = layernorm(x + y + b2) * g + beta, in place (y: the allreduced partial products)."""
    bf16 = dtype == "bfloat16"
    f = [to_f32(a, bf16) for a in (x, y, b2, g, beta)]
    store(x, residual_layernorm(*f), bf16)


@disco.register_func("tp_mlp.init_shard")
def init_shard(name, shape, axis, seed, scale, offset, dtype):
    """This worker's part of parameter `name`: the same values whatever the worker count."""
    rng = np.random.default_rng([seed, sum(name.encode()) * 1000003 + len(name)])
    full = (rng.uniform(-1.0, 1.0, size=shape) * scale + offset).astype(np.float32)
    if axis >= 0:
        w = disco.this_worker()
        full = np.split(full, w.num_workers, axis=axis)[w.worker_id]
    if dtype == "bfloat16":
        out = np.empty(full.shape, np.uint16)
        store(out, full, True)
        return disco.Tensor.from_numpy(out, "bfloat16")
    return np.ascontiguousarray(full)


def layer_params(hidden, ffn, layer):
    """(name, shape, shard axis, scale, offset) of layer `layer`, as disco-demo lays them out."""
    p = "layers/%d/" % layer
    return [(p + "w1", (hidden, ffn), 1, 1 / np.sqrt(hidden), 0.0), (p + "b1", (ffn,), 0, 0.02, 0.0),
            (p + "w2", (ffn, hidden), 0, 1 / np.sqrt(ffn), 0.0), (p + "b2", (hidden,), -1, 0.02, 0.0),
            (p + "ln_g", (hidden,), -1, 0.1, 1.0), (p + "ln_b", (hidden,), -1, 0.02, 0.0)]


# ---- the controller --------------------------------------------------------------------------


def ensure_checkpoint(sess, a):
    """The checkpoint's path (--checkpoint, else one in /tmp), written from the seed if missing."""
    path = a.checkpoint or "/tmp/disco-tp-mlp-%s-h%d-f%d-l%d-s%d.h5" % (
        a.dtype, a.hidden, a.ffn, a.layers, a.seed)
    if not os.path.exists(path):
        t0 = time.perf_counter()
        init = sess.get_global_func("tp_mlp.init_shard")
        shards = {}
        for layer in range(a.layers):
            for name, shape, axis, scale, offset in layer_params(a.hidden, a.ffn, layer):
                shards[name] = (init(name, shape, axis, a.seed, scale, offset, a.dtype), axis)
        sess.save_tensors(path, shards)
        sess.sync_all()
        print("[checkpoint] wrote %s (seed %d) in %.0f ms" % (path, a.seed,
                                                              (time.perf_counter() - t0) * 1e3))
    return path


def make_input(a, bf16):
    """The input batch of the seed as float32 (as the workers see it) and the host tensor sent."""
    rng = np.random.default_rng(a.seed)
    x_in = rng.uniform(-1.0, 1.0, size=(a.tokens, a.hidden)).astype(np.float32)
    if not bf16:
        return x_in, x_in
    bits = np.empty(x_in.shape, np.uint16)
    store(bits, x_in, True)
    return to_f32(bits, True), disco.Tensor.from_numpy(bits, "bfloat16")


def reference(sess, a, path, plan, x_in, bf16):
    """The single-process reference, from the whole checkpoint (loaded whole through disco)."""
    whole = sess.load_tensors(path, {name: -1 for name in plan})
    params = {k: to_f32(v.debug_get_from_remote(0), bf16) for k, v in whole.items()}
    x = x_in
    for layer in range(a.layers):
        p = "layers/%d/" % layer
        h = gelu(x @ params[p + "w1"] + params[p + "b1"])
        x = residual_layernorm(x, h @ params[p + "w2"], params[p + "b2"], params[p + "ln_g"],
                               params[p + "ln_b"])
    return x


def report(a, steps, other, got, ref, bf16):
    """The summary and the check against the reference; returns the exit code."""
    max_abs = float(np.abs(got - ref).max())
    max_ref = float(np.abs(ref).max())
    rel = max_abs / max_ref if max_ref > 0 else max_abs
    tol = a.tolerance if a.tolerance >= 0 else (5e-2 if bf16 else 1e-4)
    median = sorted(steps)[len(steps) // 2]
    print("\nsummary: %d steps of %d layers, median step %.2f ms, %.0f tokens/s"
          % (a.steps, a.layers, median, a.tokens / (median / 1e3)))
    other_median = sorted(other)[len(other) // 2]
    by_replay, by_calls = (other_median, median) if a.calls else (median, other_median)
    print("  median step by replay %.3f ms, call by call %.3f ms" % (by_replay, by_calls))
    verdict = "PASS" if rel <= tol else "FAIL"
    print("  check vs single-process reference: max abs error %.3g, max rel error %.3g "
          "(tolerance %.3g): %s" % (max_abs, rel, tol, verdict))
    return 0 if verdict == "PASS" else 1


def run(sess, a):
    n = sess.num_workers
    if a.ffn % n:
        raise ValueError("--ffn %d cannot be split over %d workers" % (a.ffn, n))
    bf16 = a.dtype == "bfloat16"
    print("tp_mlp.py: %d workers, %d layers, hidden %d, ffn %d, %d tokens, %s"
          % (n, a.layers, a.hidden, a.ffn, a.tokens, a.dtype))
    sess.init_ccl("mpi")
    path = ensure_checkpoint(sess, a)
    t0 = time.perf_counter()
    plan = {name: axis for layer in range(a.layers)
            for name, _, axis, _, _ in layer_params(a.hidden, a.ffn, layer)}
    w = sess.load_tensors(path, plan)
    sess.sync_all()
    print("[load] %d datasets from %s, sharded over %d workers, in %.0f ms"
          % (len(w), path, n, (time.perf_counter() - t0) * 1e3))

    x_in, host = make_input(a, bf16)
    up_down_f = sess.get_global_func("tp_mlp.up_down")
    norm_f = sess.get_global_func("tp_mlp.residual_norm")
    partial = sess.empty((a.tokens, a.hidden), a.dtype)

    def layers(x):
        for layer in range(a.layers):
            p = "layers/%d/" % layer
            up_down_f(x, w[p + "w1"], w[p + "b1"], w[p + "w2"], partial, a.dtype)
            sess.allreduce(partial, partial, op="sum", in_group=False)
            norm_f(x, partial, w[p + "b2"], w[p + "ln_g"], w[p + "ln_b"], a.dtype)

    # The layers, captured once: a step replays them as one frame (--calls: one by one).
    with sess.capture(num_inputs=1) as step:
        layers(step.inputs[0])

    def forward(replay):
        x = sess.broadcast(host, in_group=False)
        if replay:
            step.replay(x)  # writes x in place, as the calls do
        else:
            layers(x)
        sess.sync_all()
        return x

    def timed(replay, show):
        times, out = [], None
        for i in range(a.steps):
            t0 = time.perf_counter()
            out = forward(replay)
            times.append((time.perf_counter() - t0) * 1e3)
            if show:
                print("[step %d/%d] %.2f ms" % (i + 1, a.steps, times[-1]))
        return times, out

    for _ in range(a.warmup):
        forward(True)
        forward(False)
    print("[steps] %s" % ("call by call (--calls)" if a.calls else "by replay of a captured graph"))
    steps, out = timed(not a.calls, True)
    other, _ = timed(a.calls, False)  # the other way, for the comparison

    got = to_f32(out.debug_get_from_remote(0), bf16)
    return report(a, steps, other, got, reference(sess, a, path, plan, x_in, bf16), bf16)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--checkpoint", default="",
                   help="an HDF5 checkpoint (disco-demo's work); written from the seed if missing")
    p.add_argument("--tolerance", type=float, default=-1.0)
    p.add_argument("--calls", action="store_true",
                   help="run each step's layers call by call, not by replay of a captured graph")
    a = p.parse_args()
    return disco.main(lambda sess: run(sess, a))


if __name__ == "__main__":
    sys.exit(main())
