"""One rank of `python3 -m disco`: runs the program as `python3 script.py` would (or `-m module`),
and ends the whole job when an exception escapes it, so that no rank waits for one that is gone."""

import os
import runpy
import sys
import traceback


def _rank():
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return os.environ[var]
    return "?"


def main():
    args = sys.argv[1:]
    if args[:1] == ["-m"]:
        what = "module " + args[1]
        sys.argv = [args[1]] + args[2:]

        def run():
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        what = args[0]
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))

        def run():
            runpy.run_path(args[0], run_name="__main__")
    try:
        run()
    except SystemExit:
        raise
    except BaseException as e:  # KeyboardInterrupt too: a rank that stops ends the job
        traceback.print_exc()
        sys.stderr.write("python3 -m disco: rank %s: %s in %s, not caught: ending the job\n"
                         % (_rank(), type(e).__name__, what))
        from . import _core
        _core._abort_job(130 if isinstance(e, KeyboardInterrupt) else 1)


if __name__ == "__main__":
    main()
