// The two hot paths of the binding, written against CPython's C API instead of pybind11's
// dispatcher, which costs more than the work they do. Each is measured by bench/python_call.py:
// - DPackedFunc's tp_call (f(*args)): a pipelined Python call 0.80 us against the C++ session's
//   0.45 us and mpi4py's comm.bcast 1.6 us on the 2-core CI machine (docs/python.md; targets
//   within 3x the C++ call and 2x faster than mpi4py);
// - Graph.replay as a METH_FASTCALL method: a 16-call replay from Python 1.11-1.22x the same
//   replay issued from C++, target 1.5x (docs/graphs.md's table).
// Both have text signatures ("name($self, ...)\n--\n\n" in their own docstrings), so
// inspect.signature reads them.
#include <disco/disco.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <exception>
#include <new>
#include <utility>
#include <vector>

#include "module.h"

namespace disco {
namespace python {

PyDRef CallPacked(PySession& ps, const DRef& func, const py::tuple& args) {
  CallScope call(ps.state.get());
  Session& s = ps.get(call);
  // Tensors passed by value: worker 0 runs in this process, so it gets a copy of its own, as the
  // other workers get one through the wire; the caller may reuse its array at once, and worker 0
  // never keeps a live alias of it. A remote session's tensors cross a socket anyway.
  const bool own = !ps.remote;
  // The hot path of every call from Python: arguments straight from the tuple, no heap for the
  // usual few.
  constexpr size_t kInline = 8;
  const size_t n = args.size();
  // Only the arguments given are constructed (and destroyed), in place.
  alignas(Any) unsigned char small[kInline * sizeof(Any)];
  std::vector<Any> large;
  Any* packed = reinterpret_cast<Any*>(small);
  size_t made = 0;
  struct Destroy {
    Any* items;
    size_t* count;
    bool inline_storage;
    ~Destroy() {
      if (inline_storage) {
        for (size_t i = 0; i < *count; ++i) items[i].~Any();
      }
    }
  } destroy{packed, &made, n <= kInline};
  if (n > kInline) {
    large.reserve(n);
    for (size_t i = 0; i < n; ++i) large.push_back(ToAny(PyTuple_GET_ITEM(args.ptr(), i), own));
    packed = large.data();
  } else {
    for (; made < n; ++made) {
      new (packed + made) Any(ToAny(PyTuple_GET_ITEM(args.ptr(), made), own));
    }
  }
  DRef out;
  {
    py::gil_scoped_release release;
    out = s.CallWithMovedArgs(func, packed, n);
  }
  return Ref(ps, std::move(out));
}

namespace {

// The C++ value of `self`, an instance of a bound class T that the fast paths below receive: a
// TypeError when it was made without its constructor (T.__new__(T)), which holds no value. It
// reads pybind11's instance layout (py::detail) directly: py::cast<T&> would look the type up
// again on every call, and says nothing of a value never constructed.
template <typename T>
T& ValueOf(PyObject* self, const char* type) {
  auto v_h = reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder();
  DISCO_CHECK(v_h.value_ptr() != nullptr && v_h.holder_constructed(), TypeError)
      << "this " << type << " was made without its constructor (" << type
      << ".__new__); get one from the session";
  return *static_cast<T*>(v_h.value_ptr());
}

// DPackedFunc's tp_call: f(*args) without pybind11's dispatcher, which costs more than the call
// (bench/python_call.py, "py pipelined": 0.80 us a call against the C++ session's 0.45 us).
PyObject* CallFunc(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
      PyErr_SetString(PyExc_TypeError, "a DPackedFunc takes positional arguments only");
      return nullptr;
    }
    // `self` is a DPackedFunc (tp_call is its type's): its C++ value directly.
    PyFunc& f = ValueOf<PyFunc>(self, "disco.DPackedFunc");
    PyDRef out = CallPacked(*f.session, f.ref, py::reinterpret_borrow<py::tuple>(args));
    return py::cast(std::move(out)).release().ptr();
  } catch (...) {
    return SetPythonError(std::current_exception());
  }
}

// Graph.replay as a METH_FASTCALL method: without pybind11's dispatcher, which costs more than a
// replay (bench/python_call.py, "py replay": 1.11-1.22x the same replays issued from C++).
PyObject* GraphReplay(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  try {
    ReplayGraph(ValueOf<PyGraph>(self, "disco.Graph"), args, static_cast<size_t>(nargs));
    Py_RETURN_NONE;
  } catch (...) {
    return SetPythonError(std::current_exception());
  }
}

// The text before "--" is the signature inspect.signature reads (__text_signature__); __doc__ is
// the rest.
constexpr const char* kReplayDoc =
    "replay($self, /, *inputs)\n--\n\n"
    "replay(*inputs): runs the recorded calls on every worker with these inputs (async and "
    "ordered).";

constexpr const char* kCallDoc =
    "__call__($self, /, *args)\n--\n\n"
    "Calls the function on every worker, as session.call_packed(self, *args); returns the DRef "
    "of the result (positional arguments only).";

}  // namespace

void InstallFuncCall(py::handle func) {
  auto* func_type = reinterpret_cast<PyTypeObject*>(func.ptr());
  func_type->tp_call = &CallFunc;
  // DPackedFunc.__call__, for inspect.signature and help(): the same call through a method
  // descriptor. It goes into the type's dict directly: setting the attribute would make tp_call
  // the generic slot that looks __call__ up on every call, and f(*args) keeps CallFunc.
  static PyMethodDef call_def = {
      "__call__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&CallFunc)),
      METH_VARARGS | METH_KEYWORDS, kCallDoc};
  py::object call = py::reinterpret_steal<py::object>(PyDescr_NewMethod(func_type, &call_def));
  if (!call || PyDict_SetItemString(func_type->tp_dict, "__call__", call.ptr()) != 0) {
    throw py::error_already_set();
  }
  PyType_Modified(func_type);
}

void InstallGraphReplay(py::handle graph) {
  static PyMethodDef replay_def = {
      "replay", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&GraphReplay)),
      METH_FASTCALL, kReplayDoc};
  auto* type = reinterpret_cast<PyTypeObject*>(graph.ptr());
  py::object replay = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, &replay_def));
  if (!replay) throw py::error_already_set();
  graph.attr("replay") = replay;
}

}  // namespace python
}  // namespace disco
