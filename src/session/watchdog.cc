#include "session/watchdog.h"

#include <disco/log.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

namespace disco {
namespace watchdog {
namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe, unlike std::chrono's guarantees
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Record {
  uint64_t seq = 0;
  char action[16] = {0};
  char function[64] = {0};
  int64_t start_ns = 0;
  int64_t duration_ns = -1;  // -1: still running
};

// Only the thread running commands writes the records (no lock: Begin/End sit on every call's
// path); readers on other threads or in signal handlers may see the newest record half-written,
// which a diagnostic dump tolerates (every string keeps its terminating NUL).
struct State {
  Record records[kFlightRecords];
  std::atomic<uint64_t> next{0};  // records written so far
  std::atomic<bool> busy{false};
  std::atomic<int64_t> start_ns{0};
  std::atomic<int> waiting_for{-1};
  std::atomic<bool> dump_requested{false};
  char prefix[96] = {0};
  int rank = 0;
  double timeout_s = 0;
  std::thread thread;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;
  bool started = false;
};
State& S() {
  static State* s = new State();  // never destroyed: signal handlers may read it at exit
  return *s;
}

void CopyTruncated(char* dst, size_t cap, const char* src, size_t len) {
  size_t n = std::min(cap - 1, len);
  std::memcpy(dst, src, n);
  dst[n] = '\0';
}

// Appends the decimal digits of v to buf at *at (async-signal-safe).
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

// SIGTERM (the launcher ending the job): one line saying what this rank was doing, then the
// default action.
void OnTerminate(int sig) {
  State& s = S();
  char line[512];
  size_t at = 0;
  PutStr(line, sizeof line, &at, s.prefix);
  PutStr(line, sizeof line, &at, "terminated by the launcher ");
  const uint64_t next = s.next.load();
  if (next == 0) {
    PutStr(line, sizeof line, &at, "before its first command");
  } else {
    const Record& r = s.records[(next - 1) % kFlightRecords];
    const bool busy = s.busy.load();
    PutStr(line, sizeof line, &at, busy ? "while running command #" : "idle after command #");
    PutInt(line, sizeof line, &at, static_cast<int64_t>(r.seq));
    PutStr(line, sizeof line, &at, " (");
    PutStr(line, sizeof line, &at, r.action);
    if (r.function[0] != '\0') {
      PutStr(line, sizeof line, &at, " '");
      PutStr(line, sizeof line, &at, r.function);
      PutStr(line, sizeof line, &at, "'");
    }
    PutStr(line, sizeof line, &at, ")");
    if (busy) {
      int64_t ms = (NowNs() - s.start_ns.load()) / 1000000;
      PutStr(line, sizeof line, &at, " for ");
      PutInt(line, sizeof line, &at, ms / 1000);
      PutStr(line, sizeof line, &at, ".");
      PutInt(line, sizeof line, &at, (ms % 1000) / 100);
      PutStr(line, sizeof line, &at, " s");
    }
  }
  line[at++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, at);
  (void)ignored;
  signal(sig, SIG_DFL);
  raise(sig);
}

void OnDumpRequest(int) { S().dump_requested.store(true); }

std::string Describe(const Record& r) {
  std::ostringstream os;
  os << "command #" << r.seq << " (" << r.action;
  if (r.function[0] != '\0') os << " '" << r.function << "'";
  os << ")";
  return os.str();
}

void Fire(double elapsed_s) {
  State& s = S();
  const Record current = s.records[(s.next.load() + kFlightRecords - 1) % kFlightRecords];
  std::ostringstream line;
  line << "watchdog: " << Describe(current) << " has run for " << elapsed_s
       << " s, past DISCO_TIMEOUT=" << s.timeout_s << " s";
  int peer = s.waiting_for.load();
  if (peer >= 0) {
    line << "; it waits for rank " << peer << " in a collective"
         << (s.rank == 0 ? ", which never arrived" : "");
  } else if (s.rank == 0) {
    line << "; the ranks that never arrived are not known to this transport (their own lines "
            "say where they are)";
  }
  line << "; ending the job";
  LogLine(LogLevel::kError, line.str());
  Dump("watchdog timeout");
  // Give the other stuck ranks' watchdogs a moment to print their lines before the launcher,
  // seeing this rank exit, terminates them.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::_Exit(1);
}

void Loop() {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.stop_mu);
  while (!s.stop_cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return s.stopping; })) {
    if (s.dump_requested.exchange(false)) Dump("SIGUSR1");
    if (s.timeout_s > 0 && s.busy.load()) {
      double elapsed = (NowNs() - s.start_ns.load()) / 1e9;
      if (elapsed > s.timeout_s) Fire(elapsed);
    }
  }
}

}  // namespace

void Start(int rank, int world_size, double timeout_s) {
  State& s = S();
  if (s.started) return;
  s.started = true;
  s.rank = rank;
  s.timeout_s = timeout_s;
  std::snprintf(s.prefix, sizeof s.prefix, "[rank %d/%d] watchdog: ", rank, world_size);
  struct sigaction old;
  if (sigaction(SIGTERM, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGTERM, OnTerminate);
  }
  if (sigaction(SIGUSR1, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGUSR1, OnDumpRequest);
  }
  s.thread = std::thread(Loop);
}

void Stop() {
  State& s = S();
  if (!s.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(s.stop_mu);
    s.stopping = true;
  }
  s.stop_cv.notify_all();
  s.thread.join();
}

void Begin(uint64_t seq, const char* action, const std::string& function) {
  State& s = S();
  const int64_t now = NowNs();
  const uint64_t next = s.next.load(std::memory_order_relaxed);
  Record& r = s.records[next % kFlightRecords];
  r.seq = seq;
  CopyTruncated(r.action, sizeof r.action, action, std::strlen(action));
  CopyTruncated(r.function, sizeof r.function, function.data(), function.size());
  r.start_ns = now;
  r.duration_ns = -1;
  s.next.store(next + 1, std::memory_order_release);
  s.start_ns.store(now, std::memory_order_relaxed);
  s.busy.store(true, std::memory_order_release);
}

void End() {
  State& s = S();
  s.busy.store(false, std::memory_order_release);
  s.waiting_for.store(-1, std::memory_order_relaxed);
  const uint64_t next = s.next.load(std::memory_order_relaxed);
  if (next == 0) return;
  Record& r = s.records[(next - 1) % kFlightRecords];
  r.duration_ns = NowNs() - r.start_ns;
}

void WaitingFor(int peer) { S().waiting_for.store(peer, std::memory_order_relaxed); }

void Dump(const std::string& why) {
  State& s = S();
  std::ostringstream os;
  const uint64_t next = s.next.load(std::memory_order_acquire);
  const uint64_t n = std::min<uint64_t>(next, kFlightRecords);
  os << "flight recorder (" << why << "): the last " << n << " of " << next
     << " commands this rank ran, oldest first";
  const int64_t now = NowNs();
  for (uint64_t i = next - n; i < next; ++i) {
    const Record& r = s.records[i % kFlightRecords];
    os << "\n  " << Describe(r) << ": ";
    if (r.duration_ns < 0) {
      os << "running for " << (now - r.start_ns) / 1e6 << " ms";
    } else {
      os << r.duration_ns / 1e6 << " ms";
    }
  }
  LogLine(LogLevel::kError, os.str());
}

}  // namespace watchdog
}  // namespace disco
