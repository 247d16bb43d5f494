"""Runs the Python suite inside a disco job: every rank imports the worker functions, rank 0 runs
pytest as the controller with the live session, ranks 1..N-1 run the worker loop.

    mpirun -n 4 python3 tests/python/run_in_job.py [pytest arguments]
"""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)

import disco  # noqa: E402
import funcs  # noqa: E402,F401  (registers the worker functions on every rank)
import session_env  # noqa: E402


def controller(sess):
    import pytest
    session_env.SESSION = sess
    session_env.MODE = "in-job"
    args = sys.argv[1:]
    if not [a for a in args if not a.startswith("-")]:
        args.append(here)  # options only: the whole suite
    extra = [] if any(a.startswith("--color") for a in args) else ["--color=no"]
    code = pytest.main(["-p", "no:cacheprovider", "--rootdir", here] + extra + args)
    print("pytest in-job at %d ranks: exit %d" % (sess.num_workers, int(code)), flush=True)
    return int(code)


if __name__ == "__main__":
    sys.exit(disco.main(controller))
