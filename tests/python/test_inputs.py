"""Host arrays of every kind as inputs: byte order, aliasing of worker 0's arguments, and
non-contiguous numpy arrays and DLPack producers, at every entry point."""

import numpy as np
import pytest

import disco
from producers import Producer


# ---- Byte order: a non-native array is converted, never reinterpreted ----------------------------

def test_non_native_tensor_from_numpy_is_converted():
    for dtype in (">f4", ">i8", ">u2", ">f8", ">c8"):
        big = np.arange(1, 4).astype(dtype)
        got = disco.Tensor.from_numpy(big).numpy()
        assert got.dtype.isnative, dtype
        np.testing.assert_array_equal(got, [1, 2, 3])
    bits = np.array([0x3F80, 0xC020], dtype=">u2")  # bfloat16 1.0, -2.5 as big-endian uint16
    b = disco.Tensor.from_numpy(bits, "bfloat16")
    np.testing.assert_array_equal(b.numpy(), [0x3F80, 0xC020])


def test_non_native_copies_to_and_from_worker_0(sess):
    big = np.arange(1, 5, dtype=">f4")
    r = sess.copy_to_worker_0(big)
    np.testing.assert_array_equal(r.debug_get_from_remote(0), [1, 2, 3, 4])
    dst = sess.empty((4,), "float32")
    sess.copy_to_worker_0(big * 2, dst)
    np.testing.assert_array_equal(dst.debug_get_from_remote(0), [2, 4, 6, 8])
    # Into a big-endian destination: the values, converted.
    out = np.zeros(4, dtype=">f4")
    sess.copy_from_worker_0(out, dst)
    np.testing.assert_array_equal(out, [2, 4, 6, 8])
    out_i = np.zeros(3, dtype=">i8")
    sess.copy_from_worker_0(out_i, sess.copy_to_worker_0(np.array([1, -2, 3], dtype="<i8")))
    np.testing.assert_array_equal(out_i, [1, -2, 3])


def test_non_native_broadcast_scatter_and_debug_copy(ccl):
    sess = ccl
    n = sess.num_workers
    b = sess.broadcast(np.arange(1, 5, dtype=">i8"), in_group=False)
    for w in range(n):
        np.testing.assert_array_equal(b.debug_get_from_remote(w), [1, 2, 3, 4])
    s = sess.scatter(np.arange(2 * n, dtype=">f8").reshape(2 * n, 1), in_group=False)
    for w in range(n):
        np.testing.assert_array_equal(s.debug_get_from_remote(w), [[2 * w], [2 * w + 1]])
    x = sess.empty((3,), "float32")
    for w in range(n):
        x.debug_copy_from(w, np.full(3, w + 0.5, dtype=">f4"))
    for w in range(n):
        np.testing.assert_array_equal(x.debug_get_from_remote(w), [w + 0.5] * 3)


def test_non_native_worker_function_arguments_and_results(sess):
    last = sess.num_workers - 1
    total = sess.get_global_func("test.py.sum")(np.arange(1, 5, dtype=">f4"))
    for w in range(sess.num_workers):
        assert total.debug_get_from_remote(w) == 10.0
    info = sess.get_global_func("test.py.array_info")(np.arange(4, dtype=">i4"))
    assert info.debug_get_from_remote(last)[:2] == ("int32", (4,))
    made = sess.get_global_func("test.py.big_endian")(4)
    for w in (0, last):
        got = made.debug_get_from_remote(w)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, [1, 2, 3, 4])


# ---- Worker 0 holds the value at call time, like every other worker ------------------------------

def test_worker_0_keeps_the_value_at_call_time(ccl):
    sess = ccl
    n = sess.num_workers
    echo = sess.get_global_func("test.py.echo")
    buf = np.ones(4, dtype="float32")
    kept = echo(buf)  # the register keeps the argument
    view = echo(buf.reshape(2, 2))  # a view of the caller's array
    through_producer = echo(Producer(buf))
    sess.sync_all()
    buf[:] = 100  # the caller reuses its buffer
    for w in range(n):
        np.testing.assert_array_equal(kept.debug_get_from_remote(w), [1] * 4)
        np.testing.assert_array_equal(view.debug_get_from_remote(w), [[1, 1], [1, 1]])
        np.testing.assert_array_equal(through_producer.debug_get_from_remote(w), [1] * 4)
    sess.allreduce(kept, kept, in_group=False)
    for w in range(n):
        np.testing.assert_array_equal(kept.debug_get_from_remote(w), [n] * 4)


def test_a_worker_function_writing_its_argument_leaves_the_caller_alone(sess):
    buf = np.zeros(4, dtype="int32")
    sess.get_global_func("test.py.add_inplace")(buf, 5)
    sess.sync_all()
    np.testing.assert_array_equal(buf, [0] * 4)
    t = disco.Tensor.from_numpy(np.zeros(3, dtype="float32"))
    sess.get_global_func("test.py.add_inplace")(t, 1.0)
    sess.sync_all()
    np.testing.assert_array_equal(t.numpy(), [0] * 3)


# ---- Non-contiguous inputs: numpy arrays and DLPack producers alike ------------------------------

def test_non_contiguous_dlpack_producers_are_copied(sess):
    last = sess.num_workers - 1
    a = np.arange(24, dtype="float32").reshape(4, 6)
    cases = {"transposed": a.T, "column slice": a[:, ::2], "negative stride": a[::-1],
             "offset": a[1:3, 2:5]}
    for name, v in cases.items():
        t = disco.Tensor.from_dlpack(Producer(v))
        np.testing.assert_array_equal(t.numpy(), v, err_msg=name)
        r = sess.copy_to_worker_0(Producer(v))
        np.testing.assert_array_equal(r.debug_get_from_remote(0), v, err_msg=name)
        e = sess.get_global_func("test.py.echo")(Producer(v))
        np.testing.assert_array_equal(e.debug_get_from_remote(last), v, err_msg=name)


def test_non_contiguous_torch_tensors(sess):
    torch = pytest.importorskip("torch")
    last = sess.num_workers - 1
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    expected = t.T.numpy()
    r = sess.copy_to_worker_0(t.T)
    back = np.zeros((3, 2), dtype="float32")
    sess.copy_from_worker_0(back, r)
    np.testing.assert_array_equal(back, expected)
    e = sess.get_global_func("test.py.echo")(t.T)
    np.testing.assert_array_equal(e.debug_get_from_remote(last), expected)
    made = sess.get_global_func("test.py.transposed_torch")(2, 3)  # returned by a worker function
    sess.sync_all()
    for w in (0, last):
        np.testing.assert_array_equal(made.debug_get_from_remote(w), expected)
