"""Collectives from Python, in every dtype numpy has that disco reduces, checked against numpy."""

import numpy as np
import pytest

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64"]
OPS = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}


def per_worker(sess, shape, dtype, value_of):
    """A register holding value_of(w) on worker w."""
    x = sess.empty(shape, dtype)
    for w in range(sess.num_workers):
        x.debug_copy_from(w, np.asarray(value_of(w), dtype=dtype).reshape(shape))
    return x


def small(w, n=5):
    return np.arange(n) % 3 + w + 1  # 1..6: exact in every dtype, products stay small


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_every_dtype_and_op(ccl, dtype):
    s, n = ccl, ccl.num_workers
    inputs = [small(w).astype(dtype) for w in range(n)]
    for op, ref in OPS.items():
        x = per_worker(s, (5,), dtype, lambda w: inputs[w])
        out = s.empty((5,), dtype)
        s.allreduce(x, out, op=op, in_group=False)
        want = ref(np.stack(inputs), axis=0).astype(dtype)
        for w in range(n):
            np.testing.assert_array_equal(out.debug_get_from_remote(w), want, err_msg=op)
    if dtype.startswith("float"):
        x = per_worker(s, (5,), dtype, lambda w: inputs[w])
        s.allreduce(x, x, op="avg", in_group=False)
        want = np.mean(np.stack(inputs).astype("float64"), axis=0)
        np.testing.assert_allclose(x.debug_get_from_remote(n - 1).astype("float64"), want,
                                   rtol=1e-3)


def test_allreduce_refuses_avg_of_integers(ccl):
    x = ccl.empty((2,), "int32")
    ccl.allreduce(x, x, op="avg")
    with pytest.raises(Exception, match="avg"):
        ccl.sync_all()


@pytest.mark.parametrize("dtype", ["int32", "float16", "float64", "uint8"])
def test_allgather_reduce_scatter(ccl, dtype):
    s, n = ccl, ccl.num_workers
    x = per_worker(s, (2, 3), dtype, lambda w: np.full((2, 3), w + 1))
    gathered = s.empty((2 * n, 3), dtype)
    s.allgather(x, gathered, in_group=False)
    want = np.concatenate([np.full((2, 3), w + 1, dtype=dtype) for w in range(n)])
    np.testing.assert_array_equal(gathered.debug_get_from_remote(n - 1), want)
    big = per_worker(s, (2 * n,), dtype, lambda w: np.arange(2 * n) % 4 + w)
    part = s.empty((2,), dtype)
    s.reduce_scatter(big, part, op="sum", in_group=False)
    total = sum((np.arange(2 * n) % 4 + w).astype(dtype) for w in range(n)).astype(dtype)
    for w in range(n):
        np.testing.assert_array_equal(part.debug_get_from_remote(w), total[2 * w:2 * w + 2])


def test_broadcast_scatter_gather(ccl):
    s, n = ccl, ccl.num_workers
    host = np.arange(4 * n * 3, dtype="float32").reshape(4 * n, 3)
    everywhere = s.broadcast(host, in_group=False)
    into = s.empty((4 * n, 3), "float32")
    assert s.broadcast(host * 2, into, in_group=False) is into
    parts = s.scatter(host, in_group=False)
    into_parts = s.empty((4, 3), "float32")
    assert s.scatter(host + 1, into_parts, in_group=False) is into_parts
    for w in range(n):
        np.testing.assert_array_equal(everywhere.debug_get_from_remote(w), host)
        np.testing.assert_array_equal(into.debug_get_from_remote(w), host * 2)
        np.testing.assert_array_equal(parts.debug_get_from_remote(w), host[4 * w:4 * w + 4])
        np.testing.assert_array_equal(into_parts.debug_get_from_remote(w),
                                      host[4 * w:4 * w + 4] + 1)
    on0 = s.copy_to_worker_0(host)
    dst = s.empty((4 * n, 3), "float32")
    s.broadcast_from_worker0(on0, dst, in_group=False)
    np.testing.assert_array_equal(dst.debug_get_from_remote(n - 1), host)
    piece = s.empty((4, 3), "float32")
    s.scatter_from_worker0(on0, piece, in_group=False)
    np.testing.assert_array_equal(piece.debug_get_from_remote(n - 1), host[-4:])
    gathered = s.empty((4 * n, 3), "float32", worker0_only=True)
    s.gather_to_worker0(piece, gathered, in_group=False)
    np.testing.assert_array_equal(gathered.debug_get_from_remote(0), host)
    s.barrier()
    s.sync_all()
    if n > 1:
        with pytest.raises(ValueError, match="cannot be split"):
                s.scatter(np.zeros((4 * n + 1, 2), dtype="float32"), in_group=False)


def test_collectives_in_groups(ccl):
    s, n, g = ccl, ccl.num_workers, ccl.num_groups
    size = n // g
    x = per_worker(s, (3,), "int64", lambda w: [w, w, w])
    out = s.empty((3,), "int64")
    s.allreduce(x, out, op="sum", in_group=True)
    for w in range(n):
        first = (w // size) * size
        assert out.debug_get_from_remote(w)[0] == sum(range(first, first + size))
    s.barrier(in_group=True)
    s.sync_all()


def test_init_ccl_again_and_bad_names(ccl):
    ccl.init_ccl("mpi")
    with pytest.raises(Exception, match="bogus"):
        ccl.init_ccl("bogus")
        ccl.sync_all()
    ccl.init_ccl("mpi")
    x = ccl.broadcast(np.ones(2, dtype="float32"))
    np.testing.assert_array_equal(x.debug_get_from_remote(ccl.num_workers - 1), [1, 1])
