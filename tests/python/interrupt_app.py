"""A controller for the Ctrl-C test: prints 'ready' and then waits, either inside the runtime
(sync_all while the last worker sleeps in a worker function) or in Python code (a loop)."""

import sys
import time

import disco


@disco.register_func("test.interrupt.sleep_on")
def sleep_on(worker, seconds):
    if disco.this_worker().worker_id == worker:
        time.sleep(seconds)


def controller(sess):
    mode = sys.argv[1]
    print("ready", flush=True)
    if mode == "runtime":
        sess.get_global_func("test.interrupt.sleep_on")(sess.num_workers - 1, 120)
        sess.sync_all()
    else:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            sum(range(1000))
    return 0


if __name__ == "__main__":
    sys.exit(disco.main(controller))
