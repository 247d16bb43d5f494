#include "session/watchdog.h"

#include <disco/log.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>

#include "core/exit_cleanup.h"
#include "core/text.h"
#include "core/wait_record.h"
#include "session/controller_probe.h"
#include "session/flight_recorder.h"
#include "session/hang_gather.h"
#include "session/liveness_server.h"
#include "session/signals.h"

namespace disco {
namespace watchdog {
namespace {

using recorder::NowNs;

// The watchdog's thread; the flight recorder, the signals, the liveness server and the controller
// probe keep their own state (their files).
struct State {
  int rank = 0;
  double timeout_s = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  int wake_fd = -1;  // an eventfd: Stop wakes the thread from its poll
  bool started = false;
  int64_t last_check_ns = 0;
};
State& S() {
  // Never destroyed: a std::thread still joinable when destroyed at exit ends the process.
  static State* s = new State();
  return *s;
}

// What the running command waits for: " ; it waits for rank 2 in a collective" and the like.
void DescribeWait(std::ostringstream& line, int rank) {
  int peer = wait_record::Peer();
  if (peer >= 0) {
    line << "; it waits for rank " << peer << " in a collective"
         << (rank == 0 ? ", which never arrived" : "");
  } else if (!recorder::MarkedCollective() && wait_record::Collective() == nullptr) {
    line << "; it is not a collective: the function itself is still running on this rank (no "
            "other rank holds it up)";
  } else if (rank == 0) {
    line << "; the ranks that never arrived are not known to this transport (their own lines "
            "say where they are)";
  }
}

// Rank 0 gathers every rank's state (which also finds the ranks that answer nothing) before its
// line; returns whether some rank answered nothing.
bool GatherOnRankZero(std::ostringstream& line, std::vector<hang::RankView>* views) {
  *views = Gather();
  std::vector<bool> alive(views->size(), true);
  for (size_t r = 0; r < views->size(); ++r) alive[r] = (*views)[r].answered;
  int count = 0;
  const std::vector<PingAddress>& known = server::Known();
  const std::string names =
      known.size() == views->size() ? server::Name(known, alive, nullptr, &count) : std::string();
  const bool silent = count > 0;
  if (silent)
    line << "; " << names
         << " answered no state request within 1.5 s: dead, or their "
            "node is off the network";
  return silent;
}

[[noreturn]] void Fire(double elapsed_s) {
  exit_cleanup::RemoveRegisteredFiles();  // no destructor runs from here on
  State& s = S();
  const CommandRecord current = recorder::Last();
  std::ostringstream line;
  line << "watchdog: " << recorder::Describe(current);
  if (const char* step = recorder::StepLabel()) line << " at " << text::ForLogLine(step);
  line << " has run for " << elapsed_s << " s, past DISCO_TIMEOUT=" << s.timeout_s << " s";
  DescribeWait(line, s.rank);
  // Rank 0 gathers every rank's state (which also finds the ranks that answer nothing) before
  // its line, and prints the verdict after it; a worker pings every rank.
  std::vector<hang::RankView> views;
  bool silent = false;
  if (s.rank == 0) silent = GatherOnRankZero(line, &views);
  std::vector<bool> alive;
  if (s.rank != 0) {
    const std::string silent_line = server::SilentRanks(&alive);
    if (!silent_line.empty()) line << "; " << silent_line;
  }
  line << "; ending the job";
  LogLine(LogLevel::kError, line.str());
  if (s.rank == 0) LogLine(LogLevel::kError, "watchdog: " + hang::Verdict(views));
  probe::DumpInterpreterStacks();
  Dump("watchdog timeout");
  if (s.rank != 0) {
    if (alive.empty() || alive[0]) {
      AwaitRankZeroVerdict();  // ends the job itself when rank 0 does not
    } else {
      silent = WorkerVerdict(s.timeout_s);  // rank 0 answers nothing: no waiting for it
    }
  }
  // Give the other stuck ranks' watchdogs a moment to print their lines before the launcher,
  // seeing this rank exit, terminates them (srun without --kill-on-bad-exit would not: the step
  // is cancelled).
  EndJob(silent);
}

// Asleep until a datagram comes, Stop wakes it, or 50 ms pass.
void Wait() {
  State& s = S();
  pollfd fds[2];
  nfds_t n = 0;
  if (s.wake_fd >= 0) fds[n++] = pollfd{s.wake_fd, POLLIN, 0};
  if (server::Fd() >= 0) fds[n++] = pollfd{server::Fd(), POLLIN, 0};
  if (n > 0) {
    poll(fds, n, 50);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Loop() {
  State& s = S();
  while (!s.stopping.load()) {
    Wait();
    if (s.stopping.load()) break;
    const bool peers_ready = server::PeersReady();
    server::ServePings();
    if (TakeDumpRequest()) Dump("SIGUSR1");
    if (s.timeout_s <= 0) continue;
    const int64_t now = NowNs();
    server::WarnAboutDrops(now);
    if (recorder::Busy()) {
      double elapsed = (now - recorder::BusySinceNs()) / 1e9;
      if (elapsed > s.timeout_s) Fire(elapsed);
    }
    if (server::FiredBy() >= 0 && !server::ShuttingDownNow()) {
      FireOnNotice(server::FiredBy(), s.timeout_s);
    }
    probe::Step();
    // Liveness: once at start (who answers pings at all), then every check period while the job
    // runs (idle workers, a controller in SyncAll: nothing waits on a dead rank in a command).
    const double period_s = server::CheckPeriod(s.timeout_s);
    if (server::ShuttingDownNow() || !peers_ready) continue;
    if (s.last_check_ns == 0 || now - s.last_check_ns > static_cast<int64_t>(period_s * 1e9)) {
      s.last_check_ns = now;
      server::CheckLiveness();
    }
  }
}

}  // namespace

void Start(int rank, int world_size, double timeout_s, const liveness::JobSecret& secret,
           const std::vector<PingAddress>& hosts) {
  State& s = S();
  if (s.started) return;
  s.started = true;
  s.stopping = false;
  s.rank = rank;
  s.timeout_s = timeout_s;
  s.last_check_ns = 0;
  server::Reset(rank, world_size, timeout_s);
#if DISCO_SIMULATED
  // Under SimGrid's SMPI every rank is a simulated actor of one process: a thread of our own would
  // not be one (its clock reads and sleeps crash the simulator), and a simulated job cannot hang on
  // a real rank anyway. The flight recorder still records every command.
  if (timeout_s > 0 && rank == 0) {
    DISCO_LOG(WARN) << "DISCO_TIMEOUT=" << timeout_s
                    << " is ignored: this disco is built for SimGrid SMPI, which has no watchdog";
  }
  (void)secret;
  (void)hosts;
  return;
#endif
  InstallSignals(rank, world_size);
  probe::Start(timeout_s);
  server::Open(secret, hosts);
  if (s.wake_fd >= 0) close(s.wake_fd);
  s.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  s.thread = std::thread(Loop);
}

void Stop() {
  State& s = S();
  if (s.thread.joinable()) {
    s.stopping.store(true);
    if (s.wake_fd >= 0) {
      uint64_t one = 1;
      ssize_t ignored = write(s.wake_fd, &one, sizeof one);
      (void)ignored;
    }
    s.thread.join();
    s.started = false;
  }
  // After the thread, whose probe reads the probe's signal and sends it (once its handler is
  // gone, the signal's default action would end the process).
  StopSignals();
  probe::Stop();
}

}  // namespace watchdog
}  // namespace disco
