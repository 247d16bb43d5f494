# Type stubs of the disco package (python/disco/__init__.py); the classes are disco._core's
# (_core.pyi). tests/python/test_api_surface.py checks the names and parameter names against the
# package both ways.

from typing import Any, Callable, Literal, Sequence, TypeVar, overload

from ._core import Device as Device
from ._core import DPackedFunc as DPackedFunc
from ._core import DRef as DRef
from ._core import Graph as Graph
from ._core import InternalError as InternalError
from ._core import ProtocolError as ProtocolError
from ._core import RemoteError as RemoteError
from ._core import Session as Session
from ._core import Tensor as Tensor
from ._core import Tokenizer as Tokenizer
from ._core import WorkerInfo as WorkerInfo
from ._core import list_global_funcs as list_global_funcs
from .process import ProcessSession as ProcessSession

_F = TypeVar("_F", bound=Callable[..., Any])

__version__: str
__all__ = [
    "Device", "DPackedFunc", "DRef", "Graph", "InternalError", "ProcessSession", "ProtocolError",
    "RemoteError", "Session",
    "Tensor", "Tokenizer", "WorkerInfo", "connect", "cpu", "cuda", "list_global_funcs", "main",
    "register_func", "shutdown_remote_job", "this_worker",
]

def main(controller: Callable[[Session], int | None], argv: Sequence[str] | None = None) -> int: ...
_Tensors = Literal["numpy", "torch", "dlpack"]

@overload
def register_func(name: str, func: None = None, override: bool = False,
                  tensors: _Tensors = "numpy") -> Callable[[_F], _F]: ...
@overload
def register_func(name: str, func: _F, override: bool = False, tensors: _Tensors = "numpy") -> _F: ...
def connect(host: str, port: int | str, key: str = "", connect_timeout_ms: int = 10000,
            reply_timeout_ms: int = -1, key_file: str = "") -> Session: ...
def shutdown_remote_job(session: Session, exit_code: int = 0) -> None: ...
def this_worker() -> WorkerInfo: ...
def cpu() -> Device: ...
def cuda(index: int | None = None) -> Device: ...
