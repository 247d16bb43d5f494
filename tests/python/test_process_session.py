"""disco.ProcessSession from a plain process (no mpirun around it), and `python3 -m disco`.

Each test starts jobs of its own; a plain pytest runs this file (CTest: python.process). The
processes of a session are found by a marker in their environment (/proc/PID/environ), so that a
test can say that none is left after its controller was killed.
"""

import gc
import queue
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

import disco
import session_env

pytestmark = pytest.mark.skipif(session_env.SESSION is not None,
                                reason="starts jobs of its own: run by a plain pytest")

HERE = os.path.dirname(os.path.abspath(__file__))


def _env_with_path(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra or {})
    return env


def _marked(marker):
    """PIDs of this user's processes whose environment holds DISCO_TEST_MARK=marker."""
    needle = ("DISCO_TEST_MARK=" + marker).encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            pass
    return pids


def _describe(pids):
    out = []
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                out.append("%d %s" % (pid, f.read().replace(b"\0", b" ").decode(errors="replace")))
        except OSError:
            out.append("%d (gone)" % pid)
    return out


def _read_until(proc, wanted, limit_s=120):
    """The first line of `proc`'s stdout for which `wanted(line)` holds; fails naming every line
    read when none came within `limit_s` (a guard: the line comes within seconds)."""
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    seen = []
    deadline = time.monotonic() + limit_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail("no such line in %s s; read: %r" % (limit_s, seen))
        if line is None:
            pytest.fail("the output ended (exit %s); read: %r" % (proc.poll(), seen))
        seen.append(line)
        if wanted(line):
            return line


def _wait_marked(marker, count, limit_s=60):
    """Waits until `count` processes carry the marker (the launcher and the ranks); returns them."""
    deadline = time.monotonic() + limit_s
    while True:
        pids = _marked(marker)
        if len(pids) >= count or time.monotonic() > deadline:
            assert len(pids) >= count, "the job's processes: %s" % _describe(pids)
            return pids
        time.sleep(0.05)


def _wait_gone(marker, limit_s):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        left = _marked(marker)
        if not left:
            return []
        time.sleep(0.1)
    return _marked(marker)


def test_open_use_close_and_open_again_in_one_process():
    # A notebook's loop: sessions one after another, and a second one while the first is open.
    for round_ in range(2):
        with disco.ProcessSession(2, modules=["funcs"]) as sess:
            assert sess.num_workers == 2 and sess.is_remote
            assert repr(sess) == "disco.ProcessSession(num_workers=2, num_groups=1, job pid %d)" \
                % sess._proc.pid
            f = sess.get_global_func("test.py.scale")
            x = sess.empty((4,), "float32")
            sess.copy_to_worker_0(np.arange(4, dtype="float32"), x)
            y = f(x, 2.0 + round_)
            np.testing.assert_array_equal(y.debug_get_from_remote(0),
                                          np.arange(4, dtype="float32") * (2.0 + round_))
            with disco.ProcessSession(1) as other:
                assert other.num_workers == 1
            assert other.exit_code == 0
        assert sess.exit_code == 0
        assert repr(sess) == "disco.ProcessSession(ended, exit code 0)"


def test_collectives_and_import_python_module():
    with disco.ProcessSession(2) as sess:
        sess.import_python_module("funcs")
        sess.init_ccl("mpi")
        t = sess.empty((3,), "float32")
        host = np.array([1, 2, 3], dtype="float32")
        sess.broadcast(host, t)
        for w in range(2):
            np.testing.assert_array_equal(t.debug_get_from_remote(w), host)
        out = sess.empty((3,), "float32")
        sess.allreduce(t, out)
        np.testing.assert_array_equal(out.debug_get_from_remote(1), host * 2)
        with pytest.raises(disco.RemoteError, match="no_such_module_here"):
            sess.import_python_module("no_such_module_here")
        sess.sync_all()  # the session goes on
        with pytest.raises(ValueError):
            sess.import_python_module("")


def test_bad_arguments_are_value_errors_before_anything_starts():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_workers"):
            disco.ProcessSession(bad)
    with pytest.raises(ValueError, match="num_groups"):
        disco.ProcessSession(4, num_groups=3)
    with pytest.raises(ValueError, match="entrypoint"):
        disco.ProcessSession(2, entrypoint="--port")


def test_an_entrypoint_that_fails_is_an_error_naming_the_job_and_nothing_is_left():
    marker = uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="exited with code"):
        disco.ProcessSession(2, entrypoint="no_such_entrypoint_module",
                             env={"DISCO_TEST_MARK": marker})
    assert _wait_gone(marker, 30) == []


def test_a_session_that_is_garbage_collected_ends_its_job():
    marker = uuid.uuid4().hex
    sess = disco.ProcessSession(2, env={"DISCO_TEST_MARK": marker})
    _wait_marked(marker, 3)  # the launcher and two ranks
    proc = sess._proc
    del sess
    gc.collect()
    assert proc.poll() == 0
    assert _wait_gone(marker, 30) == []


_CONTROLLER = textwrap.dedent("""
    import sys, time, disco
    entry = sys.argv[1]
    sess = disco.ProcessSession(2, entrypoint=entry, modules=["funcs"],
                                env={"DISCO_TEST_MARK": sys.argv[2]})
    print("attached", flush=True)
    sess.get_global_func("test.py.sleep_on")(1, 3600.0)   # a busy worker, as in a long call
    time.sleep(3600)
""")


@pytest.mark.parametrize("when", ["attached", "starting"])
def test_no_process_is_left_when_the_controller_is_killed(tmp_path, when):
    # Killed while attached (the server loses its one client) and while the job is still starting
    # (rank 0's standard input closes before anyone attached): the job ends, every process of it.
    marker = uuid.uuid4().hex
    (tmp_path / "slow_entry.py").write_text(
        "import sys, time\ntime.sleep(4)\nfrom disco.serve import run\nsys.exit(run())\n")
    entry = "disco.serve" if when == "attached" else "slow_entry"
    ctl = subprocess.Popen([sys.executable, "-c", _CONTROLLER, entry, marker],
                           env=_env_with_path({"PYTHONPATH": os.pathsep.join(
                               [str(tmp_path), HERE, os.environ.get("PYTHONPATH", "")])}),
                           stdout=subprocess.PIPE, text=True, cwd=str(tmp_path))
    try:
        if when == "attached":  # after the launcher's and the server's lines
            _read_until(ctl, lambda line: line.strip() == "attached")
        _wait_marked(marker, 3)  # the launcher and both ranks run (attached, or starting)
        ctl.kill()
        ctl.wait()
        left = _wait_gone(marker, 60)
        assert left == [], "processes left after the controller was killed: %s" % _describe(left)
    finally:
        if ctl.poll() is None:
            ctl.kill()
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)


def test_long_loads_and_saves_print_progress_on_rank_0(tmp_path, capfd):
    # DISCO_PROGRESS_MS=1: every load and save is "long"; the lines go to the job's stderr (ours).
    path = str(tmp_path / "ckpt.h5")
    with disco.ProcessSession(2, env={"DISCO_PROGRESS_MS": "1"}) as sess:
        refs = {}
        for i in range(3):
            x = sess.empty((256, 1024), "float32")
            refs["t%d" % i] = (x, 0)
        sess.save_tensors(path, refs)
        loaded = sess.load_tensors(path, {"t0": 0, "t1": 0, "t2": -1})
        sess.sync_all()
        assert set(loaded) == {"t0", "t1", "t2"}
    err = capfd.readouterr().err
    assert re.search(r"disco: saved %s: 3 datasets, 3\.0 MiB on worker 0 in [0-9.]+ s "
                     r"\([0-9]+ MiB/s\)" % re.escape(path), err), err
    assert "partial" not in err  # a save's lines name the file it makes
    assert re.search(r"disco: loaded %s: 3 datasets, 4\.0 MiB on worker 0 in " % re.escape(path),
                     err), err
    assert err.count("disco: loaded ") == 1  # rank 0 only
    # Off, and the default (3 s) for loads this small: no line.
    for env in ({"DISCO_PROGRESS_MS": "0"}, {}):
        with disco.ProcessSession(2, env=env) as sess:
            sess.load_tensors(path, {"t0": 0})
            sess.sync_all()
        assert "disco: load" not in capfd.readouterr().err
    # A bad value is a warning naming the variable; the load goes on.
    with disco.ProcessSession(2, env={"DISCO_PROGRESS_MS": "soon"}) as sess:
        sess.load_tensors(path, {"t0": 0})
        sess.sync_all()
    assert "DISCO_PROGRESS_MS='soon' is not a whole number of milliseconds" in \
        capfd.readouterr().err


_FORKER = textwrap.dedent("""
    import os, sys, time, disco
    sess = disco.ProcessSession(2, env={"DISCO_TEST_MARK": sys.argv[1]})
    pid = os.fork()
    if pid == 0:  # the child: cannot end its parent's session, and leaves it alone when it exits
        try:
            sess.shutdown()
        except RuntimeError as e:
            print("child:", e, flush=True)
        if sys.argv[2] == "exit":
            sys.exit(0)
        time.sleep(3600)
    if sys.argv[2] == "exit":
        os.waitpid(pid, 0)
        sess.sync_all()
        print("parent:", repr(sess), flush=True)
        sess.shutdown()
        print("exit code", sess.exit_code, flush=True)
    else:  # the child's pid, in a file (renamed into place: read whole or not at all)
        with open(sys.argv[3] + ".tmp", "w") as f:
            f.write(str(pid))
        os.rename(sys.argv[3] + ".tmp", sys.argv[3])
        time.sleep(3600)
""")


def test_a_forked_child_leaves_the_session_to_its_parent():
    marker = uuid.uuid4().hex
    r = subprocess.run([sys.executable, "-c", _FORKER, marker, "exit"], capture_output=True,
                       text=True, timeout=120, env=_env_with_path())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "child: disco.ProcessSession: this session belongs to process" in r.stdout
    assert "parent: disco.ProcessSession(num_workers=2, num_groups=1, job pid" in r.stdout
    assert "exit code 0" in r.stdout
    assert _wait_gone(marker, 30) == []


def test_the_job_ends_with_its_controller_even_while_a_forked_child_lives(tmp_path):
    # The child's copies of the connection and of rank 0's stdin are closed at the fork.
    marker = uuid.uuid4().hex
    pid_file = tmp_path / "child.pid"
    ctl = subprocess.Popen([sys.executable, "-c", _FORKER, marker, "hold", str(pid_file)],
                           env=_env_with_path())
    child = None
    try:
        deadline = time.monotonic() + 120  # a guard: the file comes within seconds
        while not pid_file.exists():
            assert ctl.poll() is None, "the controller ended (exit %s)" % ctl.returncode
            assert time.monotonic() < deadline, "the controller never forked its child"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        job = [p for p in _wait_marked(marker, 3) if p != child]
        ctl.kill()
        ctl.wait()
        deadline = time.monotonic() + 60
        while any(os.path.exists("/proc/%d" % p) and p in _marked(marker) for p in job):
            assert time.monotonic() < deadline, "left: %s" % _describe(_marked(marker))
            time.sleep(0.1)
        assert os.path.exists("/proc/%d" % child)  # the child lives on; the job has ended
    finally:
        for pid in [child] + _marked(marker):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if ctl.poll() is None:
            ctl.kill()


def test_arguments_checked_before_anything_starts():
    for kw, what in [({"startup_timeout_s": float("nan")}, "startup_timeout_s"),
                     ({"startup_timeout_s": float("inf")}, "startup_timeout_s"),
                     ({"startup_timeout_s": "5"}, "startup_timeout_s"),
                     ({"startup_timeout_s": 0}, "startup_timeout_s"),
                     ({"modules": 5}, "modules"),
                     ({"modules": ["ok", "-x"]}, "not a module name"),
                     ({"entrypoint": "disco serve"}, "not a module name"),
                     ({"entrypoint": "disco.serve; rm -rf /"}, "not a module name"),
                     ({"python": "/nonexistent/python"}, "not an interpreter")]:
        with pytest.raises(ValueError, match=what):
            disco.ProcessSession(2, **kw)


def test_startup_time_is_recorded():
    with disco.ProcessSession(2) as sess:
        assert 0 < sess.startup_seconds < 120


# ---- python3 -m disco ----------------------------------------------------------------------------

def _run_module(args, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "disco"] + args, capture_output=True, text=True,
                          timeout=timeout, env=_env_with_path(), **kw)


def test_module_runner_help_and_bad_usage():
    r = _run_module(["--help"])
    assert r.returncode == 0 and "python3 -m disco" in r.stdout and "-n N" in r.stdout
    r = _run_module([])
    assert r.returncode == 2 and "no program given" in r.stderr
    r = _run_module(["-n", "2", "/nonexistent/script.py"])
    assert r.returncode == 2 and "no such file: /nonexistent/script.py" in r.stderr
    r = _run_module(["--frobnicate", "x.py"])
    assert r.returncode == 2 and "unknown option --frobnicate" in r.stderr
    r = _run_module(["-n", "zero", "-m", "x"])
    assert r.returncode == 2 and "-n needs a positive integer" in r.stderr
    r = _run_module(["--dry-run", "-n", "2", "-m", "json.tool", "--sort-keys"])
    assert r.returncode == 0
    assert "-n 2" in r.stdout and "-m disco._run -m json.tool --sort-keys" in r.stdout


def test_module_runner_runs_every_rank_and_passes_the_exit_code(tmp_path):
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        rank = next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
                    if v in os.environ)
        print("rank", rank, "of", sys.argv[1:], "path0", sys.path[0], flush=True)
        sys.exit(int(sys.argv[1]))
    """))
    r = _run_module(["-n", "2", str(script), "7"])
    assert r.returncode == 7, r.stdout + r.stderr
    assert r.stdout.startswith("+ ") and "disco._run" in r.stdout  # the command it ran
    assert "rank 0 of ['7'] path0 " + str(tmp_path) in r.stdout
    assert "rank 1 of ['7']" in r.stdout


def test_module_runner_ends_the_job_on_an_uncaught_exception_anywhere(tmp_path):
    # Rank 1 raises after MPI started; rank 0 would wait forever in a collective.
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent("""
        import sys, disco
        def controller(sess):
            sess.get_global_func("test.py.sleep_on")(0, 600.0)
            sess.sync_all()
            return 0
        import funcs  # noqa: F401  (test.py.sleep_on on every rank)
        import os
        rank = int(next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
                        if v in os.environ))
        if rank == 1:
            raise KeyError("rank one fails on its own")
        sys.exit(disco.main(controller))
    """))
    t0 = time.monotonic()
    r = _run_module(["-n", "2", str(script)], timeout=300)
    assert r.returncode != 0
    assert "KeyError: 'rank one fails on its own'" in r.stderr
    assert "rank 1: KeyError in " + str(script) + ", not caught: ending the job" in r.stderr
    assert time.monotonic() - t0 < 120
