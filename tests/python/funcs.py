"""Worker functions of the Python suite: imported on every rank (in-job by run_in_job.py, served
by `python3 -m disco.serve --module funcs`)."""

import importlib.util
import os
import time

import numpy as np

import disco


@disco.register_func("test.py.scale")
def scale(x, k):
    return x * k


@disco.register_func("test.py.add_inplace")
def add_inplace(x, v):
    x += v  # the argument is a view of the worker's tensor: the register changes


@disco.register_func("test.py.echo")
def echo(*args):
    return args[0] if len(args) == 1 else args


@disco.register_func("test.py.type_names")
def type_names(*args):
    return tuple(type(a).__name__ for a in args)


@disco.register_func("test.py.array_info")
def array_info(x):
    return (str(x.dtype), tuple(x.shape), bool(x.flags.writeable), bool(x.flags.c_contiguous))


@disco.register_func("test.py.fail")
def fail(message):
    helper_that_raises(message)


def helper_that_raises(message):
    raise ValueError(message)


@disco.register_func("test.py.fail_on")
def fail_on(worker, message):
    if disco.this_worker().worker_id == worker:
        raise KeyError(message)


@disco.register_func("test.py.worker")
def worker():
    w = disco.this_worker()
    return (w.worker_id, w.num_workers, w.group_id, w.num_groups)


@disco.register_func("test.py.worker_repr")
def worker_repr():
    return repr(disco.this_worker())


@disco.register_func("test.py.fill_worker_id")
def fill_worker_id(x):
    x[...] = disco.this_worker().worker_id


@disco.register_func("test.py.full")
def full(shape, dtype, value):
    return np.full(shape, value, dtype=dtype)


@disco.register_func("test.py.sleep_on")
def sleep_on(worker, seconds):
    if disco.this_worker().worker_id == worker:
        time.sleep(seconds)


@disco.register_func("test.py.spin_on")
def spin_on(worker, seconds):
    # Holds the GIL of its own process while it runs (a pure-Python loop).
    if disco.this_worker().worker_id == worker:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass


@disco.register_func("test.py.wait_for_file")
def wait_for_file(worker, path, limit_s):
    # Returns once `path` exists (made by another process); raises after `limit_s`, a guard only.
    if disco.this_worker().worker_id == worker:
        end = time.monotonic() + limit_s
        while not os.path.exists(path):
            if time.monotonic() > end:
                raise TimeoutError("%s did not appear in %s s" % (path, limit_s))
            time.sleep(0.001)


@disco.register_func("test.py.sum")
def array_sum(x):
    return float(np.asarray(x, dtype=np.float64).sum())


@disco.register_func("test.py.keep")
def keep(obj):
    return {"kept": obj}


@disco.register_func("test.py.state_new")
def state_new():
    return Counter()


@disco.register_func("test.py.state_bump")
def state_bump(counter):
    counter.n += 1
    return counter.n


class Counter:
    def __init__(self):
        self.n = 0


# ---- The functions TVM's disco tests register in C++ (tests.disco.*), as Python worker functions.

@disco.register_func("tests.disco.add_one")
def tvm_add_one(x):
    return x + 1


@disco.register_func("tests.disco.add_one_float")
def tvm_add_one_float(x):
    return x + 0.5


@disco.register_func("tests.disco.add_one_ndarray")
def tvm_add_one_ndarray(x):
    return np.array(x + 1)


@disco.register_func("tests.disco.str")
def tvm_str(x):
    return x + "_suffix"


@disco.register_func("tests.disco.shape_tuple")
def tvm_shape_tuple(x):
    assert isinstance(x, tuple)
    return tuple(list(x) + [4, 5])


@disco.register_func("tests.disco.peer")
def tvm_peer(table):
    """This worker's entry of {worker id: peer} (-1 when absent): per-worker peers for
    disco.sendrecv, whose arguments are registers."""
    return int(dict(table).get(str(disco.this_worker().worker_id), -1))


# ---- Inputs of every kind (test_inputs.py) -------------------------------------------------------

@disco.register_func("test.py.big_endian")
def big_endian(n):
    """A non-native (big-endian) array returned: the register must hold the values, native."""
    return np.arange(1, n + 1).astype(">f4")


@disco.register_func("test.py.transposed_torch")
def transposed_torch(rows, cols):
    """A non-contiguous DLPack producer returned (torch's t.T)."""
    import torch
    return torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols).T


# ---- Session calls from inside a worker function (test_session.py) ------------------------------

REENTRY = {}  # set by the in-job test on rank 0: the controller's session and a DRef of it


@disco.register_func("test.py.call_session")
def call_session(what):
    """On worker 0 of an in-job session, tries the session call `what` from inside this worker
    function and returns the error it gave (None on the other workers)."""
    sess, ref = REENTRY.get("sess"), REENTRY.get("ref")
    if disco.this_worker().worker_id != 0 or sess is None:
        return None
    calls = {
        "empty": lambda: sess.empty((2,), "float32"),
        "get_global_func": lambda: sess.get_global_func("test.py.echo"),
        "call": lambda: sess.call_packed(ref, 1),
        "sync_all": sess.sync_all,
        "sync_worker_0": sess.sync_worker_0,
        "copy_to_worker_0": lambda: sess.copy_to_worker_0(np.ones(2, dtype="float32")),
        "num_workers": lambda: sess.num_workers,
        "debug_get_from_remote": lambda: ref.debug_get_from_remote(0),
    }
    try:
        calls[what]()
    except RuntimeError as e:
        return "%s: %s" % (type(e).__name__, e)
    return "no error"


# PyTorch worker functions (@disco.register_func(..., tensors="torch")), where torch is installed
# (it is imported at their first call, not here).
if importlib.util.find_spec("torch") is not None:
    @disco.register_func("test.torch.describe", tensors="torch")
    def torch_describe(x, nested):
        # What the function got: types, dtypes, and whether nested values were converted too.
        return "%s %s %s %s %s" % (type(x).__name__, x.dtype, tuple(x.shape),
                                   type(nested[0]).__name__, type(nested[1]["t"]).__name__)

    @disco.register_func("test.torch.add_inplace", tensors="torch")
    def torch_add_inplace(x, v):
        x.add_(v)  # shares the register's memory: the register changes

    @disco.register_func("test.torch.scale", tensors="torch")
    def torch_scale(x, k):
        return x * k  # a new torch tensor becomes the result register

    @disco.register_func("test.torch.transposed", tensors="torch")
    def torch_transposed(x):
        return x.t()  # not contiguous: copied into the register

    @disco.register_func("test.torch.data_ptr", tensors="torch")
    def torch_data_ptr(x):
        return x.data_ptr()

    @disco.register_func("test.py.data_ptr")
    def numpy_data_ptr(x):
        return x.ctypes.data
