// disco._core: the Python binding of disco's C++ runtime (pybind11). The Python package
// (python/disco/__init__.py) re-exports it under the names of tvm.runtime.disco. module.h says
// how the binding uses threads and the GIL, and which file binds what; this file makes the module
// and binds the registry of global functions (Python worker functions).
#include <disco/disco.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "module.h"

namespace disco {
namespace python {
namespace {

// ---- Python worker functions --------------------------------------------------------------------

void RegisterFunc(const std::string& name, py::function fn, bool override_existing,
                  bool tensors_as_numpy) {
  // The registry lives as long as the process: the function is never released.
  PyObject* callable = fn.release().ptr();
  Registry::Register(name, override_existing)
      .set_body_packed([callable, name, tensors_as_numpy](const Args& args, Any* rv) {
        py::gil_scoped_acquire gil;
        try {
          py::tuple pargs(args.size());
          for (size_t i = 0; i < args.size(); ++i) pargs[i] = FromAny(args[i], tensors_as_numpy);
          py::object r = py::reinterpret_borrow<py::object>(callable)(*pargs);
          *rv = ToAny(r);
        } catch (py::error_already_set& e) {
          std::string trace = FormatPythonError(e, 12);
          DISCO_THROW(RuntimeError) << "Python function '" << name << "' raised:\n" << trace;
        }
      });
}

void BindRegistry(py::module_& m) {
  // A C++ no-op: the baseline callee of bench/python_call.py.
  Registry::Register("disco.py.noop", true).set_body_packed([](const Args&, Any*) {});
  m.def("register_func", &RegisterFunc, py::arg("name"), py::arg("func"),
        py::arg("override") = false, py::arg("tensors_as_numpy") = true,
        "Registers the Python callable `func` as the global function `name` on this rank (its "
        "host tensor arguments as numpy views, or disco.Tensor with tensors_as_numpy=False).");
  m.def("list_global_funcs", &Registry::ListNames,
        "The names of every global function registered in this process, sorted.");
  m.def("this_worker", &ThisWorker, py::return_value_policy::copy,
        "The calling worker function's disco.WorkerInfo.");
  m.def(
      "version", [] { return std::string(DISCO_VERSION); }, "disco's version string.");
}

}  // namespace
}  // namespace python
}  // namespace disco

PYBIND11_MODULE(_core, m) {
  using namespace disco::python;  // NOLINT(build/namespaces)
  m.doc() = "disco's C++ runtime; import disco instead";
  RegisterErrors(m);
  BindValues(m);
  BindGraph(m);  // before Session: Session.capture's docstring names disco._core.Graph
  BindSession(m);
  BindMain(m);
  BindRemote(m);
  BindRegistry(m);
  BindTokenizer(m);
}
