"""Every Session method, Python worker functions and the values that cross between them."""

import threading
import time

import numpy as np
import pytest

import disco
from producers import Producer


def test_sizes(sess):
    assert sess.num_workers >= 1
    assert sess.num_groups >= 1
    assert sess.num_workers % sess.num_groups == 0


def test_call_packed_and_dpackedfunc(sess):
    f = sess.get_global_func("test.py.scale")
    assert isinstance(f, disco.DPackedFunc) and isinstance(f, disco.DRef)
    x = sess.empty((4,), "float32")
    sess.copy_to_worker_0(np.arange(4, dtype="float32"), x)
    y = f(x, 2.0)
    z = sess.call_packed(f, x, 3.0)
    np.testing.assert_array_equal(y.debug_get_from_remote(0), [0, 2, 4, 6])
    np.testing.assert_array_equal(z.debug_get_from_remote(0), [0, 3, 6, 9])


def test_worker_info_on_every_worker(sess):
    r = sess.get_global_func("test.py.worker")()
    for w in range(sess.num_workers):
        wid, n, group, groups = r.debug_get_from_remote(w)
        assert (wid, n, groups) == (w, sess.num_workers, sess.num_groups)
        assert group == w // (n // groups)


def test_builtin_worker_id_and_num_workers(sess):
    ids = sess.get_global_func("disco.worker_id")()
    counts = sess.get_global_func("disco.num_workers")()
    for w in range(sess.num_workers):
        assert ids.debug_get_from_remote(w) == w
        assert counts.debug_get_from_remote(w) == sess.num_workers


def test_empty_shapes_dtypes_and_placement(sess):
    info = sess.get_global_func("test.py.array_info")
    for dtype in ["int8", "uint16", "int32", "int64", "float16", "float32", "float64"]:
        x = sess.empty((2, 3), dtype)
        assert info(x).debug_get_from_remote(sess.num_workers - 1) == (dtype, (2, 3), True, True)
    x = sess.empty([5], np.float32)
    assert info(x).debug_get_from_remote(0)[:2] == ("float32", (5,))
    scalar = sess.empty((), "float64")
    assert info(scalar).debug_get_from_remote(0)[1] == ()
    only0 = sess.empty((3,), "float32", worker0_only=True)
    assert only0.debug_get_from_remote(0).shape == (3,)
    if sess.num_workers > 1:
        assert only0.debug_get_from_remote(1) is None
    on_cpu = sess.empty((1,), "int32", device=disco.cpu())
    assert on_cpu.debug_get_from_remote(0).dtype == np.int32
    with pytest.raises(ValueError, match="bogus"):
        sess.empty((2,), "bogus")
    with pytest.raises(TypeError):
        sess.empty(("a",), "float32")
    with pytest.raises(ValueError, match="device 'tpu'"):
        sess.empty((2,), "float32", device="tpu")


def test_syncs(sess):
    sleep_on = sess.get_global_func("test.py.sleep_on")
    last = sess.num_workers - 1
    t0 = time.monotonic()
    sleep_on(last, 0.2)
    sess.sync_worker_0()
    sess.sync_worker(last)
    assert time.monotonic() - t0 >= 0.15
    sess.sync_all()
    with pytest.raises(ValueError):
        sess.sync_worker(sess.num_workers)


def test_copies_to_and_from_worker_0(sess):
    host = np.arange(12, dtype="float64").reshape(3, 4)
    r = sess.copy_to_worker_0(host)  # allocated on worker 0
    back = np.zeros_like(host)
    sess.copy_from_worker_0(back, r)  # written in place
    np.testing.assert_array_equal(back, host)
    dst = sess.empty((3, 4), "float64", worker0_only=True)
    assert sess.copy_to_worker_0(host * 2, dst) is dst
    sess.copy_from_worker_0(back, dst)
    np.testing.assert_array_equal(back, host * 2)
    # A strided source is copied first; a read-only one too.
    sess.copy_to_worker_0(np.arange(24, dtype="float64").reshape(3, 8)[:, ::2], dst)
    sess.copy_from_worker_0(back, dst)
    np.testing.assert_array_equal(back, np.arange(24).reshape(3, 8)[:, ::2])
    ro = host.copy()
    ro.setflags(write=False)
    sess.copy_to_worker_0(ro, dst)
    with pytest.raises(ValueError, match="writeable and C-contiguous"):
        sess.copy_from_worker_0(np.zeros((4, 3)).T, dst)
    with pytest.raises(ValueError):
        sess.copy_from_worker_0(np.zeros((2, 2)), dst)  # wrong size
    with pytest.raises(TypeError, match="expected a tensor"):
        sess.copy_to_worker_0([1, 2, 3], dst)


def test_python_functions_get_views_and_return_arrays(sess):
    x = sess.empty((4,), "int32")
    sess.get_global_func("test.py.fill_worker_id")(x)
    sess.get_global_func("test.py.add_inplace")(x, 10)
    for w in range(sess.num_workers):
        np.testing.assert_array_equal(x.debug_get_from_remote(w), [10 + w] * 4)
    made = sess.get_global_func("test.py.full")((2, 2), "float16", 1.5)
    got = made.debug_get_from_remote(sess.num_workers - 1)
    assert got.dtype == np.float16 and got.shape == (2, 2) and (got == 1.5).all()


def test_values_round_trip_through_worker_functions(sess):
    echo = sess.get_global_func("test.py.echo")
    types = sess.get_global_func("test.py.type_names")
    values = [None, True, -(2 ** 63), 2.5, "text", b"\x00bytes", (1, 2, 3), (1, "a", 2.0),
              {"k": 1, "v": (2, 3)}, ()]
    last = sess.num_workers - 1
    for v in values:
        assert echo(v).debug_get_from_remote(last) == v, v
    assert types(1, 2.0, "s", b"b", (1,), {"a": 1}, None, True).debug_get_from_remote(last) == (
        "int", "float", "str", "bytes", "tuple", "dict", "NoneType", "bool")
    assert echo(np.int16(7)).debug_get_from_remote(last) == 7
    assert echo(np.float32(0.5)).debug_get_from_remote(last) == 0.5
    with pytest.raises(ValueError, match="int64"):
        echo(2 ** 70)


def test_python_objects_stay_in_registers(sess):
    counter = sess.get_global_func("test.py.state_new")()
    bump = sess.get_global_func("test.py.state_bump")
    bump(counter)
    n = bump(counter)
    assert n.debug_get_from_remote(sess.num_workers - 1) == 2


def test_debug_copy_from_and_get(sess):
    x = sess.empty((3,), "float32")
    for w in range(sess.num_workers):
        x.debug_copy_from(w, np.full(3, w, dtype="float32"))
    for w in range(sess.num_workers):
        np.testing.assert_array_equal(x.debug_get_from_remote(w), [w] * 3)
    with pytest.raises(ValueError):
        x.debug_get_from_remote(sess.num_workers + 5)


def test_remote_errors_carry_the_python_traceback(sess):
    sess.get_global_func("test.py.fail")("bad input 17")
    with pytest.raises(disco.RemoteError) as info:
        sess.sync_all()
    msg = str(info.value)
    assert info.value.worker in range(sess.num_workers)
    assert "bad input 17" in msg and "ValueError" in msg
    assert "helper_that_raises" in msg and "funcs.py" in msg  # the traceback's last lines
    assert isinstance(info.value, RuntimeError)


def test_remote_error_names_the_failing_worker(sess):
    last = sess.num_workers - 1
    sess.get_global_func("test.py.fail_on")(last, "only here")
    with pytest.raises(disco.RemoteError) as info:
        sess.sync_all()
    assert info.value.worker == last
    assert "only here" in str(info.value) and "KeyError" in str(info.value)
    sess.sync_all()  # the session goes on


def test_unknown_function_is_a_remote_error(sess):
    sess.get_global_func("test.py.no_such_function")
    with pytest.raises(disco.RemoteError, match="no_such_function"):
        sess.sync_all()


def test_argument_type_errors(sess):
    with pytest.raises(TypeError, match="DRef"):
        sess.allreduce(np.zeros(2), None)
    with pytest.raises(TypeError):
        sess.call_packed("not a function")


def test_the_gil_is_released_while_the_session_waits(sess, tmp_path):
    # The last worker waits until a file appears; the controller waits for it in sync_all; a thread
    # of the controller's process makes the file after ticking 20 times, which it can only do if
    # the wait released the GIL. No deadline: a held GIL shows as the worker's guard (120 s) raising.
    target = sess.num_workers - 1
    flag = str(tmp_path / "flag")
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            if ticks[0] == 20:
                open(flag, "w").close()
            time.sleep(0.001)

    t = threading.Thread(target=count)
    try:
        if target == 0:
            t.start()  # worker 0 runs in this process, maybe as the call is made
        sess.get_global_func("test.py.wait_for_file")(target, flag, 120.0)
        if target != 0:
            t.start()  # after the call was sent: the ticks happen while the controller waits
        sess.sync_all()
    finally:
        stop.set()
        if t.is_alive():
            t.join()
    assert ticks[0] >= 20


def test_drefs_dropped_on_other_threads_are_freed(sess):
    refs = [sess.empty((1,), "float32") for _ in range(8)]
    t = threading.Thread(target=refs.clear)
    t.start()
    t.join()
    sess.sync_all()  # the next call frees them on the session's thread
    x = sess.empty((1,), "float32")
    assert x.debug_get_from_remote(0).shape == (1,)


def test_tensor_dlpack_and_half_types():
    t = disco.Tensor.empty((2, 3), "float32")
    a = np.from_dlpack(t)  # numpy 1.x makes DLPack imports read-only; the memory is shared
    t.numpy()[...] = 7
    assert t.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(a, np.full((2, 3), 7, dtype="float32"))
    src = np.arange(6, dtype="float16")
    h = disco.Tensor.from_dlpack(src)
    src[0] = 9  # shares memory
    assert h.dtype == "float16" and h.numpy()[0] == 9
    bits = (np.array([1.0, -2.5], dtype="float32").view("uint32") >> 16).astype("uint16")
    b = disco.Tensor.from_numpy(bits, "bfloat16")
    assert b.dtype == "bfloat16" and b.shape == (2,)
    np.testing.assert_array_equal(b.numpy(), bits)
    with pytest.raises(ValueError, match="element sizes"):
        disco.Tensor.from_numpy(bits, "float32")


def test_float16_and_bfloat16_round_trip(ccl):
    sess = ccl
    last = sess.num_workers - 1
    h = np.array([0.5, -1.25, 65504.0], dtype="float16")
    r = sess.broadcast(h)
    got = r.debug_get_from_remote(last)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, h)
    bits = (np.array([1.0, 3.0, -0.5], dtype="float32").view("uint32") >> 16).astype("uint16")
    rb = sess.empty((3,), "bfloat16")
    for w in range(sess.num_workers):
        rb.debug_copy_from(w, disco.Tensor.from_numpy(bits, "bfloat16"))
    got = rb.debug_get_from_remote(last)  # numpy: the uint16 bits
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, bits)
    back = (got.astype("uint32") << 16).view("float32")
    np.testing.assert_array_equal(back, [1.0, 3.0, -0.5])


def test_any_dlpack_producer_is_a_tensor(sess):
    host = np.arange(6, dtype="int32")
    r = sess.copy_to_worker_0(Producer(host))
    back = np.zeros(6, dtype="int32")
    sess.copy_from_worker_0(Producer(back), r)  # written in place through the capsule
    np.testing.assert_array_equal(back, host)
    t = disco.Tensor.from_dlpack(Producer(host))
    host[0] = 42
    assert t.numpy()[0] == 42  # shares the memory


def test_numpy_dtypes_disco_does_not_reduce_are_clear_errors(sess):
    with pytest.raises(TypeError, match="bool"):
        sess.copy_to_worker_0(np.zeros(3, dtype=bool))
    # Complex tensors are plain data to disco (no collective reduces them): they travel, or the
    # wire refuses them naming the type.
    try:
        c = sess.copy_to_worker_0(np.ones(2, dtype=np.complex64))
        got = c.debug_get_from_remote(0)
    except ValueError as e:
        assert "complex" in str(e)
    else:
        assert got.dtype == np.complex64 and (got == 1).all()


def test_a_thread_that_drives_the_session_frees_its_drefs(sess):
    # The session was made (or handed over) on another thread; this one drives it alone. Its
    # DRefs are freed by its own next call, so the register file stays small.
    ids = []
    errors = []

    def drive():
        try:
            for _ in range(300):
                x = sess.empty((1,), "float32")
                ids.append(x.reg_id)
                del x
            sess.sync_all()
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    t = threading.Thread(target=drive)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive() and not errors, errors
    assert max(ids) - min(ids) < 16, "register ids grew from %d to %d" % (min(ids), max(ids))


@pytest.mark.injob
def test_session_calls_from_inside_a_worker_function_are_refused(sess):
    import funcs

    ref = sess.get_global_func("test.py.echo")
    funcs.REENTRY.update(sess=sess, ref=ref)
    try:
        call_session = sess.get_global_func("test.py.call_session")
        for what in ["empty", "get_global_func", "call", "sync_all", "sync_worker_0",
                     "copy_to_worker_0", "num_workers", "debug_get_from_remote"]:
            got = call_session(what).debug_get_from_remote(0)
            assert got.startswith("RuntimeError: ") and (
                "session calls from inside a worker function are not allowed" in got), (what, got)
    finally:
        funcs.REENTRY.clear()
    sess.sync_all()  # the session goes on
    x = sess.empty((3,), "float32")
    sess.copy_to_worker_0(np.arange(3, dtype="float32"), x)
    np.testing.assert_array_equal(ref(x).debug_get_from_remote(0), [0, 1, 2])
    assert ref(x).debug_get_from_remote(sess.num_workers - 1).shape == (3,)
