"""python3 -m disco: runs a Python program on every rank of an MPI job, as launch/disco-run does.

    python3 -m disco [-n N] [--trace FILE] [--dry-run] [--which-mpi] [--help-env] script.py [args...]
    python3 -m disco [-n N] [--trace FILE] [--dry-run] -m package.module [args...]

The launcher and its flags are launch/disco-run's (one implementation of the rules, shipped
inside this package): outside Slurm, mpirun with the flags its MPI takes (Open MPI's root flag
only as root, --oversubscribe only when N exceeds the cores, binding one rank per core); inside
a Slurm allocation, srun with the PMI of the MPI in use and --kill-on-bad-exit=1. The command is
printed before it runs; --dry-run only prints it. N defaults to SLURM_NTASKS inside an
allocation, else DISCO_NP, else 1. --trace FILE writes the job's timeline to FILE (DISCO_TRACE:
a Chrome/Perfetto trace-event file; python3 -m disco.trace FILE summarises it).

Every rank runs the program with this interpreter. An exception that no code catches, on any
rank, prints its traceback and ends the whole job (MPI_Abort), so no rank waits for one that is
gone; the job's exit code is the program's (sys.exit, disco.main's code; non-zero after an
uncaught exception: MPI_Abort's 1, or the launcher's code for a rank ended by SIGTERM when the
exception came before MPI started). Programs that use disco run their controller with disco.main (see help(disco)).
"""

import os
import sys

from . import _launcher

_USAGE = ("usage: python3 -m disco [-n N] [--trace FILE] [--dry-run] [--which-mpi] [--help-env] "
          "(script.py | -m module) [args...]")


def _die(message):
    sys.stderr.write("python3 -m disco: %s\n%s\n" % (message, _USAGE))
    sys.exit(2)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    launcher_args = []
    target = None
    while argv:
        a = argv.pop(0)
        if a in ("-h", "--help"):
            print(_USAGE + "\n\n" + __doc__.split("\n", 1)[1].split("\n\n", 1)[1])
            return 0
        if a in ("-n", "--np"):
            if not argv:
                _die("%s needs a value (the number of ranks)" % a)
            launcher_args += ["-n", argv.pop(0)]
        elif a.startswith("--np=") or (a.startswith("-n") and len(a) > 2 and a[2:].isdigit()):
            launcher_args += ["-n", a.split("=", 1)[1] if "=" in a else a[2:]]
        elif a == "--trace" or a.startswith("--trace="):
            value = a.split("=", 1)[1] if "=" in a else (argv.pop(0) if argv else "")
            if not value or value.startswith("-"):
                _die("--trace needs a file name%s" % (", got %r" % value if value else ""))
            launcher_args += ["--trace", value]
        elif a in ("--dry-run", "--which-mpi", "--help-env"):
            launcher_args.append(a)
        elif a == "-m":
            if not argv:
                _die("-m needs a module name")
            target = ["-m", argv.pop(0)]
            break
        elif a == "--":
            if not argv:
                _die("no program given")
            target = [argv.pop(0)]
            break
        elif a.startswith("-"):
            _die("unknown option %s" % a)
        else:
            target = [a]
            break
    info_only = any(a in ("--which-mpi", "--help-env") for a in launcher_args)
    if target is None and not info_only:
        _die("no program given")
    if target is not None and target[0] != "-m" and not os.path.isfile(target[0]):
        _die("no such file: %s" % target[0])
    cmd = [_launcher.path()] + launcher_args + ["--"]
    if target is not None:
        cmd += [sys.executable, "-m", "disco._run"] + target + argv
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)  # disco-run prints the command and becomes the launcher


if __name__ == "__main__":
    sys.exit(main())
