"""How whole jobs end: each test starts `mpirun -n N python3 job_app.py MODE` (or a plain process)
and checks its exit code and output. Run by a plain pytest (the python.jobs test), not inside a
session: the in-job and served runs skip this file.

DISCO_TEST_MPIEXEC is the launcher with its process-count flag last (CTest passes CMake's; by
default "mpirun -n", with --oversubscribe where launch/disco-run finds Open MPI)."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

import session_env

pytestmark = pytest.mark.skipif(session_env.SESSION is not None,
                                reason="starts jobs of its own: run by a plain pytest")

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "job_app.py")


def default_mpiexec():
    which = subprocess.run([os.path.join(HERE, "..", "..", "launch", "disco-run"), "--which-mpi"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return "mpirun --oversubscribe -n" if which == "openmpi" else "mpirun -n"


MPIEXEC = shlex.split(os.environ.get("DISCO_TEST_MPIEXEC") or default_mpiexec())


def job_env(**extra):
    env = dict(os.environ)
    # Not inside the launcher's own environment (a test run under mpirun).
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "OMPI_MCA_ess", "OMPI_MCA_orte", "PMI_")):
            del env[k]
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(ranks, *args, timeout=90, env=None):
    """Runs job_app.py at `ranks` ranks (0: without a launcher); returns (code, output, seconds)."""
    cmd = [sys.executable, APP] + [str(a) for a in args]
    if ranks:
        cmd = MPIEXEC + [str(ranks)] + cmd
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env or job_env(), start_new_session=True)
    try:
        out = p.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher and every rank it started
        out = p.communicate()[0]
        out += b"\n[test_jobs: killed after %d s]" % timeout
    return p.returncode, out.decode(errors="replace"), time.monotonic() - t0


# ---- The exit code of a script that ends in plain disco.main(controller) -----------------------

def test_a_controller_that_raises_ends_the_process_non_zero_without_sys_exit():
    code, out, _ = run(2, "raise")
    assert code != 0, out
    assert "controller failed on purpose" in out
    assert "after disco.main on rank 0" not in out  # the failure propagates (SystemExit)


def test_sys_exit_in_the_controller_and_unsynced_errors_end_the_process_non_zero():
    code, out, _ = run(2, "sys_exit", 4)
    assert code == 4, out
    code, out, _ = run(2, "unsynced_error")
    assert code != 0, out


def test_sys_exit_of_main_keeps_the_controllers_code():
    code, out, _ = run(2, "sys_exit_main", "return", 3)
    assert code == 3, out
    code, out, _ = run(2, "sys_exit_main", "return", "None")
    assert code == 0, out
    code, out, _ = run(2, "sys_exit_main", "raise")
    assert code == 1, out
    code, out, _ = run(1, "return", 0)  # a plain disco.main of a controller that succeeded
    assert code == 0 and "after disco.main on rank 0" in out, out


def test_a_controller_returning_a_non_int_is_a_clear_type_error():
    code, out, _ = run(2, "sys_exit_main", "return", "'ok'")
    assert code == 1, out
    assert "the controller must return an int exit code or None, got str" in out, out
    assert "Unable to cast" not in out


# ---- MPI after disco.main ------------------------------------------------------------------------

def test_disco_main_twice_in_one_process():
    code, out, _ = run(2, "main_twice")
    assert code == 0, out
    assert "codes [3, 2]" in out, out


def test_mpi4py_imported_after_disco_main_can_be_used():
    pytest.importorskip("mpi4py")
    code, out, _ = run(2, "mpi4py_after_main")
    assert code == 0, out
    assert "mpi4py after disco.main: allreduce gave 2" in out, out


def test_disco_main_after_mpi_finalize_is_a_clear_error():
    pytest.importorskip("mpi4py")
    code, out, _ = run(2, "main_after_finalize")
    assert code == 0, out
    assert "RuntimeError:" in out, out
    assert "disco.main: MPI has been finalized in this process" in out, out


# ---- The watchdog and a controller outside the runtime -------------------------------------------

def test_a_controller_blocked_in_its_own_mpi_call_ends_the_job():
    pytest.importorskip("mpi4py")
    code, out, seconds = run(2, "mpi4py_barrier", env=job_env(DISCO_TIMEOUT=3), timeout=60)
    assert code != 0, out
    assert "controller enters MPI_Barrier" in out
    assert re.search(r"controller .* inside MPI_Barrier", out), out
    assert "disco's command loop" in out, out
    assert "in controller" in out, out  # the controller's Python stack (faulthandler)
    assert seconds < 40, (seconds, out)


def test_a_controller_computing_past_the_timeout_is_not_ended():
    code, out, _ = run(2, "compute", 5, env=job_env(DISCO_TIMEOUT=2), timeout=60)
    assert code == 0, out
    assert "watchdog" not in out, out


def test_a_stuck_python_worker_function_shows_its_python_stack():
    for worker in (0, 1):
        code, out, seconds = run(2, "stuck_worker", worker, env=job_env(DISCO_TIMEOUT=3),
                                 timeout=60)
        assert code != 0, out
        assert "past DISCO_TIMEOUT=3" in out, out
        assert "stuck_in_python" in out and "stuck_on" in out, out  # the Python stack
        # Not a collective: no rank is said to be missing (B11b)
        assert "never arrived" not in out, out
        assert "it is not a collective: the function itself is still running" in out, out
        assert seconds < 40, (seconds, out)


def test_utf8_function_names_stay_readable_in_the_trace_and_the_watchdog_line(tmp_path):
    path = str(tmp_path / "t.json")
    code, out, _ = run(2, "utf8_names", env=job_env(DISCO_TRACE=path))
    assert code == 0, out
    with open(path, encoding="utf-8") as f:  # JSON is UTF-8 (RFC 8259)
        names = [e["name"] for e in json.load(f)["traceEvents"]]
    for name in ("test.job.répétition", "test.job.函数"):
        assert name in names, names  # a run event of each rank, named after the function
    r = subprocess.run([sys.executable, "-m", "disco.trace", path], capture_output=True,
                       env=job_env(PYTHONIOENCODING="utf-8"), check=False)
    summary = r.stdout.decode("utf-8")
    assert r.returncode == 0 and "test.job.函数" in summary, (summary, r.stderr)
    code, out, _ = run(2, "stuck_utf8", 1, env=job_env(DISCO_TIMEOUT=3), timeout=60)
    assert code != 0, out
    for what in ("watchdog: command", "hang culprit: "):  # the rank's line, the job's verdict
        assert any(what in line and "'test.job.函数'" in line for line in out.splitlines()), out


def test_no_watchdog_line_after_disco_main_returned():
    p = subprocess.Popen([sys.executable, APP, "sigterm_after_main"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=job_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        line = b""
        while time.monotonic() < deadline and b"returned" not in line:
            line = p.stdout.readline()
            if not line and p.poll() is not None:
                break
        assert b"returned 0" in line, line
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=30)[0].decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGTERM, (p.returncode, out)
    assert "watchdog" not in out, out


# ---- The interpreter a build is for --------------------------------------------------------------

def test_another_python_version_gets_a_clear_import_error(tmp_path):
    import shutil

    import disco

    pkg = os.path.dirname(disco.__file__)
    copy = tmp_path / "disco"
    shutil.copytree(pkg, copy)
    info = copy / "_build_info.py"
    text = info.read_text()
    major, minor = sys.version_info[:2]
    text = re.sub(r"PYTHON_VERSION = \(\d+, \d+\)",
                  "PYTHON_VERSION = (%d, %d)" % (major, minor + 1), text)
    info.write_text(text)
    p = subprocess.run([sys.executable, "-c", "import disco"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=job_env(PYTHONPATH=str(tmp_path)), timeout=60)
    out = p.stdout.decode()
    assert p.returncode != 0
    assert "disco was built for CPython %d.%d" % (major, minor + 1) in out, out
    assert "this is %d.%d" % (major, minor) in out, out
