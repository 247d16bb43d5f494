"""disco: one Python controller driving every rank of an MPI job (tvm.runtime.disco's API).

Every rank runs the same script. ``disco.main(controller)`` runs ``controller(session)`` on rank 0;
ranks 1..N-1 run disco's C++ worker loop and call back into Python only for functions registered
with ``@disco.register_func``::

    import sys, numpy as np, disco

    @disco.register_func("my.scale")       # on every worker
    def scale(x, k):                        # x: a numpy view of the worker's tensor
        return x * k                        # a returned array becomes the register's tensor

    def controller(sess):
        f = sess.get_global_func("my.scale")
        x = sess.empty((4,), "float32")
        sess.copy_to_worker_0(np.arange(4, dtype="float32"), x)
        y = f(x, 2.0)
        print(y.debug_get_from_remote(0))
        return 0

    if __name__ == "__main__":
        sys.exit(disco.main(controller))    # mpirun -n 4 python3 app.py

``disco.connect(host, port, key)`` attaches to a served job (``disco-serve``, or
``python3 -m disco.serve --module mymod``) from any Python process, with the same Session API.

Values: arguments of worker functions arrive as numpy arrays that share the worker's tensor
memory (bfloat16 as uint16 bits; device tensors as disco.Tensor), ints, floats, strings, bytes,
tuples (a tuple of ints is a shape) and dicts. Errors: disco.RemoteError (``.worker``) for a
worker's failure, ValueError / TypeError / RuntimeError for the C++ errors of those names,
disco.ProtocolError for a malformed message.
"""

import os as _os
import sys as _sys

from . import _build_info

if _sys.version_info[:2] != _build_info.PYTHON_VERSION:
    raise ImportError(
        "disco was built for CPython %d.%d (%s); this is %d.%d (%s): run it with that interpreter, "
        "or build disco for this one (cmake -DPython3_EXECUTABLE=%s)"
        % (_build_info.PYTHON_VERSION + (_build_info.PYTHON_EXECUTABLE,)
           + tuple(_sys.version_info[:2]) + (_sys.executable, _sys.executable)))

try:  # worker functions get numpy arrays: an interpreter without numpy is the wrong one
    import numpy as _np  # noqa: F401
except ImportError as _e:
    raise ImportError(
        "disco needs numpy, which this interpreter (%s) cannot import (%s); disco was built for %s: "
        "run your program with that one (e.g. %s -m disco -n 4 app.py)"
        % (_sys.executable, _e, _build_info.PYTHON_EXECUTABLE, _build_info.PYTHON_EXECUTABLE)) from None

# Installed by pip, libdisco and libdisco_tokenizer sit next to the extension (setup.py): loaded
# first (libdisco before the tokenizer, which needs it), under their sonames, so that the extension
# and libdisco_llama find them whatever their RPATH says.
_here = _os.path.dirname(_os.path.abspath(__file__))
for _prefix in ("libdisco.so.", "libdisco_tokenizer.so"):
    for _lib in sorted(_f for _f in _os.listdir(_here) if _f.startswith(_prefix)):
        import ctypes as _ctypes
        _ctypes.CDLL(_os.path.join(_here, _lib))

from . import _core  # noqa: E402
from ._core import (  # noqa: E402
    Device,
    DPackedFunc,
    DRef,
    Graph,
    InternalError,
    ProtocolError,
    RemoteError,
    Session,
    Tensor,
    Tokenizer,
    WorkerInfo,
    list_global_funcs,
)

__version__ = _core.version()

from .process import ProcessSession  # noqa: E402

__all__ = [
    "Device", "DPackedFunc", "DRef", "Graph", "InternalError", "ProcessSession", "ProtocolError",
    "RemoteError", "Session",
    "Tensor", "Tokenizer", "WorkerInfo", "connect", "cpu", "cuda", "list_global_funcs", "main",
    "register_func", "shutdown_remote_job", "this_worker",
]


def main(controller, argv=None):
    """Runs the job: ``controller(session)`` on rank 0, the worker loop elsewhere.

    Returns the process exit code for ``sys.exit``: the controller's return value (an int, or
    None for 0), non-zero on every rank if any rank failed. When the job fails in a way the
    controller did not return (it raised: its traceback is printed and the code is 1; it called
    ``sys.exit(n)``: n; Ctrl-C: 130; it returned something else than an int or None: 1; a worker
    error it never synced: 1), ``disco.main`` raises ``SystemExit`` with that code on rank 0 once
    the job has ended, so that a script ending in a plain ``disco.main(controller)`` exits
    non-zero, as Python does for an uncaught exception; ``sys.exit(disco.main(controller))`` gives
    the same codes.

    MPI is initialised unless the program did it already (mpi4py), and then left to it to
    finalise; MPI that disco.main starts is finalised when the process exits (as mpi4py does), so
    disco.main may run again, and mpi4py may be imported after it.
    """
    code, exit_now = _core.main(controller, list(_sys.argv if argv is None else argv))
    if exit_now:
        raise SystemExit(code)
    return code


def register_func(name, func=None, override=False, tensors="numpy"):
    """Registers a Python function as the global function `name` on this rank.

    Every rank runs the same script, so the function exists on every worker. Use as a decorator
    (``@disco.register_func("my.f")``) or call ``register_func("my.f", f)``. An exception in the
    function reaches the controller as a RemoteError carrying the traceback's last lines.

    tensors: how the function sees the worker's host tensors. "numpy" (default): numpy arrays
    sharing the tensor's memory (bfloat16 as its uint16 bits). "torch": torch.Tensors sharing the
    tensor's memory (torch.from_dlpack; bfloat16 as torch.bfloat16), in tuples and dicts too;
    "dlpack": disco.Tensor objects (any DLPack consumer takes them). A tensor the function returns
    (numpy, torch or any DLPack producer) becomes the register's value; a non-contiguous one is
    copied, a contiguous one shared.
    """
    if tensors not in ("numpy", "torch", "dlpack"):
        raise ValueError("register_func(%r): tensors must be 'numpy', 'torch' or 'dlpack', got %r"
                         % (name, tensors))

    def register(f):
        target = f
        if tensors == "torch":
            target = _torch_adapter(name, f)
        _core.register_func(name, target, override, tensors == "numpy")
        return f
    return register if func is None else register(func)


def _torch_adapter(name, f):
    import importlib.util
    if importlib.util.find_spec("torch") is None:  # found now, imported at the first call
        raise ImportError("register_func(%r, tensors='torch'): PyTorch is not installed for %s "
                          "(Debian: python3-torch)" % (name, _sys.executable))
    state = {}

    def convert(v):
        if isinstance(v, Tensor):
            return state["from_dlpack"](v)  # shares the register's memory (the capsule holds it)
        if isinstance(v, tuple):
            return tuple(convert(x) for x in v)
        if isinstance(v, dict):
            return {k: convert(x) for k, x in v.items()}
        return v

    def detached(v):  # a result that requires grad cannot be exported: its data can
        if getattr(v, "requires_grad", False) and hasattr(v, "detach"):
            return v.detach()
        if isinstance(v, tuple):
            return tuple(detached(x) for x in v)
        return v

    def call(*args):
        if not state:
            import torch.utils.dlpack
            state["from_dlpack"] = torch.utils.dlpack.from_dlpack
        return detached(f(*(convert(a) for a in args)))
    call.__name__ = getattr(f, "__name__", "call")
    call.__doc__ = f.__doc__
    call.__wrapped__ = f
    return call


def connect(host, port, key="", connect_timeout_ms=10000, reply_timeout_ms=-1, key_file=""):
    """Attaches to a served job; returns a Session. No MPI is needed in this process.

    An empty key is read from DISCO_SERVE_KEY, else from `key_file` (DISCO_SERVE_KEY_FILE, else
    ~/.disco/serve-PORT.key, where a server started without a key writes its generated one).
    ``session.shutdown()`` detaches; ``disco.shutdown_remote_job(session, code)`` ends the job.
    """
    return _core.connect(host, int(port), key, connect_timeout_ms, reply_timeout_ms, key_file)


def shutdown_remote_job(session, exit_code=0):
    """Ends a served job (every rank exits with `exit_code`); `session` comes from connect."""
    _core.shutdown_remote_job(session, exit_code)


def this_worker():
    """Where the calling worker function runs: worker_id, num_workers, group_id, device, ..."""
    return _core.this_worker()


def cpu():
    """The host device."""
    return Device(1, 0)


def cuda(index=None):
    """GPU `index`, or with None each worker's own GPU (after init_ccl)."""
    return Device(2, -1 if index is None else index)


def _import_python_module(self, module_name):
    """Imports the Python module `module_name` on every worker (TVM's name), so that the
    functions it registers with @disco.register_func exist there; waits for every worker, and an
    import that fails on one is a disco.RemoteError naming the module."""
    if not isinstance(module_name, str) or not module_name:
        raise ValueError("import_python_module: expected a module name, got %r" % (module_name,))
    self.get_global_func("runtime.disco._import_python_module")(module_name)
    self.sync_all()


Session.import_python_module = _import_python_module


def _import_on_this_worker(module_name):
    import importlib
    importlib.import_module(module_name)


# On every rank that imports disco (every rank of a disco.main job or of disco.serve): the
# worker's side of Session.import_python_module, under TVM's name.
register_func("runtime.disco._import_python_module", _import_on_this_worker, override=True)
