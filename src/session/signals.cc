#include "session/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "core/exit_cleanup.h"
#include "core/text.h"
#include "core/trace.h"
#include "session/flight_recorder.h"

namespace disco {
namespace watchdog {
namespace {

// Everything here runs in signal handlers, or is written only while they are not installed: no
// allocation, no lock.
namespace signal_safe {

char g_prefix[96] = {0};  // "[rank 1/4] watchdog: "; written by InstallSignals
std::atomic<bool> g_dump_requested{false};

// Appends the decimal digits of v to buf at *at.
void PutInt(char* buf, size_t cap, size_t* at, int64_t v) {
  char digits[24];
  int n = 0;
  if (v < 0) v = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && n < 24);
  while (n > 0 && *at + 1 < cap) buf[(*at)++] = digits[--n];
}
void PutStr(char* buf, size_t cap, size_t* at, const char* s) {
  while (*s != '\0' && *at + 1 < cap) buf[(*at)++] = *s++;
}
// PutStr with every byte that is not printable ASCII as '?' (names from the program).
void PutPrintable(char* buf, size_t cap, size_t* at, const char* s) {
  for (; *s != '\0' && *at + 1 < cap; ++s) buf[(*at)++] = text::SignalSafePrintable(*s);
}

// What the rank was doing: "while running command #7 (call_packed 'f') for 3.2 s".
void PutActivity(char* line, size_t cap, size_t* at) {
  const uint64_t next = recorder::Count();
  if (next == 0) {
    PutStr(line, cap, at, "before its first command");
    return;
  }
  const CommandRecord r = recorder::Last();
  const bool busy = recorder::Busy();
  PutStr(line, cap, at, busy ? "while running command #" : "idle after command #");
  PutInt(line, cap, at, static_cast<int64_t>(r.seq));
  PutStr(line, cap, at, " (");
  PutPrintable(line, cap, at, r.action);
  if (r.function[0] != '\0') {
    PutStr(line, cap, at, " '");
    PutPrintable(line, cap, at, r.function);
    PutStr(line, cap, at, "'");
  }
  PutStr(line, cap, at, r.torn ? ", being recorded)" : ")");
  if (busy) {
    int64_t ms = (recorder::NowNs() - recorder::BusySinceNs()) / 1000000;
    PutStr(line, cap, at, " for ");
    PutInt(line, cap, at, ms / 1000);
    PutStr(line, cap, at, ".");
    PutInt(line, cap, at, (ms % 1000) / 100);
    PutStr(line, cap, at, " s");
  }
}

// The timeline (DISCO_TRACE) of a rank the launcher ends: its own file, with the command it was
// running (both async-signal-safe).
void WriteTrace(int sig) {
  if (!trace::Enabled()) return;
  if (recorder::Count() > 0 && recorder::Busy()) {
    const CommandRecord r = recorder::Last();
    char name[trace::kNameBytes];
    size_t n = 0;
    PutStr(name, sizeof name, &n, r.function);
    PutStr(name, sizeof name, &n, " (running)");
    trace::Record(trace::Kind::kRun, name, n, r.start_ns, recorder::NowNs(),
                  static_cast<int64_t>(r.seq));
  }
  trace::WriteRankFile(sig == SIGINT ? "interrupted (SIGINT)" : "terminated by the launcher");
}

// SIGTERM (the launcher ending the job) or SIGINT: the registered files go (a served job's key
// file), one line says what this rank was doing, then the default action.
void OnTerminate(int sig) {
  exit_cleanup::RemoveRegisteredFiles();
  char line[512];
  size_t at = 0;
  PutStr(line, sizeof line, &at, g_prefix);
  PutStr(line, sizeof line, &at,
         sig == SIGINT ? "interrupted (SIGINT) " : "terminated by the launcher ");
  PutActivity(line, sizeof line, &at);
  line[at++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, at);
  (void)ignored;
  WriteTrace(sig);
  signal(sig, SIG_DFL);
  raise(sig);
}

// SIGUSR1: the action that was there before ours (MPICH's MPI_Init installs one; so may the
// program), which ours passes the signal on to, and gives back when the job ends. Written only
// while ours is not installed.
struct sigaction g_previous_usr1 {};

void OnDumpRequest(int sig, siginfo_t* info, void* context) {
  g_dump_requested.store(true);
  const struct sigaction& prev = g_previous_usr1;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
             prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
}

}  // namespace signal_safe

using signal_safe::g_previous_usr1;
using signal_safe::OnDumpRequest;
using signal_safe::OnTerminate;

bool IsOurDumpHandler(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) != 0 && action.sa_sigaction == OnDumpRequest;
}

}  // namespace

void InstallSignals(int rank, int world_size) {
  std::snprintf(signal_safe::g_prefix, sizeof signal_safe::g_prefix,
                "[rank %d/%d] watchdog: ", rank, world_size);
  struct sigaction old;
  for (int sig : {SIGTERM, SIGINT}) {  // unless the program handles them itself (Python: SIGINT)
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(sig, OnTerminate);
  }
  InstallDumpHandler();
}

void InstallDumpHandler() {
  struct sigaction old {};
  if (sigaction(SIGUSR1, nullptr, &old) != 0 || IsOurDumpHandler(old)) return;
  g_previous_usr1 = old;
  struct sigaction sa {};
  sa.sa_sigaction = OnDumpRequest;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
}

bool TakeDumpRequest() { return signal_safe::g_dump_requested.exchange(false); }

void StopSignals() {
  auto restore = [](int sig, void (*mine)(int)) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == mine) signal(sig, SIG_DFL);
  };
  restore(SIGTERM, OnTerminate);
  restore(SIGINT, OnTerminate);
  struct sigaction usr1 {};
  if (sigaction(SIGUSR1, nullptr, &usr1) == 0 && IsOurDumpHandler(usr1)) {
    sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  }
}

}  // namespace watchdog
}  // namespace disco
