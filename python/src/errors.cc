// disco's C++ errors in Python: ValueError, TypeError and RuntimeError are Python's own;
// disco.RemoteError (with `.worker`), disco.ProtocolError and disco.InternalError subclass
// RuntimeError (docs/python.md).
#include <disco/disco.h>
#include <pybind11/pybind11.h>

#include <exception>

#include "module.h"

namespace disco {
namespace python {
namespace {

// The exception types; the module holds them for the life of the process.
PyObject* g_remote_error = nullptr;
PyObject* g_protocol_error = nullptr;
PyObject* g_internal_error = nullptr;

void RaiseRemoteError(const RemoteError& e) {
  py::object cls = py::reinterpret_borrow<py::object>(g_remote_error);
  py::object inst = cls(py::str(e.what()));
  inst.attr("worker") = py::int_(e.worker());
  PyErr_SetObject(g_remote_error, inst.ptr());
}

void TranslateErrors(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const RemoteError& e) {
    RaiseRemoteError(e);
  } catch (const ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const ProtocolError& e) {
    PyErr_SetString(g_protocol_error, e.what());
  } catch (const InternalError& e) {
    PyErr_SetString(g_internal_error, e.what());
  } catch (const Error& e) {  // disco::RuntimeError and the base
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

// A subclass of RuntimeError named disco.`name` (the package re-exports it), an attribute of `m`.
template <typename CppError>
PyObject* MakeError(py::module_& m, const char* name, const char* doc) {
  py::exception<CppError> type(m, name, PyExc_RuntimeError);  // disco._core.`name`
  type.attr("__module__") = "disco";
  type.attr("__doc__") = doc;
  return type.release().ptr();  // a reference of our own: never dropped
}

}  // namespace

void RegisterErrors(py::module_& m) {
  g_remote_error = MakeError<RemoteError>(m, "RemoteError", "A worker failed; `worker` is its id.");
  g_protocol_error =
      MakeError<ProtocolError>(m, "ProtocolError", "A malformed message on the wire.");
  g_internal_error =
      MakeError<InternalError>(m, "InternalError", "A broken invariant of disco itself (a bug).");
  py::register_exception_translator(&TranslateErrors);
}

PyObject* SetPythonError(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    try {
      TranslateErrors(std::current_exception());
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
  return nullptr;
}

}  // namespace python
}  // namespace disco
