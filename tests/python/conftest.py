"""The `sess` fixture: the live session of the job this suite runs in (run_in_job.py puts pytest
on rank 0 as the controller), or a client of a served job (run_served.sh: DISCO_TEST_SERVER is
host:port, the key in DISCO_SERVE_KEY). Test files go to DISCO_TEST_SHARED_DIR, a directory every
rank sees (default: the system's temporary directory)."""

import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import disco  # noqa: E402
import session_env  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "injob: needs the in-job session (not a served one)")
    config.addinivalue_line("markers", "workers(n): needs at least n workers")
    if session_env.SESSION is None and os.environ.get("DISCO_TEST_PROCESS_SESSION"):
        # disco.ProcessSession: this process starts the workers itself, and imports funcs there.
        session_env.SESSION = disco.ProcessSession(
            int(os.environ["DISCO_TEST_PROCESS_SESSION"]),
            int(os.environ.get("DISCO_NUM_GROUPS", "1")))
        session_env.SESSION.import_python_module("funcs")
        session_env.MODE = "process"
    elif session_env.SESSION is None and os.environ.get("DISCO_TEST_SERVER"):
        host, port = os.environ["DISCO_TEST_SERVER"].rsplit(":", 1)
        session_env.SESSION = disco.connect(host, int(port))
        session_env.MODE = "remote"


def pytest_sessionfinish(session, exitstatus):
    if session_env.MODE == "process" and session_env.SESSION is not None:
        s, session_env.SESSION = session_env.SESSION, None
        s.shutdown()
        if s.exit_code != 0:
            print("\nthe ProcessSession's job ended with exit code %s" % s.exit_code)
            session.exitstatus = 1
    # A served job ends with the suite's verdict as its exit code.
    if session_env.MODE == "remote" and session_env.SESSION is not None:
        disco.shutdown_remote_job(session_env.SESSION, 1 if exitstatus not in (0, 5) else 0)
        session_env.SESSION = None


def pytest_collection_modifyitems(config, items):
    sess = session_env.SESSION
    for item in items:
        if item.get_closest_marker("injob") and session_env.MODE != "in-job":
            item.add_marker(pytest.mark.skip(reason="needs the in-job session"))
        m = item.get_closest_marker("workers")
        if m and sess is not None and sess.num_workers < m.args[0]:
            item.add_marker(pytest.mark.skip(
                reason="needs %d workers, the job has %d" % (m.args[0], sess.num_workers)))


@pytest.fixture(scope="session")
def sess():
    if session_env.SESSION is None:
        pytest.skip("no disco session: run under tests/python/run_in_job.py or run_served.sh")
    return session_env.SESSION


@pytest.fixture(scope="session")
def ccl(sess):
    sess.init_ccl("mpi")
    return sess


@pytest.fixture
def shared_tmp():
    base = os.environ.get("DISCO_TEST_SHARED_DIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as d:
        yield d
