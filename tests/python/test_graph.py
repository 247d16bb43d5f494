"""Capture and replay from Python (docs/graphs.md): `with sess.capture(n) as g:` records the block's
session calls; `g.replay(*inputs)` runs them on every worker; what cannot be recorded is refused
and the capture discarded. Runs in-job and served."""

import os

import numpy as np
import pytest

import disco


def test_a_captured_block_replays_with_its_inputs(ccl):
    sess = ccl
    scale = sess.get_global_func("test.py.scale")
    fill = sess.get_global_func("test.py.fill_worker_id")
    with sess.capture(num_inputs=1) as g:
        x = sess.empty((4,), "float32")        # allocated once, at install
        fill(x)
        y = scale(x, g.inputs[0])
        sess.allreduce(y, y, in_group=False)
    assert g.num_inputs == 1 and g.num_calls == 3
    assert "calls=3" in repr(g)
    n = sess.num_workers
    for k in (1.0, 2.5, -3.0):
        g.replay(k)
        for w in (0, n - 1):
            np.testing.assert_allclose(y.debug_get_from_remote(w),
                                       np.full(4, k * n * (n - 1) / 2, "float32"))


def test_errors_name_the_graph_and_the_call_and_the_session_goes_on(sess):
    fail_on = sess.get_global_func("test.py.fail_on")
    echo = sess.get_global_func("test.py.echo")
    with sess.capture(1) as g:
        a = fail_on(g.inputs[0], "asked to")
        echo(a)
    g.replay(sess.num_workers - 1)
    with pytest.raises(disco.RemoteError) as e:
        sess.sync_all()
    assert "graph %d call 0 'test.py.fail_on'" % g.id in str(e.value)
    g.replay(-1)
    sess.sync_all()


def test_what_cannot_be_recorded_is_refused_and_discarded(sess):
    echo = sess.get_global_func("test.py.echo")
    for what, call in [("SyncAll", lambda: sess.sync_all()),
                       ("SyncWorker", lambda: sess.sync_worker(0)),
                       ("a nested Capture", lambda: sess.capture(0).__enter__())]:
        with pytest.raises(ValueError, match=what):
            with sess.capture(0) as g:
                echo(1)
                call()
        with pytest.raises(ValueError):
            g.replay()
    # A block that swallows the refusal still loses its capture.
    g = sess.capture(0)
    with pytest.raises(ValueError, match="discarded"):
        with g:
            try:
                sess.sync_all()
            except ValueError:
                pass
    with pytest.raises(ValueError, match="did not complete"):
        g.replay()
    assert echo(5).debug_get_from_remote(0) == 5


def test_bad_replays_are_value_errors_before_anything_is_sent(sess):
    echo = sess.get_global_func("test.py.echo")
    with sess.capture(2) as g:
        echo(g.inputs[0], g.inputs[1])
    with pytest.raises(ValueError, match="takes 2 input"):
        g.replay(1)
    with pytest.raises(ValueError, match="takes 2 input"):
        g.replay(1, 2, 3)
    with pytest.raises(ValueError, match="placeholder"):
        echo(g.inputs[0])
    g.replay(1, 2)
    sess.sync_all()


def test_registers_given_as_inputs_are_their_values(sess):
    info = sess.get_global_func("test.py.array_info")
    with sess.capture(1) as g:
        r = info(g.inputs[0])
    x = sess.empty((3,), "float32")
    g.replay(x)
    got = r.debug_get_from_remote(sess.num_workers - 1)
    assert got[0] == "float32" and tuple(got[1]) == (3,), got
    assert isinstance(g, disco.Graph)


def test_the_callers_array_is_copied_at_replay(sess):
    keep = sess.get_global_func("test.py.echo")
    with sess.capture(1) as g:
        r = keep(g.inputs[0])
    buf = np.ones(4, "float32")
    g.replay(buf)
    sess.sync_all()
    buf[:] = 100
    for w in range(sess.num_workers):
        np.testing.assert_array_equal(r.debug_get_from_remote(w), np.ones(4, "float32"))


def test_placeholders_of_other_captures_and_nested_ones_are_refused(sess):
    # Found by outside testing: a placeholder of another capture whose index fit was taken for
    # this capture's input; one inside a tuple was passed on as a raw DRef.
    echo = sess.get_global_func("test.py.echo")
    with sess.capture(3) as g:
        echo(g.inputs[0])
    with pytest.raises(ValueError, match="placeholder of another capture"):
        with sess.capture(2) as other:
            echo(g.inputs[1])
    with pytest.raises(ValueError, match="inside a tuple or dict"):
        with sess.capture(1) as nested:
            echo((nested.inputs[0], 1))
    with pytest.raises(ValueError, match="holds a placeholder"):
        echo((g.inputs[0], 1))
    with pytest.raises(ValueError, match="holds a placeholder"):
        g.replay((g.inputs[0],), 1, 2)
    g.replay(1, 2, 3)
    sess.sync_all()
    del other, nested


def test_a_graph_made_without_capture_is_a_type_error(sess):
    # Found by outside testing: replay() of disco.Graph.__new__(disco.Graph) crashed the process.
    with pytest.raises(TypeError, match="without its constructor"):
        disco.Graph.__new__(disco.Graph).replay()
    with pytest.raises(TypeError, match="without its constructor"):
        disco.DPackedFunc.__new__(disco.DPackedFunc)(1)


def _works_after(sess, mine, x):
    """A lookup and an Empty tensor made in a capture that was not installed, and the builtins."""
    assert mine(7).debug_get_from_remote(sess.num_workers - 1) == 7
    fill = sess.get_global_func("test.py.fill_worker_id")
    y = sess.empty((4,), "float32")
    n = sess.num_workers
    for t in (x, y):
        fill(t)
        sess.allreduce(t, t, in_group=False)
        np.testing.assert_allclose(t.debug_get_from_remote(n - 1),
                                   np.full(4, n * (n - 1) / 2, "float32"))
    sess.sync_all()


def test_a_capture_that_cannot_be_installed_keeps_its_lookups(ccl):
    # Found by outside testing: a capture refused at install (here a value that cannot be sent)
    # left its lookups, and a builtin first looked up inside it, as registers holding nothing.
    sess = ccl
    with pytest.raises(ValueError, match="cannot be sent"):
        with sess.capture(0):
            mine = sess.get_global_func("test.py.echo")
            x = sess.empty((4,), "float32")
            sess.allreduce(x, x, in_group=False)
            mine(object())  # a Python object lives in one process only
    _works_after(sess, mine, x)


def test_allreduce_refuses_none_as_tvm_does(ccl):
    # Found by outside testing: allreduce(x, None) failed as "an empty DRef cannot be sent", and
    # inside a capture broke the session's allreduce. TVM's allreduce takes two DRefs.
    sess = ccl
    x = sess.empty((4,), "float32")
    for call in (lambda: sess.allreduce(x, None), lambda: sess.allreduce(None, x),
                 lambda: sess.allgather(x, None), lambda: sess.reduce_scatter(x, None)):
        with pytest.raises(TypeError, match=r"\((src|dst)\): expected a disco.DRef .* got None"):
            call()
    with pytest.raises(TypeError, match=r"allreduce\(dst\)"):
        with sess.capture(0):
            mine = sess.get_global_func("test.py.echo")
            sess.allreduce(x, None)
    _works_after(sess, mine, x)


def test_a_capture_over_the_frame_limit_keeps_its_lookups(ccl):
    # python.injob.small_frames.np2 runs this under DISCO_MAX_FRAME_BYTES=65536.
    limit = int(os.environ.get("DISCO_MAX_FRAME_BYTES") or 0)
    if not 0 < limit <= 1 << 20 or ccl.is_remote:
        pytest.skip("needs an in-job session under a small DISCO_MAX_FRAME_BYTES")
    sess = ccl
    with pytest.raises(ValueError, match="DISCO_MAX_FRAME_BYTES"):
        with sess.capture(0):
            mine = sess.get_global_func("test.py.echo")
            x = sess.empty((4,), "float32")
            for _ in range(1000):
                mine("x" * 200)
            sess.allreduce(x, x, in_group=False)
    _works_after(sess, mine, x)
