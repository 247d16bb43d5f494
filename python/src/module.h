// What the files of disco._core (python/src) share: the Python objects of a session, the guard of
// its calls, and the functions each file binds.
//
// Threads and the GIL. Session calls convert their arguments with the GIL held, then release it
// while the runtime works (broadcasts, syncs, collectives, copies, waits), so other Python threads
// run meanwhile. Worker functions written in Python take the GIL only while Python runs: ranks
// 1..N-1 sit in the C++ worker loop without it, and worker 0 runs inside the controller's session
// call, which has released it. A session is driven by one thread at a time (the one that made its
// last call); a DRef that another thread drops is freed by the driving thread's next call, and a
// session call from inside a worker function (worker 0 runs it inside the controller's call) is
// refused before anything is sent (SessionState, CallScope).
//
// The files: errors.cc (exception types, C++ to Python translation), session_state.cc (which
// thread drives a session, Ctrl-C, the controller's exit code), main.cc (disco.main: MPI start-up,
// stack dumps), bind_session.cc (disco.Session, disco.connect, disco.serve), bind_values.cc
// (Device, Tensor, DRef, DPackedFunc, WorkerInfo), graph.cc (disco.Graph), bind_tokenizer.cc
// (disco.Tokenizer), fastcall.cc (the two measured raw-CPython fast paths: DPackedFunc's tp_call,
// Graph.replay), module.cc (the module).
#ifndef DISCO_PYTHON_MODULE_H_
#define DISCO_PYTHON_MODULE_H_

#include <disco/disco.h>
#include <pybind11/pybind11.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "convert.h"

namespace disco {
namespace python {

namespace py = pybind11;

// ---- Errors (errors.cc) -------------------------------------------------------------------------

/// Makes disco.RemoteError, disco.ProtocolError and disco.InternalError (attributes of `m`) and
/// registers the translation of disco's C++ errors into Python's.
void RegisterErrors(py::module_& m);
/// The Python exception for a C++ one, set; returns null (for functions of the C API).
PyObject* SetPythonError(std::exception_ptr p);

// ---- Which thread drives a session (session_state.cc) -------------------------------------------

/// A session's use from Python. The thread that made its last call drives it. A DRef dropped by
/// another thread, or while one of the session's calls runs (a worker function runs on worker 0
/// inside the controller's call), is queued here and freed by the driving thread's next call: a
/// register is never freed from under a running call, nor by a thread that does not drive the
/// session. Once the session ends, dropped DRefs are queued until it is gone (disco.main returned,
/// or the remote session was destroyed), and then dropped at once (they free nothing).
struct SessionState {
  enum Phase { kLive, kEnding, kGone };
  std::atomic<std::thread::id> driver{};
  std::atomic<std::thread::id> in_call{};  // the thread inside one of the session's calls
  std::atomic<int> phase{kLive};
  std::mutex mu;
  std::vector<DRef> orphans;
  std::atomic<bool> have_orphans{false};

  void Queue(DRef ref);
  void FreeOrphans();
  /// The session ended (`gone`: its registers are gone too).
  void End(bool gone);
};

/// One call of a session from Python, from its start until it returns: refuses, before anything
/// is sent, a call made inside a worker function of this session (the same thread is inside a
/// call) and a call from a second thread while another one runs; makes this thread the session's
/// driver and frees the DRefs queued for it.
class CallScope {
 public:
  explicit CallScope(SessionState* state);
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  ~CallScope();

 private:
  SessionState* state_;
};

/// A Python Session: borrowed from disco::Main while the controller runs, or owned (remote).
struct PySession {
  Session* session = nullptr;
  std::unique_ptr<Session> owned;
  bool remote = false;
  std::string where;       // a remote session's server, host:port (its repr)
  bool shut_down = false;  // shutdown() was called (its repr says "ended")
  std::shared_ptr<SessionState> state = std::make_shared<SessionState>();

  ~PySession();
  /// The session, for the duration of `scope` (a CallScope made first).
  Session& get(const CallScope& scope);
};
using SessionPtr = std::shared_ptr<PySession>;

/// A DRef that holds a function: calling it is `session.call_packed(self, *args)`. `name` is the
/// global function's (get_global_func's argument), for its repr.
struct PyFunc : PyDRef {
  SessionPtr session;
  std::string name;
  PyFunc(DRef r, SessionPtr s, std::string n)
      : PyDRef(std::move(r), s->state), session(std::move(s)), name(std::move(n)) {}
};

/// A captured graph (disco.Graph; docs/graphs.md): `with sess.capture(num_inputs=n) as g:` records
/// the session calls made in the block (g.inputs are their placeholders); g.replay(*inputs) runs
/// them again on every worker with one frame.
struct PyGraph {
  SessionPtr session;
  int num_inputs = 0;
  py::list inputs;
  Graph graph;
  bool capturing = false;
};

// ---- The controller's run (session_state.cc) ----------------------------------------------------

/// What the controller of this rank did (rank 0 only runs one).
struct ControllerOutcome {
  bool ran = false;
  bool returned = false;  // it returned an int or None (not an exception, not another type)
  int code = 0;           // what it returned
};

/// Runs the Python controller on `session` (GIL taken); returns its exit code.
int RunController(py::function controller, Session& session, ControllerOutcome* outcome,
                  std::weak_ptr<SessionState>* state);

/// Ctrl-C during one controller run (the GIL held to make and destroy it): Python's
/// KeyboardInterrupt when Python code runs; a controller stuck in the runtime ends the process.
class SigintWatch {
 public:
  SigintWatch();
  SigintWatch(const SigintWatch&) = delete;
  SigintWatch& operator=(const SigintWatch&) = delete;
  ~SigintWatch();

 private:
  bool handled_ = false;       // this run installed its SIGINT handler
  struct sigaction old_ {};    // the handler before it
  py::object python_handler_;  // Python's own SIGINT handler, wrapped during the run
  std::thread monitor_;
};

// ---- Shared by the bindings (bind_session.cc, fastcall.cc) --------------------------------------

/// What Python gets for a register of the session `ps`.
PyDRef Ref(PySession& ps, DRef r);
py::object Wrap(PySession& ps, DRef r);
/// A Shape from an int or a sequence of ints; `shape` names it in errors.
Shape ToShape(py::handle obj);
/// `session.call_packed(func, *args)` (fastcall.cc: the hot path of every call from Python).
PyDRef CallPacked(PySession& ps, const DRef& func, const py::tuple& args);
/// Graph.replay(*args) (graph.cc).
void ReplayGraph(PyGraph& g, PyObject* const* args, size_t n);

/// Runs `f` on the session with the GIL released.
template <typename F>
auto Released(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// ---- What each file binds -----------------------------------------------------------------------

void BindValues(py::module_& m);     // bind_values.cc
void BindSession(py::module_& m);    // bind_session.cc
void BindRemote(py::module_& m);     // bind_session.cc: connect, serve, shutdown_remote_job
void BindGraph(py::module_& m);      // graph.cc
void BindMain(py::module_& m);       // main.cc: main, _abort_job
void BindTokenizer(py::module_& m);  // bind_tokenizer.cc
/// DPackedFunc's tp_call and __call__ (fastcall.cc).
void InstallFuncCall(py::handle func_type);
/// Graph.replay as a METH_FASTCALL method (fastcall.cc).
void InstallGraphReplay(py::handle graph_type);

}  // namespace python
}  // namespace disco

#endif  // DISCO_PYTHON_MODULE_H_
