// disco.Graph (docs/graphs.md): `with sess.capture(num_inputs=n) as g:` records the session calls
// made in the block; g.replay(*inputs) runs them again on every worker with one frame (its fast
// path is in fastcall.cc).
#include <disco/disco.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "module.h"
#include "session/session_backend.h"

namespace disco {
namespace python {

void ReplayGraph(PyGraph& g, PyObject* const* args, size_t n) {
  DISCO_CHECK(g.graph.defined(), ValueError)
      << (g.capturing ? "replay inside the graph's own capture block"
                      : "replay of a graph whose capture did not complete");
  CallScope call(g.session->state.get());
  g.session->get(call);
  std::vector<Any> inputs;
  inputs.reserve(n);
  for (size_t i = 0; i < n; ++i) inputs.push_back(ToAny(args[i], !g.session->remote));
  Released([&] { g.graph.Replay(inputs); });
}

namespace {

using GraphClass = py::class_<PyGraph, std::shared_ptr<PyGraph>>;

constexpr const char* kGraphDoc = R"doc(A captured sequence of session calls.

Made by ``Session.capture(num_inputs)`` and filled by its ``with`` block, which records the calls
it makes instead of running them (``inputs[i]`` is a placeholder for the i-th replay input; DRefs
made in the block name the registers every replay writes). ``replay(*inputs)`` runs the recording
on every worker with one small frame. Syncs, copies, debug reads and writes, ``init_ccl``,
``shutdown`` and a nested capture inside the block are a ValueError, and the capture is discarded.
``empty`` inside the block allocates once, at install.)doc";

std::shared_ptr<PyGraph> EnterCapture(std::shared_ptr<PyGraph> g) {
  DISCO_CHECK(!g->capturing && !g->graph.defined(), ValueError)
      << "this disco.Graph was captured already; call sess.capture() again";
  CallScope call(g->session->state.get());
  Session& s = g->session->get(call);
  std::vector<Any> inputs = Released([&] { return s.backend()->BeginCapture(g->num_inputs); });
  g->inputs = py::list();
  for (Any& a : inputs) g->inputs.append(PyDRef(a.cast<DRef>(), nullptr));
  g->capturing = true;
  return g;
}

bool ExitCapture(PyGraph& g, py::handle type, py::handle, py::handle) {
  if (!g.capturing) return false;
  g.capturing = false;
  CallScope call(g.session->state.get());
  Session& s = g.session->get(call);
  if (!type.is_none()) {  // the block raised: discard, and let its error through
    try {
      Released([&] { s.backend()->EndCapture(/*discard=*/true); });
    } catch (const ValueError&) {
    }
    return false;
  }
  g.graph = Released([&] { return s.backend()->EndCapture(/*discard=*/false); });
  return false;
}

std::string GraphRepr(PyGraph& g) {
  if (!g.graph.defined()) {
    return std::string("disco.Graph(") + (g.capturing ? "capturing" : "not captured") +
           ", num_inputs=" + std::to_string(g.num_inputs) + ")";
  }
  return "disco.Graph(id=" + std::to_string(g.graph.id()) +
         ", num_inputs=" + std::to_string(g.num_inputs) +
         ", num_calls=" + std::to_string(g.graph.num_calls()) + ")";
}

// Seconds per Graph::Replay(*args) issued from C++: the baseline of bench/python_call.py.
double BenchReplays(PyGraph& g, py::tuple args, int64_t k) {
  DISCO_CHECK(g.graph.defined(), ValueError) << "_bench_replays of a graph not captured";
  CallScope call(g.session->state.get());
  Session& x = g.session->get(call);
  std::vector<Any> inputs;
  for (py::handle a : args) inputs.push_back(ToAny(a, !g.session->remote));
  return Released([&] {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < k; ++i) g.graph.Replay(inputs);
    x.SyncAll();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
           static_cast<double>(k);
  });
}

}  // namespace

void BindGraph(py::module_& m) {
  GraphClass graph(m, "Graph", kGraphDoc);
  graph.def("__enter__", &EnterCapture, "Starts recording the session's calls; returns this graph.")
      .def("__exit__", &ExitCapture, py::arg("exc_type"), py::arg("exc_value"),
           py::arg("traceback"),
           "Ends the recording and installs the graph on every worker (discards it when the block "
           "raised).")
      .def_property_readonly(
          "inputs", [](PyGraph& g) { return g.inputs; },
          "The placeholders of the capture block, one per input.")
      .def_property_readonly(
          "num_inputs", [](PyGraph& g) { return g.num_inputs; },
          "How many inputs each replay takes.")
      .def_property_readonly(
          "num_calls", [](PyGraph& g) { return static_cast<int64_t>(g.graph.num_calls()); },
          "How many session calls the capture recorded.")
      .def_property_readonly(
          "id", [](PyGraph& g) { return g.graph.id(); },
          "The graph's id in its session (errors of replayed calls name it).")
      .def("__repr__", &GraphRepr);
  InstallGraphReplay(graph);
  m.def("_bench_replays", &BenchReplays, py::arg("graph"), py::arg("args"), py::arg("k"),
        "Seconds per Graph::Replay(*args) issued from C++ (benchmark baseline).");
}

}  // namespace python
}  // namespace disco
