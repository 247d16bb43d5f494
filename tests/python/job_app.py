"""Small disco programs for test_jobs.py, one per MODE: how a job ends (exit codes, messages, what
the watchdog says) when the controller or the process does something a script may do.

    mpirun -n N python3 job_app.py MODE [ARGS]
"""

import os
import sys
import time

import disco

MODE = sys.argv[1]
ARGS = sys.argv[2:]


@disco.register_func("test.job.sleep_on")
def sleep_on(worker, seconds):
    if disco.this_worker().worker_id == worker:
        time.sleep(seconds)


def stuck_in_python(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


@disco.register_func("test.job.stuck_on")
def stuck_on(worker, seconds):
    if disco.this_worker().worker_id == worker:
        stuck_in_python(seconds)


@disco.register_func("test.job.répétition")
def repetition(n):
    return n + 1


@disco.register_func("test.job.函数")
def stuck_on_utf8(worker, seconds):  # a UTF-8 name in the trace and in the watchdog's line
    stuck_on(worker, seconds)


def say(*args):
    sys.stdout.write(" ".join(str(a) for a in args) + "\n")  # one write: ranks' lines stay whole
    sys.stdout.flush()


def controller(sess):
    if MODE == "raise":
        raise RuntimeError("controller failed on purpose")
    if MODE == "return":
        return eval(ARGS[0])  # an int, a string, None...: what the controller returns
    if MODE == "sys_exit":
        sys.exit(int(ARGS[0]))
    if MODE == "unsynced_error":
        sess.get_global_func("test.no.such.function")
        return 0
    if MODE == "mpi4py_barrier":
        from mpi4py import MPI
        say("controller enters MPI_Barrier")
        MPI.COMM_WORLD.Barrier()  # the workers sit in disco's loop: never completes
        return 0
    if MODE == "compute":  # busy in Python and in a sleep, never in the runtime, past DISCO_TIMEOUT
        stuck_in_python(float(ARGS[0]) / 2)
        time.sleep(float(ARGS[0]) / 2)
        x = sess.empty((2,), "float32")
        return 0 if x.debug_get_from_remote(sess.num_workers - 1).shape == (2,) else 1
    if MODE == "stuck_worker":
        sess.get_global_func("test.job.stuck_on")(int(ARGS[0]), 120)
        sess.sync_all()
        return 0
    if MODE == "utf8_names":
        sess.get_global_func("test.job.répétition")(1)
        sess.get_global_func("test.job.函数")(-1, 0)
        sess.sync_all()
        return 0
    if MODE == "stuck_utf8":
        sess.get_global_func("test.job.函数")(int(ARGS[0]), 120)
        sess.sync_all()
        return 0
    return 0


if MODE == "main_twice":
    codes = [disco.main(lambda s: 3), disco.main(lambda s: s.num_workers)]
    say("codes", codes)
    sys.exit(0)
if MODE == "mpi4py_after_main":
    code = disco.main(lambda s: 0)
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    total = MPI.COMM_WORLD.allreduce(1)
    say("mpi4py after disco.main: allreduce gave", total)
    sys.exit(code)
if MODE == "main_after_finalize":
    from mpi4py import MPI
    MPI.Finalize()
    try:
        disco.main(lambda s: 0)
    except RuntimeError as e:
        say("RuntimeError:", str(e).split(" [")[0])
        sys.exit(0)
    sys.exit(1)
if MODE == "sigterm_after_main":
    code = disco.main(lambda s: 0)
    say("returned", code)
    time.sleep(60)  # the test ends this process with SIGTERM
    sys.exit(code)
if MODE == "sys_exit_main":  # sys.exit(disco.main(controller)) with ARGS: the controller's mode
    MODE, ARGS = ARGS[0], ARGS[1:]
    sys.exit(disco.main(controller))

disco.main(controller)  # no sys.exit: a failure must still end the process non-zero
# The rank as the launcher says it: Open MPI, hydra (MPICH) or a PMIx launcher.
rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
             if v in os.environ), "0")
say("after disco.main on rank", rank)
