"""A port of Apache TVM's tests/python/disco/test_session.py to disco, with TVM's inputs and
expected values unchanged, for the in-job and the served session (TVM's process and threaded
sessions). The functions it calls (tests.disco.*, registered by TVM's tvm.testing.disco) are
Python worker functions of the same bodies (funcs.py). What differs, and why:
- TVM makes a session of 4 workers per test (`session_kind(num_workers=4)`); a disco job has one
  session of the launcher's size, and each test reads every worker of it.
- numpy arrays stand in for `tvm.nd.array` / `tvm.nd.empty` (disco takes any host array), and
  plain tuples for ShapeTuple (a tuple of ints is disco's shape value).
Left out: test_string_obj (TVM's String wrapper: disco has plain str, test_string covers it) and
the VM-module tests (load_vm_module and compiled Relax functions: disco has no compiler)."""

import numpy as np


def _numpy_to_worker_0(sess, np_array, device):
    x_array = sess.empty(np_array.shape, "float32", device=device)
    host_array = np.array(np_array)
    sess.copy_to_worker_0(host_array, x_array)
    return x_array


def _numpy_from_worker_0(sess, remote_array, shape, dtype):
    host_array = np.empty(shape, dtype)
    sess.copy_from_worker_0(host_array, remote_array)
    sess.sync_worker_0()
    return host_array


def test_int(sess):  # pylint: disable=invalid-name
    num_workers = sess.num_workers
    func = sess.get_global_func("tests.disco.add_one")
    result = func(1)
    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == 2


def test_float(sess):
    num_workers = sess.num_workers
    func = sess.get_global_func("tests.disco.add_one_float")
    result = func(1.5)

    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == 2.0


def test_ndarray(sess):
    device = "cpu"
    x_np = np.arange(6).astype("float32").reshape([2, 3])
    y_np = np.arange(6).astype("float32").reshape([2, 3]) + 1
    x_disc = _numpy_to_worker_0(sess, x_np, device=device)
    y_disc = sess.get_global_func("tests.disco.add_one_ndarray")(x_disc)
    y_nd = _numpy_from_worker_0(sess, y_disc, shape=y_np.shape, dtype=y_np.dtype)
    np.testing.assert_equal(y_nd, y_np)


def test_string(sess):
    num_workers = sess.num_workers
    func = sess.get_global_func("tests.disco.str")
    result = func("hello")

    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == "hello_suffix"


def test_shape_tuple(sess):
    num_workers = sess.num_workers
    func = sess.get_global_func("tests.disco.shape_tuple")
    result = func((1, 2, 3))
    for i in range(num_workers):
        value = result.debug_get_from_remote(i)
        assert isinstance(value, tuple)
        assert list(value) == [1, 2, 3, 4, 5]
