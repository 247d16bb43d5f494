"""How long disco.ProcessSession takes to start, against the floor of starting the same job.

    python3 bench/process_session.py [--workers 4] [--repeats 5]

Run from a plain process (no mpirun). Per repeat, interleaved:
- launch floor: `disco-run -n N -- python3 -c "import disco"` to its exit (mpirun and N
  interpreters importing disco: what any Python job of N ranks pays before doing anything);
- ProcessSession: disco.ProcessSession(N) until it returns (the job started, MPI up, the server
  listening, this process attached), then its first sync_all;
- close: sess.shutdown() until the job has exited.
Prints each repeat and the medians, and the ratio of ProcessSession's start to the floor.
Goal (#26): at most 2 s for 4 workers on the 2-core CI machine.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import disco
from disco import _launcher


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    floor, start, first_sync, close = [], [], [], []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(disco.__file__)))]
        + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x])
    print("disco %s, %d workers, %d repeats (seconds)" % (disco.__version__, args.workers,
                                                         args.repeats))
    print("%-7s %12s %16s %12s %10s" % ("repeat", "launch floor", "ProcessSession", "first sync",
                                        "close"))
    for r in range(args.repeats):
        t = time.monotonic()
        subprocess.run([_launcher.path(), "-n", str(args.workers), "--", sys.executable, "-c",
                        "import disco"], check=True, env=env, stdout=subprocess.DEVNULL)
        floor.append(time.monotonic() - t)
        t = time.monotonic()
        sess = disco.ProcessSession(args.workers)
        start.append(time.monotonic() - t)
        t = time.monotonic()
        sess.sync_all()
        first_sync.append(time.monotonic() - t)
        t = time.monotonic()
        sess.shutdown()
        close.append(time.monotonic() - t)
        print("%-7d %12.3f %16.3f %12.4f %10.3f" % (r, floor[-1], start[-1], first_sync[-1],
                                                   close[-1]), flush=True)
    med = statistics.median
    print("%-7s %12.3f %16.3f %12.4f %10.3f" % ("median", med(floor), med(start), med(first_sync),
                                               med(close)))
    print("ProcessSession start / launch floor: %.2fx; goal: start <= 2 s for 4 workers"
          % (med(start) / med(floor)))


if __name__ == "__main__":
    main()
