// A session's use from Python: which thread drives it and the DRefs other threads drop
// (SessionState, CallScope); Ctrl-C while the controller runs (SigintWatch); the controller's
// exit code (RunController). See module.h for the rules of threads and the GIL.
#include <disco/disco.h>
#include <pybind11/pybind11.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/exit_cleanup.h"
#include "module.h"

namespace disco {
namespace python {

// ---- Which thread drives a session, and calls made inside its own calls -------------------------

void SessionState::Queue(DRef ref) {
  std::lock_guard<std::mutex> lock(mu);
  orphans.push_back(std::move(ref));
  have_orphans.store(true, std::memory_order_release);
}

void SessionState::FreeOrphans() {
  if (!have_orphans.load(std::memory_order_acquire)) return;
  std::vector<DRef> drop;
  std::lock_guard<std::mutex> lock(mu);
  drop.swap(orphans);
  have_orphans.store(false, std::memory_order_release);
}

void SessionState::End(bool gone) {
  phase.store(gone ? kGone : kEnding);
  FreeOrphans();
}

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

}  // namespace

CallScope::CallScope(SessionState* state) : state_(state) {
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

CallScope::~CallScope() {
  if (state_ != nullptr) state_->in_call.store(std::thread::id(), std::memory_order_release);
}

PySession::~PySession() {
  owned.reset();
  state->End(/*gone=*/true);
}

Session& PySession::get(const CallScope&) {
  DISCO_CHECK(session != nullptr, RuntimeError)
      << "this disco.Session has ended (the controller returned or shutdown() was called)";
  return *session;
}

// ---- Ctrl-C -------------------------------------------------------------------------------------

// SIGINT while the controller runs: Python's KeyboardInterrupt when Python code runs (the
// controller then ends the session and every rank exits non-zero). A controller waiting inside the
// runtime never returns to Python, so if the interrupt is not taken within 2 s the process ends
// itself by SIGINT, and the launcher (mpirun, or srun --kill-on-bad-exit) ends the other ranks.
namespace {

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

}  // namespace

SigintWatch::SigintWatch() {
  py::module_ threading = py::module_::import("threading");
  const bool main_thread = threading.attr("current_thread")().is(threading.attr("main_thread")());
  sigaction(SIGINT, nullptr, &old_);
  // An ignored SIGINT (nohup, a background job of a script) stays ignored.
  handled_ = main_thread && old_.sa_handler != SIG_IGN;
  if (handled_) {
    py::module_ signal_module = py::module_::import("signal");
    py::object current = signal_module.attr("getsignal")(SIGINT);
    if (PyCallable_Check(current.ptr())) {
      python_handler_ = current;
      signal_module.attr("signal")(SIGINT, WrapPythonSigintHandler(current));
    }
    struct sigaction sa {};
    sa.sa_handler = OnSigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  g_sigint_at.store(0);
  g_controller_running.store(true);
  monitor_ = std::thread(InterruptMonitor);
}

SigintWatch::~SigintWatch() {
  g_controller_running.store(false);
  monitor_.join();
  if (!handled_) return;
  sigaction(SIGINT, &old_, nullptr);
  if (!python_handler_) return;
  try {
    py::module_::import("signal").attr("signal")(SIGINT, python_handler_);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("disco.main restoring the SIGINT handler");
  }
}

// ---- The controller's exit code -----------------------------------------------------------------

namespace {

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

// The exit code of a controller that raised `e` (SystemExit: its code; Ctrl-C: 130; else 1).
int RaisedCode(py::error_already_set& e) {
  if (!e.matches(PyExc_SystemExit)) {
    const int code = e.matches(PyExc_KeyboardInterrupt) ? 130 : 1;
    e.restore();
    PyErr_Print();
    return code;
  }
  py::object c = e.value().attr("code");
  if (c.is_none()) return 0;
  if (py::isinstance<py::int_>(c)) return c.cast<int>();
  py::print(c, py::arg("file") = py::module_::import("sys").attr("stderr"));
  return 1;
}

}  // namespace

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
    code = RaisedCode(e);
  } catch (const std::exception& e) {
    PrintToStderr(std::string("disco: the controller's result: ") + e.what());
    code = 1;
  }
  g_sigint_at.store(0);
  ps->session = nullptr;
  ps->state->End(/*gone=*/false);  // DRefs dropped from now on wait until the session is gone
  return code;
}

}  // namespace python
}  // namespace disco
