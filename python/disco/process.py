"""disco.ProcessSession: a session whose workers this process starts, without mpirun around it.

    sess = disco.ProcessSession(4)               # 4 workers, started now
    sess.import_python_module("my_funcs")        # their @disco.register_func functions
    f = sess.get_global_func("my.scale")
    ...
    sess.shutdown()                              # or `with disco.ProcessSession(4) as sess:`

The workers are an MPI job of their own, started through launch/disco-run (shipped in this
package: mpirun or srun with the flags the MPI and the machine need) running the `entrypoint`
module (disco.serve) on every rank; rank 0 serves the session on a loopback port with a key drawn
here, and this process attaches to it as disco.connect does. Unlike TVM's ProcessSession, worker
0 lives in the job, not in this process: this process needs no MPI, and can open, close and open
sessions again as often as it likes (a notebook).

The job ends when the session is shut down, when it is garbage-collected, and when this process
dies: the server takes one client only (this one) and stops when it goes; before it has attached,
rank 0 watches its standard input, which the launcher forwards from here, and ends the job when
it closes.
"""

import atexit
import os
import re
import secrets
import socket
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref

from . import _core, _launcher

_live = weakref.WeakSet()
_live_lock = threading.Lock()
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class ProcessSession(_core.Session):
    """A session over `num_workers` worker processes that this process starts (TVM's name).

    num_workers: the workers (MPI ranks of the job started for it), at least 1.
    num_groups: worker groups (DISCO_NUM_GROUPS); must divide num_workers.
    entrypoint: the module every rank runs (`python3 -m entrypoint`); it must serve the session
        as disco.serve does and take its flags (a module of your own may import its worker
        functions and then call ``sys.exit(disco.serve.run())``).
    modules: modules every worker imports first (as sess.import_python_module would).
    env: variables to set in the workers' environment (DISCO_TIMEOUT, OMP_NUM_THREADS, ...).
    startup_timeout_s: how long the job may take to start serving.
    python: the interpreter of the workers (default: this one).
    """

    _proc = None
    _tmp = None
    _attached = False  # the C++ session exists (attached once; its shutdown is then safe)
    _startup_seconds = None
    _sockets = ()  # the descriptors of the connection to the job (a forked child closes its copies)

    def __init__(self, num_workers, num_groups=1, entrypoint="disco.serve", *, modules=(),
                 env=None, startup_timeout_s=120.0, python=None):
        self._owner = os.getpid()  # the process that started the job; a forked child is not it
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError("disco.ProcessSession: num_workers must be an int >= 1, got %r"
                             % (num_workers,))
        if (isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1
                or num_workers % num_groups != 0):
            raise ValueError("disco.ProcessSession: num_groups must be an int >= 1 that divides "
                             "num_workers (%d), got %r" % (num_workers, num_groups))
        if not isinstance(entrypoint, str) or not entrypoint or entrypoint.startswith("-"):
            raise ValueError("disco.ProcessSession: entrypoint must be a module name, got %r"
                             % (entrypoint,))
        if isinstance(modules, str):
            modules = [modules]
        try:
            modules = list(modules)
        except TypeError:
            raise ValueError("disco.ProcessSession: modules must be module names, got %r"
                             % (modules,)) from None
        for name in [entrypoint] + modules:
            if not isinstance(name, str) or not _MODULE_NAME.match(name):
                raise ValueError("disco.ProcessSession: %r is not a module name (entrypoint and "
                                 "modules are dotted Python names)" % (name,))
        if (isinstance(startup_timeout_s, bool) or not isinstance(startup_timeout_s, (int, float))
                or not 0 < startup_timeout_s <= 86400):
            raise ValueError("disco.ProcessSession: startup_timeout_s must be a number of seconds "
                             "in (0, 86400], got %r" % (startup_timeout_s,))
        if python is not None and not (isinstance(python, str) and shutil.which(python)):
            raise ValueError("disco.ProcessSession: python=%r is not an interpreter found here"
                             % (python,))
        self._tmp = tempfile.mkdtemp(prefix="disco-session-")  # 0700: the port file
        port_file = os.path.join(self._tmp, "port")
        key = secrets.token_hex(24)
        child_env = dict(os.environ)
        child_env.update({str(k): str(v) for k, v in (env or {}).items()})
        child_env["DISCO_SERVE_KEY"] = key  # the environment of our own child: this user only
        child_env["DISCO_NUM_GROUPS"] = str(num_groups)
        child_env.setdefault("DISCO_LOG_LEVEL", "warn")
        # The workers import this very package (and the modules next to this process's cwd).
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = [package_parent] + [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        child_env["PYTHONPATH"] = os.pathsep.join(path)
        cmd = [_launcher.path(), "-n", str(num_workers), "--", python or sys.executable, "-m",
               entrypoint, "--host", "127.0.0.1", "--port", "0", "--port-file", port_file,
               "--max-clients", "1", "--idle-timeout", "0", "--end-with-stdin"]
        for m in modules:
            cmd += ["--module", m]
        t0 = time.monotonic()
        try:
            # A session of its own: Ctrl-C here (a notebook's interrupt) does not reach the job.
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, env=child_env,
                                          start_new_session=True)
            port = self._wait_for_port(port_file, startup_timeout_s, cmd)
            remaining_ms = max(1000, int((startup_timeout_s - (time.monotonic() - t0)) * 1000))
            before = set(_open_fds())
            super().__init__("127.0.0.1", port, key, connect_timeout_ms=remaining_ms)
            self._attached = True
            self._sockets = _sockets_to(port, set(_open_fds()) - before)
        except BaseException:
            self._end_job(grace_s=0.0)
            raise
        self._startup_seconds = time.monotonic() - t0
        with _live_lock:
            _live.add(self)

    def __repr__(self):
        if not self._attached:
            return "disco.ProcessSession(not started)"
        code = self.exit_code
        if code is not None:
            return "disco.ProcessSession(ended, exit code %d)" % code
        try:
            return "disco.ProcessSession(num_workers=%d, num_groups=%d, job pid %d)" % (
                self.num_workers, self.num_groups, self._proc.pid)
        except RuntimeError:  # detached, its job still ending
            return "disco.ProcessSession(ended)"

    def _wait_for_port(self, port_file, timeout_s, cmd):
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                raise RuntimeError(
                    "disco.ProcessSession: the workers' job exited with code %d before it served "
                    "(its output is above; the command: %s)" % (code, " ".join(cmd)))
            try:
                with open(port_file) as f:
                    return int(f.read())
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    "disco.ProcessSession: the workers' job did not start serving within %g s "
                    "(startup_timeout_s); the command: %s" % (timeout_s, " ".join(cmd)))
            time.sleep(0.005)

    def shutdown(self, timeout_s=60.0):
        """Ends the session and its workers' job; waits up to `timeout_s` for the job to end
        (then ends it by force). The job's exit code is `exit_code` afterwards."""
        if getattr(self, "_owner", None) != os.getpid():
            raise RuntimeError("disco.ProcessSession: this session belongs to process %s, not to "
                               "this forked one (a child cannot use or end its parent's session)"
                               % getattr(self, "_owner", "?"))
        try:
            if self._attached:
                _core.Session.shutdown(self)  # detaches: the server, one client only, stops
        finally:
            self._end_job(grace_s=timeout_s)

    def __exit__(self, *exc):
        """Leaving a with-block shuts the session down (and ends its workers' job)."""
        self.shutdown()
        return False

    def __del__(self):
        if getattr(self, "_owner", None) != os.getpid():
            return
        try:
            self.shutdown(timeout_s=10.0)
        except Exception:  # noqa: BLE001 -- nothing may escape a finalizer
            pass

    @property
    def startup_seconds(self):
        """Seconds the session took to start: the job launched, serving, this process attached."""
        return self._startup_seconds

    @property
    def exit_code(self):
        """The workers' job's exit code once it has ended, else None."""
        return None if self._proc is None else self._proc.poll()

    def _end_job(self, grace_s):
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is None:  # closing rank 0's stdin ends the job (serve --end-with-stdin)
                self._close_stdin()
                try:
                    proc.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    for sig in (signal.SIGTERM, signal.SIGKILL):
                        try:
                            os.killpg(proc.pid, sig)
                        except OSError:
                            pass
                        try:
                            proc.wait(timeout=5.0)
                            break
                        except subprocess.TimeoutExpired:
                            pass
        self._close_stdin()
        if getattr(self, "_tmp", None):
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _close_stdin(self):
        proc = self._proc
        if proc is not None and proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass


def _open_fds():
    try:
        return [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        return []


def _sockets_to(port, fds):
    """Of the descriptors `fds`, those of TCP sockets connected to 127.0.0.1:port."""
    out = []
    for fd in fds:
        try:
            if not os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
                continue
            s = socket.socket(fileno=fd)
            try:
                if s.getpeername()[1:2] == (port,):
                    out.append(fd)
            finally:
                s.detach()  # the descriptor stays the session's
        except OSError:
            pass
    return tuple(out)


def _after_fork_in_child():
    # A forked child must neither use nor end its parent's sessions, nor keep their job alive
    # once the parent is gone: it closes its copies of the connection and of rank 0's stdin, and
    # its copies of the session objects are never finalised (their destructors would talk to
    # the job over the closed connection).
    import ctypes
    for s in list(_live):
        for fd in s._sockets:
            try:
                os.close(fd)
            except OSError:
                pass
        if s._proc is not None and s._proc.stdin is not None:
            try:
                os.close(s._proc.stdin.fileno())
            except (OSError, ValueError):
                pass
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(s))
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _shutdown_all():
    with _live_lock:
        sessions = [s for s in _live if getattr(s, "_owner", None) == os.getpid()]
    for s in sessions:
        try:
            s.shutdown(timeout_s=10.0)
        except Exception:  # noqa: BLE001 -- the interpreter is leaving
            pass
