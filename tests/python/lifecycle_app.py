"""A session's life from Python, in a job: `with sess:` shuts it down, calls after that are
errors, the controller's return value is every rank's exit code, and a session kept after
disco.main is a clear error."""

import sys

import disco

kept = []


def controller(sess):
    kept.append(sess)
    with sess:
        x = sess.empty((3,), "float32")
        assert x.debug_get_from_remote(sess.num_workers - 1).shape == (3,)
    try:
        sess.empty((3,), "float32")
    except (ValueError, RuntimeError) as e:
        print("after shutdown:", str(e).split(" [")[0])
    else:
        raise AssertionError("a call after shutdown went through")
    sess.shutdown()  # idempotent
    return int(sys.argv[1])


code = disco.main(controller)
if kept:  # rank 0
    try:
        kept[0].num_workers
    except RuntimeError as e:
        print("after main:", str(e).split(" [")[0])
    print("exit code", code)
sys.exit(code)
