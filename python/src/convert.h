// Python <-> disco value conversion for the `disco` Python package (python/disco).
//
// Python to disco (`ToAny`): None, bool, int (int64), float, str, bytes; numpy scalars as their
// Python value; `disco.Tensor`, numpy arrays and any object with `__dlpack__` as a Tensor sharing
// the memory (a compact copy for read-only, non-contiguous or non-native byte order numpy arrays
// and for non-contiguous host DLPack tensors; with `own_tensors`, a copy always); tuples and lists
// of ints as a Shape, other tuples and lists as an Array; dicts with string keys as a Map;
// `disco.DRef`, `disco.Device`; anything else as an Object that holds the Python object itself
// (usable inside this process only: the wire refuses to send it).
//
// disco to Python (`FromAny`): the reverse; a host Tensor becomes a numpy array that shares its
// memory (bfloat16 as uint16: numpy has no bfloat16), a device tensor stays a `disco.Tensor`.
#ifndef DISCO_PYTHON_CONVERT_H_
#define DISCO_PYTHON_CONVERT_H_

#include <disco/any.h>
#include <disco/tensor.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace disco {
namespace python {

namespace py = pybind11;

/// What the binding knows of a session's use from Python (module.h): which thread drives it, the
/// thread inside one of its calls, and the DRefs other threads dropped.
struct SessionState;

/// What Python holds for a DRef. Dropped by a thread other than the one driving its session, or
/// during one of the session's calls (inside a worker function), its register is freed by the
/// driving thread's next session call.
struct PyDRef {
  DRef ref;
  std::shared_ptr<SessionState> state;  // null: not made by a session call (freed at once)
  PyDRef() = default;
  PyDRef(DRef r, std::shared_ptr<SessionState> s) : ref(std::move(r)), state(std::move(s)) {}
  PyDRef(const PyDRef&) = default;
  PyDRef& operator=(const PyDRef&) = default;
  ~PyDRef();
};

/// Which Python type a disco value becomes for worker functions and debug reads. With
/// `own_tensors`, every tensor in `obj` is a copy of its own, never the caller's memory (worker 0
/// then holds the value at call time, as the other workers do through the wire).
Any ToAny(py::handle obj, bool own_tensors = false);
/// With `host_tensors_as_numpy` false, host tensors stay disco.Tensor (DLPack producers: what
/// torch.from_dlpack takes, bfloat16 included) instead of becoming numpy views.
py::object FromAny(const Any& value, bool host_tensors_as_numpy = true);

/// A Tensor for `obj` (disco.Tensor, numpy array, DLPack producer), or nullopt when it is none of
/// them. `what` names the argument in errors.
std::optional<Tensor> ToTensor(py::handle obj);
/// Like ToTensor, but a TypeError naming `what` when `obj` is not a tensor.
Tensor ToTensorOrThrow(py::handle obj, const char* what);
/// A Tensor that shares the memory of the destination `obj` (written in place): a numpy array must
/// be writeable, C-contiguous and in native byte order, a DLPack tensor compact. `what` names the
/// argument in errors.
Tensor ToTensorInPlace(py::handle obj, const char* what);
/// A numpy array viewing a host tensor's memory (bfloat16 as uint16).
py::array TensorToNumpy(const Tensor& t);

/// A DLDevice from a disco.Device, "cpu", "cuda", "cuda:N" or None (cpu).
DLDevice ToDevice(py::handle obj);
/// A DLDataType from a string ("float32"), a numpy dtype or a numpy type.
DLDataType ToDataType(py::handle obj);

/// The last lines of the pending Python exception's traceback, for RemoteErrors.
std::string FormatPythonError(py::error_already_set& e, int max_lines);

}  // namespace python
}  // namespace disco

#endif  // DISCO_PYTHON_CONVERT_H_
