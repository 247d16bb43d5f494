// disco.main from Python: MPI start-up, Python stacks in the watchdog's lines, the controller's
// run (session_state.cc: Ctrl-C, exit codes); and _abort_job, which ends the whole MPI job.
#include <disco/disco.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <signal.h>

#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "module.h"
#include "session/watchdog.h"

namespace disco {
namespace python {
namespace {

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

// The dump, registered for disco.main's run unless the program uses the signal itself.
class StackDumps {
 public:
  StackDumps() {
    struct sigaction current {};
    if (sigaction(StackDumpSignal(), nullptr, &current) != 0 || current.sa_handler != SIG_DFL) {
      return;
    }
    py::module_::import("faulthandler")
        .attr("register")(StackDumpSignal(), py::arg("file") = 2, py::arg("all_threads") = true,
                          py::arg("chain") = false);
    watchdog::SetStackDumper(&DumpPythonStacks);
    started_ = true;
  }
  StackDumps(const StackDumps&) = delete;
  StackDumps& operator=(const StackDumps&) = delete;
  ~StackDumps() {
    if (!started_) return;
    watchdog::SetStackDumper(nullptr);
    try {
      py::module_::import("faulthandler").attr("unregister")(StackDumpSignal());
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("disco.main unregistering its stack dumps");
    }
  }

 private:
  bool started_ = false;
};

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
  ControllerOutcome outcome;
  std::weak_ptr<SessionState> state;
  int code;
  {
    SigintWatch sigint;
    StackDumps stack_dumps;
    py::gil_scoped_release release;
    code = disco::Main(argc, argvp,
                       [&](Session& s) { return RunController(controller, s, &outcome, &state); });
  }
  if (std::shared_ptr<SessionState> st = state.lock()) st->End(/*gone=*/true);
  const bool exit_now = outcome.ran && (!outcome.returned || code != outcome.code);
  return py::make_tuple(code, exit_now);
}

// Ends the whole MPI job from any rank (python3 -m disco: an exception no code caught): as the
// C++ runtime's fatal path does, MPI_Abort when MPI runs. Before MPI has started, the process
// ends by SIGTERM: every launcher ends a job whose rank dies of a signal, while MPICH's hydra
// lets the others wait in MPI_Init for a rank that merely exited non-zero.
void AbortJob(int code) {
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
}

}  // namespace

void BindMain(py::module_& m) {
  m.def("main", &Main, py::arg("controller"), py::arg("argv"),
        "disco.main's work: runs the job with `argv`; returns (exit code, whether rank 0 must "
        "exit with it now).");
  m.def("_abort_job", &AbortJob, py::arg("code"),
        "Ends the MPI job: MPI_Abort with `code`, or before MPI has started this process by "
        "SIGTERM (which makes the launcher end the job).");
}

}  // namespace python
}  // namespace disco
