"""A port of Apache TVM's tests/python/disco/test_session.py to disco: the same inputs and
expected values, on CPU, for the in-job and the served session (TVM's process and socket
sessions). The functions it calls (tests.disco.*) are Python worker functions (funcs.py).
Left out: the VM-module tests (load_vm_module and compiled Relax functions: disco has no
compiler)."""

import numpy as np
import pytest


def test_int(sess):
    func = sess.get_global_func("tests.disco.add_one")
    result = func(1)
    for i in range(sess.num_workers):
        assert result.debug_get_from_remote(i) == 2


def test_float(sess):
    func = sess.get_global_func("tests.disco.add_one_float")
    result = func(1.5)
    for i in range(sess.num_workers):
        assert result.debug_get_from_remote(i) == 2.0


def test_ndarray(sess):
    x = np.arange(6).astype("int64").reshape([2, 3])
    y = x + 1
    d_array = sess.empty(x.shape, "int64")
    for i in range(sess.num_workers):
        d_array.debug_copy_from(i, x)
    func = sess.get_global_func("tests.disco.add_one_ndarray")
    result = func(d_array)
    for i in range(sess.num_workers):
        np.testing.assert_equal(result.debug_get_from_remote(i), y)


def test_string(sess):
    func = sess.get_global_func("tests.disco.str")
    result = func("hello")
    for i in range(sess.num_workers):
        assert result.debug_get_from_remote(i) == "hello_suffix"


def test_shape_tuple(sess):
    func = sess.get_global_func("tests.disco.shape_tuple")
    result = func((1, 2, 3))
    for i in range(sess.num_workers):
        assert list(result.debug_get_from_remote(i)) == [1, 2, 3]


def test_num_workers(sess):
    assert sess.num_workers >= 1
    assert sess.get_global_func("disco.num_workers")().debug_get_from_remote(0) == sess.num_workers


def test_worker_id(sess):
    result = sess.get_global_func("disco.worker_id")()
    for i in range(sess.num_workers):
        assert result.debug_get_from_remote(i) == i


def test_copy_to_and_from_worker_0(sess):
    x = np.arange(6).astype("float32").reshape([2, 3])
    d = sess.copy_to_worker_0(x)
    y = np.empty_like(x)
    sess.copy_from_worker_0(y, d)
    sess.sync_worker_0()
    np.testing.assert_equal(y, x)


def test_session_errors_keep_the_session(sess):
    from disco import RemoteError

    sess.get_global_func("tests.disco.not_registered")
    with pytest.raises(RemoteError):
        sess.sync_all()
    test_int(sess)
