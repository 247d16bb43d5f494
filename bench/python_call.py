"""The cost of a call from Python, against the C++ session, mpi4py and raw MPI, in one run.

    mpirun -n 2 python3 bench/python_call.py [--iters 20000] [--repeats 5]

Every rank runs this script. First, on every rank: mpi4py's comm.bcast (pickled) of a tuple
equivalent to the call's arguments, and comm.Bcast of a buffer the size of disco's control frame
(raw MPI_Bcast), each K times back to back then a barrier. Then disco.main, and on rank 0:
- py pipelined: K calls of a C++ no-op from Python, f(7, 2.5, "text"), then one sync_all;
- C++ pipelined: the same K calls issued by the C++ session (the runtime's own cost);
- py synced / C++ synced: call then sync_all, each time;
- py worker fn: the same calls of a Python no-op registered with @disco.register_func (the
  workers run Python: the cost of a Python worker function);
- py + array: the Python call with a small numpy array (16 float32) as a fourth argument (worker 0
  gets its own copy of it, as the other workers do through the wire);
- py replay / C++ replay: K replays of a captured graph of 16 C++ no-op calls taking one input,
  g.replay(7), then one sync_all; from Python, and the same replays issued from C++ (#23: the
  Python replay within 1.5x the C++ one).
Times are microseconds per call, medians over the repeats (interleaved). Targets (#16): a
pipelined Python call within 3x the C++ call, and at least 2x faster than mpi4py's comm.bcast.
"""

import argparse
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import disco

ARGS = (7, 2.5, "text")
ARRAY_ARGS = ARGS + (np.ones(16, dtype="float32"),)


@disco.register_func("bench.py.noop")
def py_noop(*args):
    return None


def mpi_baselines(iters, repeats, frame_bytes):
    """Per-repeat microseconds of mpi4py's pickled bcast and of a raw buffer Bcast."""
    comm = MPI.COMM_WORLD
    payload = (0,) + ARGS  # (function register, arguments)
    buf = np.zeros(frame_bytes, dtype=np.uint8)
    pickled, raw = [], []
    for _ in range(repeats):
        for name, op in (("pickled", lambda: comm.bcast(payload, root=0)),
                         ("raw", lambda: comm.Bcast(buf, root=0))):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                op()
            comm.Barrier()
            dt = (time.perf_counter() - t0) / iters * 1e6
            (pickled if name == "pickled" else raw).append(dt)
    return pickled, raw


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--frame-bytes", type=int, default=256,
                   help="bytes of the raw broadcast (disco's inline frame: DISCO_INLINE_BYTES)")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    # The MPI baselines run before and after the session (the workers are in disco's loop while
    # it runs), and count both halves: the machine's state then matches the disco figures'.
    before = mpi_baselines(a.iters, (a.repeats + 1) // 2, a.frame_bytes)
    med = {}

    def controller(sess):
        cpp = sess.get_global_func("disco.py.noop")
        pyf = sess.get_global_func("bench.py.noop")
        k, ks = a.iters, max(a.iters // 10, 100)
        results = {n: [] for n in ("py_pipe", "cpp_pipe", "py_sync", "cpp_sync", "pyfn_pipe",
                                   "pyfn_sync", "py_array", "py_replay", "cpp_replay")}
        with sess.capture(num_inputs=1) as graph:
            for _ in range(16):
                cpp(graph.inputs[0])

        def py_replays(n):
            sess.sync_all()
            t0 = time.perf_counter()
            for _ in range(n):
                graph.replay(7)
            sess.sync_all()
            return (time.perf_counter() - t0) / n * 1e6

        def py_calls(f, n, sync_each, args=ARGS):
            sess.sync_all()
            t0 = time.perf_counter()
            for _ in range(n):
                f(*args)
                if sync_each:
                    sess.sync_all()
            sess.sync_all()
            return (time.perf_counter() - t0) / n * 1e6

        for _ in range(a.repeats):
            results["py_pipe"].append(py_calls(cpp, k, False))
            results["cpp_pipe"].append(disco._core._bench_calls(sess, cpp, ARGS, k, False) * 1e6)
            results["py_sync"].append(py_calls(cpp, ks, True))
            results["cpp_sync"].append(disco._core._bench_calls(sess, cpp, ARGS, ks, True) * 1e6)
            results["pyfn_pipe"].append(py_calls(pyf, k, False))
            results["pyfn_sync"].append(py_calls(pyf, ks, True))
            results["py_array"].append(py_calls(cpp, k, False, ARRAY_ARGS))
            results["py_replay"].append(py_replays(k))
            results["cpp_replay"].append(disco._core._bench_replays(graph, (7,), k) * 1e6)
        med.update({n: statistics.median(v) for n, v in results.items()})
        med["n"] = sess.num_workers
        return 0

    code = disco.main(controller)
    after = mpi_baselines(a.iters, (a.repeats + 1) // 2, a.frame_bytes)
    if comm.rank != 0:
        return code
    mpi4py_us = statistics.median(before[0] + after[0])
    raw_us = statistics.median(before[1] + after[1])
    print("# bench/python_call.py  ranks=%d  iters=%d  repeats=%d  disco=%s  mpi4py=%s  "
          "mpi=%s" % (med["n"], a.iters, a.repeats, disco.__version__,
                      __import__("mpi4py").__version__,
                      MPI.Get_library_version().split("\n")[0].strip("\x00 \t\r")))
    print("# microseconds per call, medians of %d interleaved repeats (MPI baselines: before and "
          "after the session)" % a.repeats)
    rows = [
        ("raw MPI_Bcast of %d B (comm.Bcast)" % a.frame_bytes, raw_us, ""),
        ("mpi4py comm.bcast of the tuple", mpi4py_us, ""),
        ("C++ session call, pipelined", med["cpp_pipe"], ""),
        ("Python call, pipelined", med["py_pipe"],
         "%.2fx C++, %.2fx faster than mpi4py" % (med["py_pipe"] / med["cpp_pipe"],
                                                 mpi4py_us / med["py_pipe"])),
        ("C++ session call + sync_all", med["cpp_sync"], ""),
        ("Python call + sync_all", med["py_sync"],
         "%.2fx C++" % (med["py_sync"] / med["cpp_sync"])),
        ("Python worker fn, pipelined", med["pyfn_pipe"],
         "%.2fx C++ no-op" % (med["pyfn_pipe"] / med["cpp_pipe"])),
        ("Python worker fn + sync_all", med["pyfn_sync"], ""),
        ("Python call + 16-float array, pipelined", med["py_array"],
         "%.2fx the call without it" % (med["py_array"] / med["py_pipe"])),
        ("C++ replay of 16 calls, pipelined", med["cpp_replay"],
         "%.2fx one C++ call" % (med["cpp_replay"] / med["cpp_pipe"])),
        ("Python replay of 16 calls, pipelined", med["py_replay"],
         "%.2fx C++ replay" % (med["py_replay"] / med["cpp_replay"])),
    ]
    print("%-40s %10s  %s" % ("what", "us/call", "ratio"))
    for what, us, ratio in rows:
        print("%-40s %10.3f  %s" % (what, us, ratio))
    ok = med["py_pipe"] <= 3 * med["cpp_pipe"] and mpi4py_us >= 2 * med["py_pipe"]
    print("targets (Python pipelined <= 3x C++, >= 2x faster than mpi4py): %s"
          % ("met" if ok else "NOT met"))
    print("target (Python replay <= 1.5x C++ replay): %s"
          % ("met" if med["py_replay"] <= 1.5 * med["cpp_replay"] else "NOT met"))
    return code


if __name__ == "__main__":
    sys.exit(main())
