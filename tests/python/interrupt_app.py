"""A controller for the Ctrl-C test: prints 'ready' and then waits, either inside the runtime
(sync_all while the last worker sleeps in a worker function) or in Python code (a loop). In mode
'handler' it takes the KeyboardInterrupt and goes on working for 4 s (session calls and Python, as
a controller saving a checkpoint would), then returns 3."""

import os
import sys
import time

import numpy as np

import disco


@disco.register_func("test.interrupt.sleep_on")
def sleep_on(worker, seconds):
    if disco.this_worker().worker_id == worker:
        time.sleep(seconds)


def controller(sess):
    mode = sys.argv[1]
    print("ready pid=%d" % os.getpid(), flush=True)
    if mode == "runtime":
        sess.get_global_func("test.interrupt.sleep_on")(sess.num_workers - 1, 120)
        sess.sync_all()
    elif mode == "handler":
        try:
            end = time.monotonic() + 120
            while time.monotonic() < end:
                sum(range(1000))
        except KeyboardInterrupt:
            print("KeyboardInterrupt taken; saving", flush=True)
            end = time.monotonic() + 4
            x = sess.empty((64,), "float32")
            while time.monotonic() < end:
                sess.copy_to_worker_0(np.ones(64, dtype="float32"), x)
                sess.get_global_func("test.interrupt.sleep_on")(sess.num_workers - 1, 0.05)
                sess.sync_all()
                sum(range(1000))
            print("saved", flush=True)
            return 3
    else:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            sum(range(1000))
    return 0


if __name__ == "__main__":
    sys.exit(disco.main(controller))
