#include "session/flight_recorder.h"

#include <disco/config.h>
#include <disco/log.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>

#include "core/text.h"
#include "core/trace.h"
#include "core/wait_record.h"
#include "mpi/clock.h"
#include "session/watchdog.h"

namespace disco {
namespace watchdog {
namespace {

// Only the thread running commands writes the records (no lock: Begin/End sit on every call's
// path); readers on other threads or in signal handlers copy one out (FlightRecord::Read), which
// says when it was being written as they read it.
struct Recorder {
  FlightRecord records[kFlightRecords];
  std::atomic<uint64_t> next{0};  // records written so far
  std::atomic<bool> busy{false};
  std::atomic<const char*> step_label{nullptr};  // the call a replay is at (Step)
  std::atomic<bool> collective{false};           // the running function talks to other ranks
  std::atomic<int64_t> start_ns{0};
  std::atomic<bool> fine_clock{false};  // NowNs at full resolution (UseFineClock)
};
Recorder& R() {
  static Recorder* r = new Recorder();  // never destroyed: signal handlers may read it at exit
  return *r;
}

}  // namespace

namespace recorder {

// The readers signal handlers run (signal-safe: lock-free loads, no allocation).

// Two reads of this clock sit on every command's path (Begin, End). CLOCK_MONOTONIC costs 20-30 ns
// a read on a VM (here, through the vDSO, against 3 ns for the coarse clock): a tenth of a
// pipelined no-op call on each rank. Without a trace, the records serve a hang's report, which
// prints milliseconds of commands that ran seconds: the coarse clock (a kernel tick, 1-4 ms, never
// ahead of the fine one) does. A trace's events need the fine clock: the job picks once, as it
// starts (UseFineClock), so that a trace stopped by a fatal error does not mix the two.
void UseFineClock(bool fine) { R().fine_clock.store(fine); }

int64_t NowNs() {
#if !DISCO_SIMULATED
  if (!R().fine_clock.load(std::memory_order_relaxed)) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
#endif
  return mpi::NowNs();
}

uint64_t Count() { return R().next.load(); }
bool Busy() { return R().busy.load(); }
int64_t BusySinceNs() { return R().start_ns.load(); }
CommandRecord Last() {
  Recorder& r = R();
  return r.records[(r.next.load() + kFlightRecords - 1) % kFlightRecords].Read();
}
const char* StepLabel() { return R().step_label.load(std::memory_order_relaxed); }
bool MarkedCollective() { return R().collective.load(std::memory_order_relaxed); }

// The rest allocates.

std::string Describe(const CommandRecord& r) {
  std::ostringstream os;
  // A function's name may hold a newline or a terminal's escape codes: one line stays one line
  // (text::ForLogLine), and a quote in it cannot close the quoted name.
  os << "command #" << r.seq << " (" << text::ForLogLine(r.action);
  if (r.function[0] != '\0') os << " " << text::Quoted(r.function);
  os << (r.torn ? ", being recorded)" : ")");
  return os.str();
}

}  // namespace recorder

void Begin(uint64_t seq, const char* action, const std::string& function) {
  Recorder& s = R();
  const int64_t now = recorder::NowNs();
  const uint64_t next = s.next.load(std::memory_order_relaxed);
  s.records[next % kFlightRecords].Write(seq, action, std::strlen(action), function.data(),
                                         function.size(), now);
  s.next.store(next + 1, std::memory_order_release);
  s.start_ns.store(now, std::memory_order_relaxed);
  s.collective.store(false, std::memory_order_relaxed);
  s.step_label.store(nullptr, std::memory_order_relaxed);
  s.busy.store(true, std::memory_order_release);
}

void Step(int64_t index, const char* label) {
  (void)index;
  R().step_label.store(label, std::memory_order_relaxed);
}

void MarkCollective() { R().collective.store(true, std::memory_order_relaxed); }

void End() {
  Recorder& s = R();
  s.busy.store(false, std::memory_order_release);
  wait_record::Clear();
  const uint64_t next = s.next.load(std::memory_order_relaxed);
  if (next == 0) return;
  FlightRecord& slot = s.records[(next - 1) % kFlightRecords];
  const int64_t now = recorder::NowNs();
  slot.SetDuration(now - slot.start_ns());
  if (trace::Enabled()) {  // named after the function, or the command when it runs none
    const CommandRecord r = slot.Read();
    const char* name = r.function[0] != '\0' ? r.function : r.action;
    trace::Record(trace::Kind::kRun, name, std::strlen(name), r.start_ns, now,
                  static_cast<int64_t>(r.seq));
  }
}

void Dump(const std::string& why) {
  Recorder& s = R();
  // A job that ends here leaves this rank's timeline (DISCO_TRACE) in a file of its own, with the
  // command it was running; a SIGUSR1 dump of a running job does not.
  if (why != "SIGUSR1" && trace::Enabled()) {
    const uint64_t last = s.next.load(std::memory_order_acquire);
    if (last > 0 && s.busy.load(std::memory_order_acquire)) {
      const CommandRecord r = s.records[(last - 1) % kFlightRecords].Read();
      const std::string name = std::string(r.function) + " (running)";  // why: in the file
      trace::Record(trace::Kind::kRun, name, r.start_ns, recorder::NowNs(),
                    static_cast<int64_t>(r.seq));
    }
    trace::WriteRankFile(why.c_str());
  }
  std::ostringstream os;
  const uint64_t next = s.next.load(std::memory_order_acquire);
  const uint64_t n = std::min<uint64_t>(next, kFlightRecords);
  os << "flight recorder (" << why << "): the last " << n << " of " << next
     << " commands this rank ran, oldest first";
  const int64_t now = recorder::NowNs();
  for (uint64_t i = next - n; i < next; ++i) {
    const CommandRecord r = s.records[i % kFlightRecords].Read();
    os << "\n  " << recorder::Describe(r) << ": ";
    if (r.duration_ns < 0) {
      const char* step = s.step_label.load(std::memory_order_relaxed);
      if (i + 1 == next && step != nullptr) {
        os << "at " << text::ForLogLine(step) << ", ";  // a replay's
      }
      os << "running for " << (now - r.start_ns) / 1e6 << " ms";
    } else {
      os << r.duration_ns / 1e6 << " ms";
    }
  }
  LogLine(LogLevel::kError, os.str());
}

}  // namespace watchdog
}  // namespace disco
