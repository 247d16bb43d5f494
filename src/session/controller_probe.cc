#include "session/controller_probe.h"

#include <disco/log.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/launcher.h"
#include "session/flight_recorder.h"
#include "session/hang_gather.h"
#include "session/watchdog.h"

namespace disco {
namespace watchdog {
namespace {

struct Probe {
  std::atomic<bool> running{false};
  std::atomic<uint64_t> runs{0};  // controllers started so far (a new one starts quiet)
  uint64_t runs_seen = 0;
  pthread_t thread{};
  int signal = 0;  // 0: no probe in this job
  double timeout_s = 0;
  void* frames[64] = {nullptr};
  std::atomic<int> depth{-1};  // frames recorded by the last sample; -1: none yet
  uint64_t commands_seen = 0;
  int64_t quiet_since_ns = 0;  // since when rank 0 has run no command
  int64_t last_sample_ns = 0;
  std::string stuck_in;  // the foreign MPI call of the previous samples, if any
  int64_t stuck_since_ns = 0;
  std::atomic<void (*)()> dump_stacks{nullptr};
};
Probe& P() {
  static Probe* p = new Probe();  // never destroyed: signal handlers may read it at exit
  return *p;
}

// The probe's signal handler (no allocation, no lock): records the interrupted thread's stack.
namespace signal_safe {
void OnProbe(int) {
  const int saved = errno;
  Probe& p = P();
  // Acquires SampleStack's request: the watchdog's reads of the last sample come before this one.
  if (p.depth.load(std::memory_order_acquire) >= 0) return;  // not asked for (a stray signal)
  p.depth.store(backtrace(p.frames, 64), std::memory_order_release);
  errno = saved;
}
}  // namespace signal_safe
using signal_safe::OnProbe;

// Whether an MPI entry point can wait for other processes: not one that starts an operation
// (MPI_Isend, MPI_Iallreduce), tests or probes one (MPI_Test, MPI_Iprobe) or reads the clock or
// the communicator; a controller that polls them in a loop is computing, not blocked.
bool MayBlock(const std::string& call) {
  for (const char* quick : {"MPI_I", "MPI_Test", "MPI_Wtime", "MPI_Wtick", "MPI_Comm_rank",
                            "MPI_Comm_size", "MPI_Request_get_status", "MPI_Get_"}) {
    if (call.rfind(quick, 0) == 0) return false;
  }
  return true;
}

bool IsMpiEntry(const Dl_info& info) {
  if (info.dli_sname == nullptr) return false;
  const std::string name = info.dli_sname;
  return name.rfind("MPI_", 0) == 0 || name.rfind("PMPI_", 0) == 0;
}

[[noreturn]] void FireControllerBlocked(const std::string& call, const std::string& caller,
                                        double quiet_s) {
  std::ostringstream line;
  line << "watchdog: the controller (rank 0) has been inside " << call
       << ", called from outside disco (" << caller << "), with no disco command for " << quiet_s
       << " s, past DISCO_TIMEOUT=" << P().timeout_s
       << " s: the workers wait in disco's command loop and cannot join an MPI call of the "
          "controller's own; ending the job";
  LogLine(LogLevel::kError, line.str());
  PrintVerdict();
  probe::DumpInterpreterStacks();
  Dump("controller blocked in " + call);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // for the launcher to forward the lines
  EndSlurmStep();
  std::_Exit(1);
}

}  // namespace

namespace probe {

void DumpInterpreterStacks() {
  if (void (*dump)() = P().dump_stacks.load()) dump();
}

bool ControllerRunning() { return P().running.load(); }

void* const* Frames() { return P().frames; }

std::string ForeignMpiCall(void* const* frames, int depth, std::string* caller, bool* in_mpi) {
  Dl_info disco_lib{};
  if (in_mpi != nullptr) *in_mpi = false;
  if (dladdr(reinterpret_cast<void*>(&watchdog::Start), &disco_lib) == 0) return "";
  // Return addresses point just past their call: look one byte back to stay inside it.
  auto at = [&](int i, Dl_info* info) {
    return dladdr(static_cast<char*>(frames[i]) - (i > 0 ? 1 : 0), info) != 0;
  };
  for (int i = 0; i < depth; ++i) {
    Dl_info entry{};
    if (!at(i, &entry) || !IsMpiEntry(entry)) continue;
    if (in_mpi != nullptr) *in_mpi = true;
    std::string name = entry.dli_sname;
    for (int j = i + 1; j < depth; ++j) {
      Dl_info up{};
      if (!at(j, &up)) return "";             // an unknown caller: no verdict
      if (up.dli_fbase == entry.dli_fbase) {  // still inside the MPI library: the outermost entry
        if (IsMpiEntry(up)) name = up.dli_sname;
        continue;
      }
      if (up.dli_fbase == disco_lib.dli_fbase) return "";  // disco's own call
      const char* path = up.dli_fname != nullptr ? up.dli_fname : "";
      const char* base = std::strrchr(path, '/') != nullptr ? std::strrchr(path, '/') + 1 : path;
      if (std::strncmp(base, "libhdf5", 7) == 0) return "";  // disco's HDF5 I/O (MPI-IO)
      const std::string call = name[0] == 'P' ? name.substr(1) : name;
      if (!MayBlock(call)) return "";  // a loop that polls (MPI_Iprobe, MPI_Test) computes
      *caller = up.dli_fname != nullptr ? up.dli_fname : "an unknown library";
      return call;
    }
    return "";
  }
  return "";
}

int SampleStack() {
  Probe& p = P();
  if (p.signal == 0) return -1;
  p.depth.store(-1, std::memory_order_release);  // the request, after the last sample's reads
  if (pthread_kill(p.thread, p.signal) != 0) return -1;
  int depth = -1;
  for (int i = 0; i < 200 && (depth = p.depth.load(std::memory_order_acquire)) < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return depth;
}

void Step() {
  Probe& p = P();
  if (p.signal == 0) return;
  const int64_t now = recorder::NowNs();
  const uint64_t commands = recorder::Count();
  const uint64_t runs = p.runs.load();
  if (!p.running.load() || recorder::Busy() || commands != p.commands_seen || runs != p.runs_seen) {
    p.commands_seen = commands;
    p.runs_seen = runs;
    p.quiet_since_ns = now;
    p.stuck_in.clear();
    return;
  }
  const int64_t timeout_ns = static_cast<int64_t>(p.timeout_s * 1e9);
  const int64_t quiet_ns = now - p.quiet_since_ns;
  if (quiet_ns < timeout_ns / 2 || now - p.last_sample_ns < 1000000000) return;
  p.last_sample_ns = now;
  const int depth = SampleStack();
  if (depth < 0) return;  // the thread did not answer (the signal blocked): no verdict
  std::string caller;
  const std::string call = ForeignMpiCall(p.frames, depth, &caller);
  if (call.empty() || call != p.stuck_in) {
    p.stuck_in = call;
    p.stuck_since_ns = now;
    return;
  }
  const int64_t stuck_ns = now - p.stuck_since_ns;
  if (quiet_ns >= timeout_ns && stuck_ns >= std::max<int64_t>(timeout_ns / 2, 1000000000)) {
    FireControllerBlocked(call, caller, quiet_ns / 1e9);
  }
}

void Start(double timeout_s) {
  Probe& p = P();
  p.signal = 0;
  p.timeout_s = timeout_s;
  p.thread = pthread_self();  // the thread that runs the command loop (and rank 0's controller)
  if (timeout_s <= 0) return;
  void* warm[2];
  backtrace(warm, 2);  // loads the unwinder now, not first inside a signal handler
  const int sig = SIGRTMAX - 1;
  struct sigaction old {};
  if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction sa {};
  sa.sa_handler = OnProbe;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, nullptr) == 0) p.signal = sig;
}

void Stop() {
  Probe& p = P();
  struct sigaction old {};
  if (p.signal != 0 && sigaction(p.signal, nullptr, &old) == 0 && old.sa_handler == OnProbe) {
    signal(p.signal, SIG_DFL);
  }
  p.signal = 0;
}

}  // namespace probe

void ControllerRunning(bool running) {
  Probe& p = P();
  if (running) {
    p.thread = pthread_self();
    p.runs.fetch_add(1);
  }
  p.running.store(running);
}

void SetStackDumper(void (*dump)()) { P().dump_stacks.store(dump); }

}  // namespace watchdog
}  // namespace disco
