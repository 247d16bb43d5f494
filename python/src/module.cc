// disco._core: the Python binding of disco's C++ runtime (pybind11). The Python package
// (python/disco/__init__.py) re-exports it under the names of tvm.runtime.disco.
//
// Threads and the GIL. Session calls convert their arguments with the GIL held, then release it
// while the runtime works (broadcasts, syncs, collectives, copies, waits), so other Python threads
// run meanwhile. Worker functions written in Python take the GIL only while Python runs: ranks
// 1..N-1 sit in the C++ worker loop without it, and worker 0 runs inside the controller's session
// call, which has released it. A session is driven by one thread at a time (the one that made its
// last call); a DRef that another thread drops is freed by the driving thread's next call, and a
// session call from inside a worker function (worker 0 runs it inside the controller's call) is
// refused before anything is sent (SessionState, CallScope).
#include <disco/disco.h>
#include <disco/h5.h>
#include <disco/remote.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "convert.h"
#include "core/exit_cleanup.h"
#include "session/session_backend.h"
#include "session/watchdog.h"

namespace py = pybind11;

namespace disco {
namespace python {
namespace {

// ---- Errors -------------------------------------------------------------------------------------

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

}  // namespace

// ---- Which thread drives a session, and calls made inside its own calls -------------------------

// A session's use from Python. The thread that made its last call drives it. A DRef dropped by
// another thread, or while one of the session's calls runs (a worker function runs on worker 0
// inside the controller's call), is queued here and freed by the driving thread's next call: a
// register is never freed from under a running call, nor by a thread that does not drive the
// session. Once the session ends, dropped DRefs are queued until it is gone (disco.main returned,
// or the remote session was destroyed), and then dropped at once (they free nothing).
struct SessionState {
  enum Phase { kLive, kEnding, kGone };
  std::atomic<std::thread::id> driver{};
  std::atomic<std::thread::id> in_call{};  // the thread inside one of the session's calls
  std::atomic<int> phase{kLive};
  std::mutex mu;
  std::vector<DRef> orphans;
  std::atomic<bool> have_orphans{false};

  void Queue(DRef ref) {
    std::lock_guard<std::mutex> lock(mu);
    orphans.push_back(std::move(ref));
    have_orphans.store(true, std::memory_order_release);
  }
  void FreeOrphans() {
    if (!have_orphans.load(std::memory_order_acquire)) return;
    std::vector<DRef> drop;
    std::lock_guard<std::mutex> lock(mu);
    drop.swap(orphans);
    have_orphans.store(false, std::memory_order_release);
  }
  // The session ended (`gone`: its registers are gone too).
  void End(bool gone) {
    phase.store(gone ? kGone : kEnding);
    FreeOrphans();
  }
};

PyDRef::~PyDRef() {
  if (!ref.defined() || state == nullptr) return;
  const int phase = state->phase.load();
  if (phase == SessionState::kGone) return;
  if (phase == SessionState::kLive &&
      state->driver.load(std::memory_order_relaxed) == std::this_thread::get_id() &&
      state->in_call.load(std::memory_order_relaxed) == std::thread::id()) {
    return;  // freed now, by the thread that drives the session, between its calls
  }
  state->Queue(std::move(ref));
}

namespace {

constexpr const char* kNoReentry =
    "session calls from inside a worker function are not allowed: the function runs on worker 0 "
    "inside the controller's call of this session, and on every other worker without a session. "
    "Return what the controller needs and make the call from the controller";

// One call of a session from Python, from its start until it returns: refuses, before anything
// is sent, a call made inside a worker function of this session (the same thread is inside a
// call) and a call from a second thread while another one runs; makes this thread the session's
// driver and frees the DRefs queued for it.
class CallScope {
 public:
  explicit CallScope(SessionState* state) : state_(state) {
    if (state_ == nullptr) return;
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id none;
    if (!state_->in_call.compare_exchange_strong(none, me, std::memory_order_acquire)) {
      state_ = nullptr;
      DISCO_CHECK(none != me, RuntimeError) << kNoReentry;
      DISCO_THROW(RuntimeError) << "this disco.Session is inside a call made by another thread; "
                                   "drive a session from one thread at a time";
    }
    state_->driver.store(me, std::memory_order_relaxed);
    if (state_->phase.load() == SessionState::kLive) state_->FreeOrphans();
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  ~CallScope() {
    if (state_ != nullptr) state_->in_call.store(std::thread::id(), std::memory_order_release);
  }

 private:
  SessionState* state_;
};

// ---- Sessions -----------------------------------------------------------------------------------

// A Python Session: borrowed from disco::Main while the controller runs, or owned (remote).
struct PySession {
  Session* session = nullptr;
  std::unique_ptr<Session> owned;
  bool remote = false;
  std::string where;       // a remote session's server, host:port (its repr)
  bool shut_down = false;  // shutdown() was called (its repr says "ended")
  std::shared_ptr<SessionState> state = std::make_shared<SessionState>();

  ~PySession() {
    owned.reset();
    state->End(/*gone=*/true);
  }

  // The session, for the duration of `scope` (a CallScope made first).
  Session& get(const CallScope&) {
    DISCO_CHECK(session != nullptr, RuntimeError)
        << "this disco.Session has ended (the controller returned or shutdown() was called)";
    return *session;
  }
};
using SessionPtr = std::shared_ptr<PySession>;

// A DRef that holds a function: calling it is `session.call_packed(self, *args)`. `name` is the
// global function's (get_global_func's argument), for its repr.
struct PyFunc : PyDRef {
  SessionPtr session;
  std::string name;
  PyFunc(DRef r, SessionPtr s, std::string n)
      : PyDRef(std::move(r), s->state), session(std::move(s)), name(std::move(n)) {}
};

DRef RefOf(py::handle h, const char* what) {
  if (h.is_none()) return DRef();
  DISCO_CHECK(py::isinstance<PyDRef>(h), TypeError)
      << what << ": expected a disco.DRef or None, got "
      << std::string(py::str(py::type::of(h).attr("__name__")));
  return h.cast<const PyDRef&>().ref;
}

// A DRef the call cannot do without (a collective's tensors, as in TVM's Session.allreduce): None
// is refused here, naming the argument, rather than sent as an empty register.
DRef RequiredRefOf(py::handle h, const char* what) {
  DISCO_CHECK(!h.is_none(), TypeError)
      << what << ": expected a disco.DRef of a tensor, got None (for in place, pass the same DRef "
      << "as src and dst)";
  return RefOf(h, what);
}

// What Python gets for a register of the session `ps`.
PyDRef Ref(PySession& ps, DRef r) { return PyDRef(std::move(r), ps.state); }
py::object Wrap(PySession& ps, DRef r) { return py::cast(Ref(ps, std::move(r))); }

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

// The Python exception for a C++ one, set; returns null (for functions of the C API).
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

// The C++ value of `self`, an instance of a bound class T that the fast paths below receive: a
// TypeError when it was made without its constructor (T.__new__(T)), which holds no value.
template <typename T>
T& ValueOf(PyObject* self, const char* type) {
  auto v_h = reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder();
  DISCO_CHECK(v_h.value_ptr() != nullptr && v_h.holder_constructed(), TypeError)
      << "this " << type << " was made without its constructor (" << type
      << ".__new__); get one from the session";
  return *static_cast<T*>(v_h.value_ptr());
}

// DPackedFunc's tp_call: f(*args) without pybind11's dispatcher, which costs more than the call.
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

// Runs `f` on the session with the GIL released.
template <typename F>
auto Released(F&& f) {
  py::gil_scoped_release release;
  return f();
}

Shape ToShape(py::handle obj) {
  if (py::isinstance<py::int_>(obj)) return Shape({obj.cast<int64_t>()});
  DISCO_CHECK(!py::isinstance<PyDRef>(obj), TypeError)
      << "shape: expected a tuple of ints, got a disco.DRef (a shape is given by value; a "
         "register's content may differ between workers)";
  std::vector<int64_t> dims;
  for (py::handle d : py::reinterpret_borrow<py::sequence>(obj)) {
    DISCO_CHECK(PyLong_Check(d.ptr()) && !PyBool_Check(d.ptr()), TypeError)
        << "shape: expected a sequence of ints, got an item of type "
        << std::string(py::str(py::type::of(d).attr("__name__")));
    dims.push_back(d.cast<int64_t>());
  }
  return Shape(std::move(dims));
}

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

// ---- Ctrl-C -------------------------------------------------------------------------------------

// SIGINT while the controller runs: Python's KeyboardInterrupt when Python code runs (the
// controller then ends the session and every rank exits non-zero). A controller waiting inside the
// runtime never returns to Python, so if the interrupt is not taken within 2 s the process ends
// itself by SIGINT, and the launcher (mpirun, or srun --kill-on-bad-exit) ends the other ranks.
std::atomic<int64_t> g_sigint_at{0};
std::atomic<bool> g_controller_running{false};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void OnSigint(int) {
  g_sigint_at.store(NowMs());
  PyErr_SetInterruptEx(SIGINT);
}

void InterruptMonitor() {
  while (g_controller_running.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int64_t at = g_sigint_at.load();
    if (at != 0 && NowMs() - at > 2000) {
      static const char kMsg[] =
          "disco: interrupted (SIGINT) while the controller waits in the runtime; ending the job\n";
      ssize_t ignored = write(2, kMsg, sizeof kMsg - 1);
      (void)ignored;
      exit_cleanup::RemoveRegisteredFiles();  // a served job's generated key file, say
      signal(SIGINT, SIG_DFL);
      raise(SIGINT);
    }
  }
}

// Python's SIGINT handler for the controller's run: the interrupt reached Python (the controller
// runs Python code, and may handle KeyboardInterrupt and go on working), so the 2 s deadline of a
// controller stuck inside the runtime no longer applies.
py::object WrapPythonSigintHandler(py::object handler) {
  return py::cpp_function([handler](py::object signum, py::object frame) {
    g_sigint_at.store(0);
    return handler(signum, frame);
  });
}

// ---- The controller's exit code -----------------------------------------------------------------

// What the controller of this rank did (rank 0 only runs one).
struct ControllerOutcome {
  bool ran = false;
  bool returned = false;  // it returned an int or None (not an exception, not another type)
  int code = 0;           // what it returned
};

void PrintToStderr(const std::string& text) {
  py::print(text, py::arg("file") = py::module_::import("sys").attr("stderr"));
}

// The exit code a controller returned (None is 0), or false after saying why it is none.
bool ControllerCode(py::handle r, int* code) {
  if (r.is_none()) {
    *code = 0;
    return true;
  }
  const std::string type = py::str(py::type::of(r).attr("__name__"));
  if (PyLong_Check(r.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(r.ptr(), &overflow);  // NOLINT(runtime/int)
    if (overflow == 0 && v >= INT_MIN && v <= INT_MAX) {
      *code = static_cast<int>(v);
      return true;
    }
    PyErr_Clear();
    PrintToStderr("TypeError: the controller must return an int exit code or None, got " + type +
                  " " + std::string(py::str(r)) + ", which is out of range");
    return false;
  }
  PrintToStderr("TypeError: the controller must return an int exit code or None, got " + type);
  return false;
}

int RunController(py::function controller, Session& session, ControllerOutcome* outcome,
                  std::weak_ptr<SessionState>* state) {
  py::gil_scoped_acquire gil;
  auto ps = std::make_shared<PySession>();
  ps->session = &session;
  *state = ps->state;
  outcome->ran = true;
  int code = 1;
  try {
    py::object r = controller(ps);
    if (ControllerCode(r, &code)) {
      outcome->returned = true;
      outcome->code = code;
    } else {
      code = 1;
    }
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_SystemExit)) {
      py::object c = e.value().attr("code");
      code = c.is_none() ? 0 : (py::isinstance<py::int_>(c) ? c.cast<int>() : 1);
      if (!c.is_none() && !py::isinstance<py::int_>(c))
        py::print(c, py::arg("file") = py::module_::import("sys").attr("stderr"));
    } else {
      code = e.matches(PyExc_KeyboardInterrupt) ? 130 : 1;
      e.restore();
      PyErr_Print();
    }
  } catch (const std::exception& e) {
    PrintToStderr(std::string("disco: the controller's result: ") + e.what());
    code = 1;
  }
  g_sigint_at.store(0);
  ps->session = nullptr;
  ps->state->End(/*gone=*/false);  // DRefs dropped from now on wait until the session is gone
  return code;
}

// ---- MPI for Python programs --------------------------------------------------------------------

// MPI that disco.main starts is finalized when the process exits (Python's atexit), as mpi4py
// does, not when disco.main returns: a second disco.main, and mpi4py imported after disco.main,
// find MPI running. MPI that the program started (mpi4py) is the program's to finalize. The
// thread level is SERIALIZED: any Python thread may drive the session, one at a time (CallScope).
void EnsureMpi() {
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  DISCO_CHECK(!finalized, RuntimeError)
      << "disco.main: MPI has been finalized in this process (mpi4py's MPI.Finalize(), or the "
         "program's own MPI_Finalize), and MPI cannot start again; run disco.main before MPI is "
         "finalized";
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  DISCO_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) == MPI_SUCCESS,
              RuntimeError)
      << "disco.main: MPI_Init_thread failed";
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }));
}

// ---- Python stacks in the watchdog's lines ------------------------------------------------------

// faulthandler prints every Python thread's stack from a signal handler, without the GIL (so it
// works while a stuck worker function holds it); the watchdog raises this signal on its own
// thread before it ends the job, so its line is followed by where Python code was.
int StackDumpSignal() { return SIGRTMAX - 2; }
void DumpPythonStacks() { raise(StackDumpSignal()); }

// Registers the dump for disco.main's run; false when the program uses the signal itself.
bool StartStackDumps() {
  struct sigaction current {};
  if (sigaction(StackDumpSignal(), nullptr, &current) != 0 || current.sa_handler != SIG_DFL) {
    return false;
  }
  py::module_::import("faulthandler")
      .attr("register")(StackDumpSignal(), py::arg("file") = 2, py::arg("all_threads") = true,
                        py::arg("chain") = false);
  watchdog::SetStackDumper(&DumpPythonStacks);
  return true;
}

void StopStackDumps() {
  watchdog::SetStackDumper(nullptr);
  py::module_::import("faulthandler").attr("unregister")(StackDumpSignal());
}

// disco.main: (the exit code, whether the process should exit with it now). The latter is true on
// rank 0 when the code is not one the controller returned (it raised, called sys.exit, was
// interrupted, returned another type, or the job failed after it returned).
py::tuple Main(py::function controller, std::vector<std::string> argv) {
  EnsureMpi();
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int argc = static_cast<int>(argv.size());
  char** argvp = cargv.data();
  py::module_ threading = py::module_::import("threading");
  const bool main_thread = threading.attr("current_thread")().is(threading.attr("main_thread")());
  struct sigaction old_int {};
  sigaction(SIGINT, nullptr, &old_int);
  // An ignored SIGINT (nohup, a background job of a script) stays ignored.
  const bool handle_sigint = main_thread && old_int.sa_handler != SIG_IGN;
  py::object python_handler;  // Python's own SIGINT handler, wrapped during the run
  if (handle_sigint) {
    py::module_ signal_module = py::module_::import("signal");
    py::object current = signal_module.attr("getsignal")(SIGINT);
    if (PyCallable_Check(current.ptr())) {
      python_handler = current;
      signal_module.attr("signal")(SIGINT, WrapPythonSigintHandler(current));
    }
    struct sigaction sa {};
    sa.sa_handler = OnSigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
  }
  const bool stack_dumps = StartStackDumps();
  g_sigint_at.store(0);
  g_controller_running.store(true);
  std::thread monitor(InterruptMonitor);
  ControllerOutcome outcome;
  std::weak_ptr<SessionState> state;
  int code;
  {
    py::gil_scoped_release release;
    code = disco::Main(argc, argvp,
                       [&](Session& s) { return RunController(controller, s, &outcome, &state); });
  }
  g_controller_running.store(false);
  monitor.join();
  if (stack_dumps) StopStackDumps();
  if (handle_sigint) {
    sigaction(SIGINT, &old_int, nullptr);
    if (python_handler) py::module_::import("signal").attr("signal")(SIGINT, python_handler);
  }
  if (std::shared_ptr<SessionState> st = state.lock()) st->End(/*gone=*/true);
  const bool exit_now = outcome.ran && (!outcome.returned || code != outcome.code);
  return py::make_tuple(code, exit_now);
}

SessionPtr Connect(const std::string& host, int port, const std::string& key,
                   int connect_timeout_ms, int reply_timeout_ms, const std::string& key_file) {
  ConnectOptions options;
  options.connect_timeout_ms = connect_timeout_ms;
  options.reply_timeout_ms = reply_timeout_ms;
  options.key_file = key_file;
  auto ps = std::make_shared<PySession>();
  {
    py::gil_scoped_release release;
    ps->owned = std::make_unique<Session>(disco::Connect(host, port, key, options));
  }
  ps->session = ps->owned.get();
  ps->remote = true;
  ps->where = host + ":" + std::to_string(port);
  return ps;
}

// A captured graph (disco.Graph; docs/graphs.md): `with sess.capture(num_inputs=n) as g:` records
// the session calls made in the block (g.inputs are their placeholders); g.replay(*inputs) runs
// them again on every worker with one frame.
struct PyGraph {
  SessionPtr session;
  int num_inputs = 0;
  py::list inputs;
  Graph graph;
  bool capturing = false;
};

// The text before "--" is the signature inspect.signature reads (__text_signature__); __doc__ is
// the rest.
constexpr const char* kReplayDoc =
    "replay($self, /, *inputs)\n--\n\n"
    "replay(*inputs): runs the recorded calls on every worker with these inputs (async and "
    "ordered).";

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

// Graph.replay as a METH_FASTCALL method: without pybind11's dispatcher, which costs more than a
// replay (as DPackedFunc's tp_call).
PyObject* GraphReplay(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  try {
    ReplayGraph(ValueOf<PyGraph>(self, "disco.Graph"), args, static_cast<size_t>(nargs));
    Py_RETURN_NONE;
  } catch (...) {
    return SetPythonError(std::current_exception());
  }
}

void BindGraph(py::module_& m) {
  py::class_<PyGraph, std::shared_ptr<PyGraph>> graph(m, "Graph",
                                                      R"doc(A captured sequence of session calls.

Made by ``Session.capture(num_inputs)`` and filled by its ``with`` block, which records the calls
it makes instead of running them (``inputs[i]`` is a placeholder for the i-th replay input; DRefs
made in the block name the registers every replay writes). ``replay(*inputs)`` runs the recording
on every worker with one small frame. Syncs, copies, debug reads and writes, ``init_ccl``,
``shutdown`` and a nested capture inside the block are a ValueError, and the capture is discarded.
``empty`` inside the block allocates once, at install.)doc");
  graph
      .def(
          "__enter__",
          [](std::shared_ptr<PyGraph> g) {
            DISCO_CHECK(!g->capturing && !g->graph.defined(), ValueError)
                << "this disco.Graph was captured already; call sess.capture() again";
            CallScope call(g->session->state.get());
            Session& s = g->session->get(call);
            std::vector<Any> inputs =
                Released([&] { return s.backend()->BeginCapture(g->num_inputs); });
            g->inputs = py::list();
            for (Any& a : inputs) g->inputs.append(PyDRef(a.cast<DRef>(), nullptr));
            g->capturing = true;
            return g;
          },
          "Starts recording the session's calls; returns this graph.")
      .def(
          "__exit__",
          [](PyGraph& g, py::handle type, py::handle, py::handle) {
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
          },
          py::arg("exc_type"), py::arg("exc_value"), py::arg("traceback"),
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
      .def("__repr__", [](PyGraph& g) {
        if (!g.graph.defined()) {
          return std::string("disco.Graph(") + (g.capturing ? "capturing" : "not captured") +
                 ", num_inputs=" + std::to_string(g.num_inputs) + ")";
        }
        return "disco.Graph(id=" + std::to_string(g.graph.id()) +
               ", num_inputs=" + std::to_string(g.num_inputs) +
               ", num_calls=" + std::to_string(g.graph.num_calls()) + ")";
      });
  static PyMethodDef replay_def = {
      "replay", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&GraphReplay)),
      METH_FASTCALL, kReplayDoc};
  auto* type = reinterpret_cast<PyTypeObject*>(graph.ptr());
  py::object replay = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, &replay_def));
  if (!replay) throw py::error_already_set();
  graph.attr("replay") = replay;
}

void BindSession(py::module_& m) {
  py::class_<PySession, SessionPtr>(m, "Session", R"doc(The controller's view of a disco job.

In a job: the argument of the controller that disco.main runs on rank 0. Remote: disco.connect.
Calls are asynchronous and ordered; errors of workers surface at the next sync or debug read as
disco.RemoteError. A context manager: leaving it shuts the session down.)doc")
      // disco.Session(host, port, key, ...) is disco.connect(...): the constructor a Python
      // subclass (disco.ProcessSession) calls.
      .def(py::init(&Connect), py::arg("host"), py::arg("port"), py::arg("key") = "",
           py::arg("connect_timeout_ms") = 10000, py::arg("reply_timeout_ms") = -1,
           py::arg("key_file") = "",
           "Attaches to a served job, as disco.connect(host, port, key, ...) does.")
      .def_property_readonly(
          "num_workers",
          [](PySession& s) {
            CallScope call(s.state.get());
            return s.get(call).num_workers();
          },
          "Number of workers (the MPI job's ranks).")
      .def_property_readonly(
          "num_groups",
          [](PySession& s) {
            CallScope call(s.state.get());
            return s.get(call).num_groups();
          },
          "Number of worker groups (DISCO_NUM_GROUPS, default 1): contiguous blocks of workers.")
      .def_property_readonly(
          "is_remote", [](PySession& s) { return s.remote; },
          "Whether this session is a client of a served job (disco.connect).")
      .def(
          "get_global_func",
          [](SessionPtr s, const std::string& name) {
            CallScope call(s->state.get());
            Session& sess = s->get(call);
            DRef f = Released([&] { return sess.GetGlobalFunc(name); });
            return PyFunc(std::move(f), s, name);
          },
          py::arg("name"), "A DPackedFunc for the global function `name` on every worker.")
      .def(
          "call_packed",
          [](PySession& s, const PyDRef& func, py::args args) {
            return CallPacked(s, func.ref, args);
          },
          py::arg("func"), "Calls `func` on every worker; returns the DRef of the result.")
      .def(
          "empty",
          [](PySession& s, py::object shape, py::object dtype, py::object device, bool worker0_only,
             bool in_group) {
            CallScope call(s.state.get());
            Session& sess = s.get(call);
            Shape sh = ToShape(shape);
            DLDataType dt = ToDataType(dtype);
            DLDevice dev = ToDevice(device);
            return Ref(s,
                       Released([&] { return sess.Empty(sh, dt, dev, worker0_only, in_group); }));
          },
          py::arg("shape"), py::arg("dtype"), py::arg("device") = py::none(),
          py::arg("worker0_only") = false, py::arg("in_group") = true,
          "A new tensor register: an uninitialised tensor of `shape` and `dtype` on every worker "
          "(with `worker0_only`, on worker 0 only, or with `in_group` on each group's first "
          "worker). `device`: None or 'cpu' for host memory, 'cuda' for each worker's own GPU "
          "(after init_ccl), a disco.Device.")
      .def(
          "sync_worker_0",
          [](PySession& s) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Released([&] { x.SyncWorker(0); });
          },
          "Waits until worker 0 has run every call sent so far; raises its pending errors.")
      .def(
          "sync_worker",
          [](PySession& s, int i) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Released([&] { x.SyncWorker(i); });
          },
          py::arg("worker_id"),
          "Waits until `worker_id` has run every call sent so far; raises its pending errors "
          "(disco.RemoteError).")
      .def(
          "sync_all",
          [](PySession& s) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Released([&] { x.SyncAll(); });
          },
          "Waits for every worker; raises the pending errors of workers (disco.RemoteError).")
      .def(
          "copy_to_worker_0",
          [](PySession& s, py::handle host, py::handle remote) -> py::object {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Tensor t = ToTensorOrThrow(host, "copy_to_worker_0(host)");
            if (remote.is_none()) return Wrap(s, Released([&] { return x.CopyToWorker0(t); }));
            DRef r = RefOf(remote, "copy_to_worker_0(remote)");
            Released([&] { x.CopyToWorker0(t, r); });
            return py::reinterpret_borrow<py::object>(remote);
          },
          py::arg("host"), py::arg("remote") = py::none(),
          "Copies a host array into worker 0's tensor `remote` (a new register when None).")
      .def(
          "copy_from_worker_0",
          [](PySession& s, py::handle host, const PyDRef& remote) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            const char* what = "copy_from_worker_0(host)";
            if (py::isinstance<py::array>(host)) {
              auto a = py::reinterpret_borrow<py::array>(host);
              py::object native = a.dtype().attr("newbyteorder")("=");
              if (!native.equal(a.dtype())) {
                // The other byte order: worker 0's values into a native array, then numpy
                // converts them into `host` (written in place like any destination).
                DISCO_CHECK(a.writeable(), ValueError)
                    << what << ": the numpy array must be writeable (it is written in place)";
                py::array tmp = py::array::ensure(
                    py::module_::import("numpy").attr("empty")(a.attr("shape"), native));
                Tensor t = ToTensorInPlace(tmp, what);
                Released([&] { x.CopyFromWorker0(t, remote.ref); });
                py::module_::import("numpy").attr("copyto")(a, tmp);
                return;
              }
            }
            Tensor t = ToTensorInPlace(host, what);
            Released([&] { x.CopyFromWorker0(t, remote.ref); });
          },
          py::arg("host"), py::arg("remote"),
          "Copies worker 0's tensor `remote` into `host` (a numpy array, written in place).")
      .def(
          "init_ccl",
          [](PySession& s, const std::string& ccl, py::args device_ids) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            std::vector<int64_t> ids;
            for (py::handle d : device_ids) ids.push_back(d.cast<int64_t>());
            Released([&] { x.InitCCL(ccl, ids); });
          },
          py::arg("ccl"),
          "init_ccl(ccl, *device_ids): initialises the collective library on every worker: "
          "'mpi', 'nccl' or 'auto' (DISCO_CCL overrides). `device_ids` maps node-local ranks to "
          "GPUs (none: local rank modulo the visible GPUs). Calling it again replaces the "
          "communicators.")
      .def(
          "allreduce",
          [](PySession& s, py::handle src, py::handle dst, const std::string& op, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RequiredRefOf(src, "allreduce(src)"), b = RequiredRefOf(dst, "allreduce(dst)");
            return Ref(s, Released([&] { return x.AllReduce(a, op, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("op") = "sum", py::arg("in_group") = true,
          "Allreduces each worker's tensor `src` into `dst` (the same DRef for in place) over "
          "each group (`in_group`) or the world; `op`: sum, prod, min, max, avg. Returns the "
          "call's (None) result register.")
      .def(
          "allgather",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RequiredRefOf(src, "allgather(src)"), b = RequiredRefOf(dst, "allgather(dst)");
            return Ref(s, Released([&] { return x.AllGather(a, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
          "Gathers every worker's `src` into `dst` on every worker (n x src, in rank order), "
          "over each group or the world. Returns the call's (None) result register.")
      .def(
          "reduce_scatter",
          [](PySession& s, py::handle src, py::handle dst, const std::string& op, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RequiredRefOf(src, "reduce_scatter(src)");
            DRef b = RequiredRefOf(dst, "reduce_scatter(dst)");
            return Ref(s, Released([&] { return x.ReduceScatter(a, op, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("op") = "sum", py::arg("in_group") = true,
          "Reduces `src` (n x dst) over each group or the world and leaves part i in worker i's "
          "`dst`; `op`: sum, prod, min, max, avg. Returns the call's (None) result register.")
      .def(
          "broadcast",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) -> py::object {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Tensor t = ToTensorOrThrow(src, "broadcast(src)");
            if (dst.is_none()) return Wrap(s, Released([&] { return x.Broadcast(t, in_group); }));
            DRef d = RefOf(dst, "broadcast(dst)");
            Released([&] {
              DRef on0 = x.CopyToWorker0(t);
              x.Broadcast(on0, in_group, d);
            });
            return py::reinterpret_borrow<py::object>(dst);
          },
          py::arg("src"), py::arg("dst") = py::none(), py::arg("in_group") = true,
          "The host array `src` on every worker: into `dst`, or a new register when None.")
      .def(
          "broadcast_from_worker0",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RefOf(src, "broadcast_from_worker0(src)");
            DRef b = RefOf(dst, "broadcast_from_worker0(dst)");
            return Ref(s, Released([&] { return x.Broadcast(a, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
          "Copies worker 0's tensor `src` (each group's first worker's, with `in_group`) into "
          "`dst` on every worker. Returns the call's (None) result register.")
      .def(
          "scatter",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) -> py::object {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Tensor t = ToTensorOrThrow(src, "scatter(src)");
            if (dst.is_none()) return Wrap(s, Released([&] { return x.Scatter(t, in_group); }));
            DRef d = RefOf(dst, "scatter(dst)");
            Released([&] {
              DRef on0 = x.CopyToWorker0(t);
              x.Scatter(on0, in_group, d);
            });
            return py::reinterpret_borrow<py::object>(dst);
          },
          py::arg("src"), py::arg("dst") = py::none(), py::arg("in_group") = true,
          "The host array `src` split along its first axis, part i to worker i.")
      .def(
          "scatter_from_worker0",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RefOf(src, "scatter_from_worker0(src)");
            DRef b = RefOf(dst, "scatter_from_worker0(dst)");
            return Ref(s, Released([&] { return x.Scatter(a, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
          "Splits worker 0's tensor `src` (None on the others; each group's first worker's, with "
          "`in_group`) along its flattened elements: part i into worker i's `dst`. Returns the "
          "call's (None) result register.")
      .def(
          "gather_to_worker0",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RefOf(src, "gather_to_worker0(src)");
            DRef b = RefOf(dst, "gather_to_worker0(dst)");
            return Ref(s, Released([&] { return x.Gather(a, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
          "Gathers every worker's `src` into worker 0's `dst` (n x src, in rank order; None on "
          "the others; each group's first worker, with `in_group`). Returns the call's (None) "
          "result register.")
      .def(
          "barrier",
          [](PySession& s, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            return Ref(s, Released([&] { return x.Barrier(in_group); }));
          },
          py::arg("in_group") = false,
          "A barrier of every worker (of each group, with `in_group`) as a session call. Returns "
          "the call's (None) result register.")
      .def(
          "load_tensors",
          [](PySession& s, const std::string& path, py::dict plan, bool in_group,
             py::object device) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            std::vector<h5::LoadEntry> entries;
            for (auto kv : plan) {
              h5::LoadEntry e;
              e.name = kv.first.cast<std::string>();
              e.shard_axis = kv.second.is_none() ? h5::kAxisFromFile : kv.second.cast<int64_t>();
              entries.push_back(std::move(e));
            }
            DLDevice dev = ToDevice(device);
            std::map<std::string, DRef> loaded =
                Released([&] { return h5::LoadTensors(x, path, entries, in_group, dev); });
            py::dict out;
            for (auto& kv : loaded) out[py::str(kv.first)] = Wrap(s, kv.second);
            return out;
          },
          py::arg("path"), py::arg("plan"), py::arg("in_group") = false,
          py::arg("device") = py::none(),
          "Loads datasets of an HDF5 file, {name: shard_axis} (-1 whole, None the file's "
          "shard_axis attribute); returns {name: DRef}.")
      .def(
          "save_tensors",
          [](PySession& s, const std::string& path, py::dict tensors, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            std::vector<h5::SaveEntry> entries;
            for (auto kv : tensors) {
              h5::SaveEntry e;
              e.name = kv.first.cast<std::string>();
              py::handle v = kv.second;
              if (py::isinstance<PyDRef>(v)) {
                e.shard = v.cast<const PyDRef&>().ref;
              } else {
                auto t = v.cast<py::tuple>();
                DISCO_CHECK(t.size() == 2, ValueError)
                    << "save_tensors: '" << e.name << "': expected a DRef or (DRef, shard_axis)";
                e.shard = RefOf(t[0], "save_tensors");
                e.shard_axis = t[1].is_none() ? h5::kReplicate : t[1].cast<int64_t>();
              }
              entries.push_back(std::move(e));
            }
            Released([&] { h5::SaveTensors(x, path, entries, in_group); });
          },
          py::arg("path"), py::arg("tensors"), py::arg("in_group") = false,
          "Saves {name: (DRef, shard_axis)} into an HDF5 file (-1 or None: every worker holds "
          "the whole tensor).")
      .def(
          "shutdown",
          [](PySession& s) {
            CallScope call(s.state.get());
            if (s.session == nullptr) return;
            Released([&] { s.session->Shutdown(); });
            s.shut_down = true;
          },
          "Ends the session (remote: detaches this client; the served job goes on).")
      .def(
          "capture",
          [](SessionPtr s, int num_inputs) {
            auto g = std::make_shared<PyGraph>();
            g->session = std::move(s);
            g->num_inputs = num_inputs;
            return g;
          },
          py::arg("num_inputs") = 0,
          "A disco.Graph to fill in a with-block: `with sess.capture(1) as g: ...`, then "
          "`g.replay(x)`.")
      .def(
          "__enter__", [](SessionPtr s) { return s; }, "Returns this session.")
      .def(
          "__exit__",
          [](PySession& s, py::args) {
            CallScope call(s.state.get());
            if (s.session == nullptr) return;
            Released([&] { s.session->Shutdown(); });
            s.shut_down = true;
          },
          "Shuts the session down, as shutdown().")
      .def("__repr__", [](const PySession& s) {
        // No CallScope: a repr works from any thread, and inside the session's own calls.
        if (s.session == nullptr || s.shut_down) return std::string("disco.Session(ended)");
        return "disco.Session(num_workers=" + std::to_string(s.session->num_workers()) +
               ", num_groups=" + std::to_string(s.session->num_groups()) + ", " +
               (s.remote ? "remote " + s.where : std::string("in_job")) + ")";
      });
}

void BindValues(py::module_& m) {
  py::class_<DLDevice>(m, "Device", "A DLPack device: (device_type, device_id).")
      .def(py::init([](int type, int id) {
             return DLDevice{static_cast<DLDeviceType>(type), id};
           }),
           py::arg("device_type"), py::arg("device_id") = 0,
           "A device of DLPack type `device_type` (1 cpu, 2 cuda) and index `device_id` (-1 with "
           "cuda: each worker's own GPU).")
      .def_property_readonly(
          "device_type", [](const DLDevice& d) { return int(d.device_type); },
          "The DLPack device type: 1 cpu, 2 cuda.")
      .def_property_readonly(
          "device_id", [](const DLDevice& d) { return d.device_id; },
          "The device's index (-1: each worker's own GPU).")
      .def(
          "__eq__", [](const DLDevice& a, const DLDevice& b) { return a == b; }, py::arg("other"),
          "Whether both name the same device.")
      .def(
          "__hash__", [](const DLDevice& d) { return int(d.device_type) * 1000003 + d.device_id; },
          "A hash of (device_type, device_id).")
      .def("__repr__",
           [](const DLDevice& d) { return "disco.Device('" + DeviceToString(d) + "')"; })
      .def("__str__", [](const DLDevice& d) { return DeviceToString(d); });

  py::class_<Tensor>(m, "Tensor", R"doc(A DLPack tensor of disco's runtime.

np.from_dlpack(t) shares its memory (host tensors). numpy has no bfloat16: t.numpy() of a
bfloat16 tensor is a uint16 view of its raw bits (the upper half of the float32 bit pattern);
Tensor.from_numpy(a, "bfloat16") makes a bfloat16 tensor of such bits, sharing a's memory.)doc")
      .def_property_readonly(
          "shape",
          [](const Tensor& t) {
            py::tuple out(t.ndim());
            for (int i = 0; i < t.ndim(); ++i) out[i] = t.shape()[i];
            return out;
          },
          "The extents, a tuple of ints.")
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return DataTypeToString(t.dtype()); },
          "The element type's name ('float32', 'bfloat16', ...).")
      .def_property_readonly("device", &Tensor::device, "Where the memory is, a disco.Device.")
      .def_property_readonly("ndim", &Tensor::ndim, "The number of dimensions.")
      .def_property_readonly("nbytes", &Tensor::nbytes, "The size of the data in bytes.")
      .def(
          "__dlpack__",
          [](const Tensor& t, py::object stream) {
            DLManagedTensor* managed = t.ToDLPack();
            PyObject* cap = PyCapsule_New(managed, "dltensor", [](PyObject* c) {
              if (!PyCapsule_IsValid(c, "dltensor")) return;  // consumed: renamed
              auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
              if (m != nullptr && m->deleter != nullptr) m->deleter(m);
            });
            if (cap == nullptr) {
              managed->deleter(managed);
              throw py::error_already_set();
            }
            return py::reinterpret_steal<py::object>(cap);
          },
          py::arg("stream") = py::none(),
          "A DLPack capsule sharing this tensor's memory (the DLPack protocol; `stream` is "
          "ignored).")
      .def(
          "__dlpack_device__",
          [](const Tensor& t) {
            return py::make_tuple(int(t.device().device_type), t.device().device_id);
          },
          "(device_type, device_id) of the DLPack protocol.")
      .def("numpy", &TensorToNumpy, "A numpy array sharing this host tensor's memory.")
      .def_static(
          "from_dlpack", [](py::handle obj) { return ToTensorOrThrow(obj, "Tensor.from_dlpack"); },
          py::arg("obj"),
          "A Tensor sharing the memory of a numpy array or DLPack producer (a compact native copy "
          "of one that is read-only, not contiguous or in the other byte order).")
      .def_static(
          "from_numpy",
          [](py::handle obj, py::object dtype) {
            Tensor t = ToTensorOrThrow(obj, "Tensor.from_numpy");
            if (dtype.is_none()) return t;
            DLDataType want = ToDataType(dtype);
            DISCO_CHECK(DataTypeBytes(want) == DataTypeBytes(t.dtype()), ValueError)
                << "Tensor.from_numpy: a " << DataTypeToString(t.dtype()) << " array cannot be "
                << "viewed as " << DataTypeToString(want) << " (element sizes differ)";
            DLManagedTensor* managed = t.ToDLPack();
            managed->dl_tensor.dtype = want;
            return Tensor::FromDLPack(managed);
          },
          py::arg("array"), py::arg("dtype") = py::none(),
          "A Tensor sharing a numpy array's memory (or a compact native copy, as from_dlpack), "
          "its elements read as `dtype` (same size).")
      .def_static(
          "empty",
          [](py::object shape, py::object dtype, py::object device) {
            return Tensor::Empty(ToShape(shape), ToDataType(dtype), ToDevice(device));
          },
          py::arg("shape"), py::arg("dtype"), py::arg("device") = py::none(),
          "A new uninitialised tensor in this process (device None: the host).")
      .def("__repr__", [](const Tensor& t) { return "disco." + t.ToString(); });

  py::class_<PyDRef>(m, "DRef", "A register on every worker of a session.")
      .def_property_readonly(
          "reg_id", [](const PyDRef& r) { return r.ref.reg_id(); },
          "The register's id (the same on every worker).")
      .def(
          "debug_get_from_remote",
          [](const PyDRef& r, int worker) {
            CallScope call(r.state.get());
            Any v = Released([&] { return r.ref.DebugGetFromRemote(worker); });
            return FromAny(v);
          },
          py::arg("worker_id"), "The register's value on `worker_id` (tensors as numpy copies).")
      .def(
          "debug_copy_from",
          [](const PyDRef& r, int worker, py::handle value) {
            CallScope call(r.state.get());
            Any v = ToAny(value);
            Released([&] { r.ref.DebugCopyFrom(worker, v); });
          },
          py::arg("worker_id"), py::arg("value"),
          "Stores `value` into the register on `worker_id` (a tensor is copied into the "
          "register's tensor).")
      .def("__repr__", [](const PyDRef& r) {
        return "disco.DRef(reg=" + std::to_string(r.ref.reg_id()) + ")";
      });

  py::class_<PyFunc, PyDRef> func(m, "DPackedFunc",
                                  "A DRef holding a function; calling it is "
                                  "session.call_packed(self, *args).");
  func.def_property_readonly(
          "name", [](const PyFunc& f) { return f.name; },
          "The global function's name, as given to get_global_func.")
      .def("__repr__", [](const PyFunc& f) {
        return "disco.DPackedFunc(" + std::string(py::repr(py::str(f.name))) +
               ", reg=" + std::to_string(f.ref.reg_id()) + ")";
      });
  auto* func_type = reinterpret_cast<PyTypeObject*>(func.ptr());
  func_type->tp_call = &CallFunc;
  // DPackedFunc.__call__, for inspect.signature and help(): the same call through a method
  // descriptor. It goes into the type's dict directly: setting the attribute would make tp_call
  // the generic slot that looks __call__ up on every call, and f(*args) keeps CallFunc.
  static PyMethodDef call_def = {
      "__call__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&CallFunc)),
      METH_VARARGS | METH_KEYWORDS,
      "__call__($self, /, *args)\n--\n\n"
      "Calls the function on every worker, as session.call_packed(self, *args); returns the DRef "
      "of the result (positional arguments only)."};
  py::object call = py::reinterpret_steal<py::object>(PyDescr_NewMethod(func_type, &call_def));
  if (!call || PyDict_SetItemString(func_type->tp_dict, "__call__", call.ptr()) != 0) {
    throw py::error_already_set();
  }
  PyType_Modified(func_type);

  py::class_<WorkerInfo>(m, "WorkerInfo", "Where a worker function runs.")
      .def_readonly("worker_id", &WorkerInfo::worker_id, "This worker's id (its MPI rank).")
      .def_readonly("num_workers", &WorkerInfo::num_workers, "Number of workers in the job.")
      .def_readonly("num_groups", &WorkerInfo::num_groups, "Number of worker groups.")
      .def_readonly("group_id", &WorkerInfo::group_id, "This worker's group.")
      .def_readonly("local_rank", &WorkerInfo::local_rank, "This worker's rank on its node.")
      .def_readonly("device", &WorkerInfo::device,
                    "This worker's device: its collective library's after init_ccl (its GPU under "
                    "NCCL), else the host.")
      .def("__repr__", [](const WorkerInfo& w) {
        return "disco.WorkerInfo(worker_id=" + std::to_string(w.worker_id) +
               ", num_workers=" + std::to_string(w.num_workers) +
               ", group_id=" + std::to_string(w.group_id) +
               ", num_groups=" + std::to_string(w.num_groups) +
               ", local_rank=" + std::to_string(w.local_rank) + ", device='" +
               DeviceToString(w.device) + "')";
      });
}

// ---- Signatures for inspect.signature -----------------------------------------------------------

// pybind11 (2.10) writes each function's annotated signature as the first line of its docstring,
// which inspect.signature cannot read. CPython reads a builtin's signature (__text_signature__)
// from a docstring that begins "name(params)\n--\n\n", and shows the rest as __doc__. This pass
// prefixes the docstring of every pybind11 function of the module (module functions, methods,
// static methods, property getters and setters) with such a line made from its function record:
// the parameters' names, and their defaults where they are Python literals (`...` otherwise).
// __doc__ stays what it was; the signature is added. Overloaded functions keep pybind11's
// generic "(*args, **kwargs)" (there are none).

// The default of an argument as a Python literal inspect can evaluate.
std::string DefaultText(const py::detail::argument_record& a) {
  py::handle v = a.value;
  if (v.is_none() || PyBool_Check(v.ptr()) || PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr()) ||
      PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr())) {
    return py::repr(v);
  }
  return "...";
}

// "(self, shape, dtype, device=None, ...)" for a function record.
std::string TextSignature(const py::detail::function_record& rec) {
  std::vector<std::string> params;
  const size_t named = rec.nargs - (rec.has_args ? 1 : 0) - (rec.has_kwargs ? 1 : 0);
  bool starred = false;
  for (size_t i = 0; i < named; ++i) {
    if (i == rec.nargs_pos) {  // keyword-only parameters follow
      params.push_back(rec.has_args ? "*args" : "*");
      starred = true;
    }
    std::string p;
    if (i < rec.args.size() && rec.args[i].name != nullptr && rec.args[i].name[0] != '\0') {
      p = rec.args[i].name;
    } else if (i == 0 && rec.is_method) {
      p = "self";
    } else {
      p = "arg" + std::to_string(i - (rec.is_method ? 1 : 0));
    }
    if (i < rec.args.size() && rec.args[i].value) p += "=" + DefaultText(rec.args[i]);
    params.push_back(std::move(p));
    if (rec.nargs_pos_only > 0 && i + 1 == rec.nargs_pos_only) params.push_back("/");
  }
  if (rec.has_args && !starred) params.push_back("*args");
  if (rec.has_kwargs) params.push_back("**kwargs");
  std::string out = "(";
  for (size_t i = 0; i < params.size(); ++i) out += (i ? ", " : "") + params[i];
  return out + ")";
}

// Prefixes the docstring of `fn` (a pybind11 function, or an instancemethod, staticmethod or
// property wrapping some) with its text signature; anything else is left alone.
void AddTextSignature(py::handle fn, std::set<PyMethodDef*>* done) {
  PyObject* f = fn.ptr();
  if (PyObject_TypeCheck(f, &PyProperty_Type)) {
    AddTextSignature(fn.attr("fget"), done);
    AddTextSignature(fn.attr("fset"), done);
    return;
  }
  if (PyObject_TypeCheck(f, &PyStaticMethod_Type)) {
    AddTextSignature(fn.attr("__func__"), done);
    return;
  }
  if (PyInstanceMethod_Check(f)) f = PyInstanceMethod_GET_FUNCTION(f);
  if (!PyCFunction_Check(f)) return;
  PyObject* self = PyCFunction_GET_SELF(f);
  if (self == nullptr || !PyCapsule_CheckExact(self)) return;
  auto cap = py::reinterpret_borrow<py::capsule>(self);
  if (!py::detail::is_function_record_capsule(cap)) return;
  auto* rec = cap.get_pointer<py::detail::function_record>();
  PyMethodDef* def = reinterpret_cast<PyCFunctionObject*>(f)->m_ml;
  if (rec == nullptr || rec->next != nullptr || def != rec->def || !done->insert(def).second) {
    return;
  }
  std::string doc = std::string(def->ml_name) + TextSignature(*rec) + "\n--\n\n" +
                    (def->ml_doc != nullptr ? def->ml_doc : "");
  char* copy = strdup(doc.c_str());  // pybind11 frees ml_doc with std::free
  if (copy == nullptr) throw std::bad_alloc();
  std::free(const_cast<char*>(def->ml_doc));
  def->ml_doc = copy;
}

void AddTextSignatures(py::module_& m) {
  std::set<PyMethodDef*> done;
  for (auto item : py::reinterpret_borrow<py::dict>(m.attr("__dict__"))) {
    py::handle v = item.second;
    if (PyType_Check(v.ptr())) {  // tp_dict: the dict behind the mappingproxy of __dict__
      PyObject* members = reinterpret_cast<PyTypeObject*>(v.ptr())->tp_dict;
      for (auto member : py::reinterpret_borrow<py::dict>(members)) {
        AddTextSignature(member.second, &done);
      }
    } else {
      AddTextSignature(v, &done);
    }
  }
}

}  // namespace
}  // namespace python
}  // namespace disco

PYBIND11_MODULE(_core, m) {
  using namespace disco::python;  // NOLINT(build/namespaces)
  m.doc() = "disco's C++ runtime; import disco instead";
  g_remote_error = PyErr_NewExceptionWithDoc(
      "disco.RemoteError", "A worker failed; `worker` is its id.", PyExc_RuntimeError, nullptr);
  g_protocol_error = PyErr_NewExceptionWithDoc(
      "disco.ProtocolError", "A malformed message on the wire.", PyExc_RuntimeError, nullptr);
  g_internal_error = PyErr_NewExceptionWithDoc("disco.InternalError",
                                               "A broken invariant of disco itself (a bug).",
                                               PyExc_RuntimeError, nullptr);
  m.attr("RemoteError") = py::handle(g_remote_error);
  m.attr("ProtocolError") = py::handle(g_protocol_error);
  m.attr("InternalError") = py::handle(g_internal_error);
  py::register_exception_translator(&TranslateErrors);

  BindValues(m);
  BindSession(m);
  BindGraph(m);

  m.def("main", &Main, py::arg("controller"), py::arg("argv"),
        "disco.main's work: runs the job with `argv`; returns (exit code, whether rank 0 must "
        "exit with it now).");
  m.def("connect", &Connect, py::arg("host"), py::arg("port"), py::arg("key") = "",
        py::arg("connect_timeout_ms") = 10000, py::arg("reply_timeout_ms") = -1,
        py::arg("key_file") = "", "A Session attached to the job served at host:port.");
  m.def(
      "shutdown_remote_job",
      [](PySession& s, int exit_code) {
        CallScope call(s.state.get());
        disco::Session& x = s.get(call);
        Released([&] { disco::ShutdownRemoteJob(x, exit_code); });
        s.session = nullptr;
      },
      py::arg("session"), py::arg("exit_code") = 0,
      "Ends the served job of `session` (from connect); every rank exits with `exit_code`.");
  m.def(
      "serve",
      [](PySession& s, const disco::ServeOptions& options) {
        CallScope call(s.state.get());
        disco::Session& x = s.get(call);
        return Released([&] { return disco::Serve(x, options); });
      },
      py::arg("session"), py::arg("options"),
      "Serves the in-job `session` to remote clients (rank 0's controller) until one ends the "
      "job (returns its exit code) or max_clients have come and gone (returns 0).");
  py::class_<disco::ServeOptions>(m, "ServeOptions", "How disco.serve serves a session.")
      .def(py::init<>(),
           "The defaults: loopback, any free port, a key from DISCO_SERVE_KEY or "
           "generated.")
      .def_readwrite("host", &disco::ServeOptions::host,
                     "Address to listen on (default 127.0.0.1; 0.0.0.0 for every interface).")
      .def_readwrite("port", &disco::ServeOptions::port, "TCP port (0: any free port).")
      .def_readwrite("key", &disco::ServeOptions::key,
                     "The key clients must present, 16 characters or more (empty: "
                     "DISCO_SERVE_KEY, else a generated key written to key_file).")
      .def_readwrite("key_file", &disco::ServeOptions::key_file,
                     "Where a generated key goes (empty: ~/.disco/serve-PORT.key).")
      .def_readwrite("port_file", &disco::ServeOptions::port_file,
                     "When set, the port is written here once the server listens.")
      .def_readwrite("idle_timeout_s", &disco::ServeOptions::idle_timeout_s,
                     "A client silent this many seconds between requests is dropped (0: never).")
      .def_readwrite("request_timeout_ms", &disco::ServeOptions::request_timeout_ms,
                     "A client whose begun request, answer or copy moves no byte for this long "
                     "(plus a second per MiB still to move) is dropped.")
      .def_readwrite("max_packet_bytes", &disco::ServeOptions::max_packet_bytes,
                     "The largest request packet accepted.")
      .def_readwrite("max_clients", &disco::ServeOptions::max_clients,
                     "Stop after this many clients (0: until a client ends the job).")
      .def("__repr__", [](const disco::ServeOptions& o) {
        // The key itself stays out of reprs (logs, tracebacks).
        return "disco._core.ServeOptions(host=" + std::string(py::repr(py::str(o.host))) +
               ", port=" + std::to_string(o.port) + ", key=" + (o.key.empty() ? "''" : "<set>") +
               ", key_file=" + std::string(py::repr(py::str(o.key_file))) +
               ", port_file=" + std::string(py::repr(py::str(o.port_file))) +
               ", idle_timeout_s=" + std::to_string(o.idle_timeout_s) +
               ", request_timeout_ms=" + std::to_string(o.request_timeout_ms) +
               ", max_packet_bytes=" + std::to_string(o.max_packet_bytes) +
               ", max_clients=" + std::to_string(o.max_clients) + ")";
      });
  // A C++ no-op, and the same calls issued from C++: the baselines of bench/python_call.py.
  disco::Registry::Register("disco.py.noop", true)
      .set_body_packed([](const disco::Args&, disco::Any*) {});
  m.def(
      "_bench_calls",
      [](PySession& s, const PyDRef& func, py::tuple args, int64_t k, bool sync_each) {
        CallScope call(s.state.get());
        disco::Session& x = s.get(call);
        std::vector<disco::Any> packed;
        for (py::handle a : args) packed.push_back(ToAny(a));
        return Released([&] {
          auto t0 = std::chrono::steady_clock::now();
          for (int64_t i = 0; i < k; ++i) {
            x.CallWithPacked(func.ref, packed.data(), packed.size());
            if (sync_each) x.SyncAll();
          }
          x.SyncAll();
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                 static_cast<double>(k);
        });
      },
      py::arg("session"), py::arg("func"), py::arg("args"), py::arg("k"), py::arg("sync_each"),
      "Seconds per Session::CallPacked(func, *args) issued from C++ (benchmark baseline).");
  m.def(
      "_bench_replays",
      [](PyGraph& g, py::tuple args, int64_t k) {
        DISCO_CHECK(g.graph.defined(), ValueError) << "_bench_replays of a graph not captured";
        CallScope call(g.session->state.get());
        disco::Session& x = g.session->get(call);
        std::vector<disco::Any> inputs;
        for (py::handle a : args) inputs.push_back(ToAny(a, !g.session->remote));
        return Released([&] {
          auto t0 = std::chrono::steady_clock::now();
          for (int64_t i = 0; i < k; ++i) g.graph.Replay(inputs);
          x.SyncAll();
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                 static_cast<double>(k);
        });
      },
      py::arg("graph"), py::arg("args"), py::arg("k"),
      "Seconds per Graph::Replay(*args) issued from C++ (benchmark baseline).");
  m.def("register_func", &RegisterFunc, py::arg("name"), py::arg("func"),
        py::arg("override") = false, py::arg("tensors_as_numpy") = true,
        "Registers the Python callable `func` as the global function `name` on this rank (its "
        "host tensor arguments as numpy views, or disco.Tensor with tensors_as_numpy=False).");
  m.def("list_global_funcs", &disco::Registry::ListNames,
        "The names of every global function registered in this process, sorted.");
  m.def("this_worker", &disco::ThisWorker, py::return_value_policy::copy,
        "The calling worker function's disco.WorkerInfo.");
  m.def(
      "version", [] { return std::string(DISCO_VERSION); }, "disco's version string.");

  // Ends the whole MPI job from any rank (python3 -m disco: an exception no code caught): as the
  // C++ runtime's fatal path does, MPI_Abort when MPI runs. Before MPI has started, the process
  // ends by SIGTERM: every launcher ends a job whose rank dies of a signal, while MPICH's hydra
  // lets the others wait in MPI_Init for a rank that merely exited non-zero.
  m.def(
      "_abort_job",
      [](int code) {
        std::fflush(stdout);
        std::fflush(stderr);
        int initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
        if (!initialized) {
          std::signal(SIGTERM, SIG_DFL);
          std::raise(SIGTERM);
        }
        std::_Exit(code);
      },
      py::arg("code"),
      "Ends the MPI job: MPI_Abort with `code`, or before MPI has started this process by "
      "SIGTERM (which makes the launcher end the job).");
  AddTextSignatures(m);
}
