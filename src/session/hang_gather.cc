#include "session/hang_gather.h"

#include <disco/log.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/exit_cleanup.h"
#include "core/launcher.h"
#include "core/wait_record.h"
#include "session/controller_probe.h"
#include "session/flight_recorder.h"
#include "session/liveness_server.h"
#include "session/watchdog.h"

namespace disco {
namespace watchdog {
namespace {

using recorder::NowNs;

void CopyTruncated(char* dst, size_t cap, const char* src, size_t len) {
  size_t n = std::min(cap - 1, len);
  std::memcpy(dst, src, n);
  dst[n] = '\0';
}

// Copies `src` into a state's field; a text cut short ends in "..." (a name cut silently could
// pass for another function's).
void CopyField(char* dst, size_t cap, const std::string& src) {
  CopyTruncated(dst, cap, src.data(), src.size());
  if (src.size() > cap - 1 && cap > 4) std::memcpy(dst + cap - 4, "...", 3);
}

// The command this rank ran last, or runs.
void PutCommand(liveness::RankState* st, bool busy, int64_t now) {
  const CommandRecord r = recorder::Last();
  st->seq = r.seq;
  st->flags |= liveness::RankState::kRanCommand;
  CopyField(st->action, sizeof st->action, r.action);
  const char* step = busy ? recorder::StepLabel() : nullptr;
  CopyField(st->function, sizeof st->function, step != nullptr ? step : r.function);
  const int64_t since =
      busy ? recorder::BusySinceNs() : r.start_ns + std::max<int64_t>(0, r.duration_ns);
  st->elapsed_ms = static_cast<uint64_t>(std::max<int64_t>(0, now - since) / 1000000);
}

// Where this rank's command thread is in MPI (a stack sample).
void PutStack(liveness::RankState* st) {
  const int depth = probe::SampleStack();
  if (depth <= 0) return;
  std::string caller;
  bool in_mpi = false;
  const std::string call = probe::ForeignMpiCall(probe::Frames(), depth, &caller, &in_mpi);
  if (in_mpi) st->flags |= liveness::RankState::kInMpi;
  if (!call.empty()) {
    const size_t slash = caller.rfind('/');
    CopyField(st->foreign_call, sizeof st->foreign_call, call);
    CopyField(st->foreign_caller, sizeof st->foreign_caller,
              slash == std::string::npos ? caller : caller.substr(slash + 1));
  }
}

bool AnySilent(const std::vector<hang::RankView>& views) {
  return std::any_of(views.begin(), views.end(),
                     [](const hang::RankView& v) { return !v.answered; });
}

// Serves state requests and pings for `ms` milliseconds (another rank is gathering).
void ServeFor(int64_t ms) {
  const int64_t end = NowNs() + ms * 1000000;
  for (int64_t now = NowNs(); now < end; now = NowNs()) {
    pollfd p{server::Fd(), POLLIN, 0};
    poll(&p, 1,
         static_cast<int>(std::min<int64_t>(50, std::max<int64_t>(1, (end - now) / 1000000))));
    server::ServePings();
  }
}

}  // namespace

liveness::RankState OwnState() {
  liveness::RankState st;
  const int64_t now = NowNs();
  const uint64_t next = recorder::Count();
  const bool busy = recorder::Busy();
  if (next > 0) PutCommand(&st, busy, now);
  if (busy) {
    st.flags |= liveness::RankState::kBusy;
    if (recorder::MarkedCollective()) st.flags |= liveness::RankState::kCollective;
    st.peer = wait_record::Peer();
    if (const char* op = wait_record::Collective()) {
      st.flags |= liveness::RankState::kInCollective;
      CopyField(st.activity, sizeof st.activity, std::string("in ") + op);
    }
  }
  char activity[wait_record::kActivityBytes];
  wait_record::Activity(activity, sizeof activity);
  if (activity[0] != '\0') CopyField(st.activity, sizeof st.activity, activity);
  if (server::Rank() == 0 && probe::ControllerRunning()) {
    st.flags |= liveness::RankState::kController;
  }
  PutStack(&st);
  return st;
}

// Every rank's state, for the hang verdict: this rank's own, and each other's as it answers a
// state request (sent again every 200 ms to those that have not) within 1.5 s. A rank that
// answers nothing is reported so (dead, stopped, off the network, or UDP filtered).
std::vector<hang::RankView> Gather() {
  const int rank = server::Rank();
  const int world = server::WorldSize();
  std::vector<hang::RankView> views(static_cast<size_t>(std::max(world, 1)));
  views[rank].answered = true;
  views[rank].host = server::Self().host;
  views[rank].state = OwnState();
  if (server::Fd() < 0 || !server::PeersReady() ||
      static_cast<int>(server::Known().size()) != world) {
    return views;
  }
  server::BeginStateRound();
  const int64_t start = NowNs();
  const int64_t deadline = start + 1500000000;
  int64_t next_send = start;
  auto all_in = [&] {
    for (int r = 0; r < world; ++r) {
      if (r != rank && !server::GotState(r)) return false;
    }
    return true;
  };
  for (;;) {
    const int64_t now = NowNs();
    if (now >= next_send) {
      for (int r = 0; r < world; ++r) {
        if (r != rank && !server::GotState(r) && server::Known()[r].port != 0) {
          server::SendTo(r, liveness::kStateRequest, now);
        }
      }
      next_send = now + 200000000;
    }
    if (all_in() || now >= deadline) break;
    pollfd p{server::Fd(), POLLIN, 0};
    const int64_t wake = std::min(next_send, deadline);
    poll(&p, 1, static_cast<int>(std::max<int64_t>(1, (wake - now) / 1000000)));
    server::ServePings();
  }
  for (int r = 0; r < world; ++r) {
    views[r].host = server::Known()[r].host;
    if (r == rank) continue;
    views[r].answered = server::GotState(r);
    views[r].state = server::StateOf(r);
  }
  server::EndStateRound();
  return views;
}

// Gathers every rank's state and prints the hang verdict: one line naming the rank(s) that hold
// the others up and why (session/hang.h). Returns whether some rank answered nothing.
bool PrintVerdict() {
  std::vector<hang::RankView> views = Gather();
  LogLine(LogLevel::kError, "watchdog: " + hang::Verdict(views));
  return AnySilent(views);
}

// The end of a job whose watchdog fired: the Slurm step, and this node's launcher too when a rank
// answered nothing (a launcher may wait for good for a rank that stopped or lost its node, or be
// told to keep a job whose rank died), after a moment for the launcher to forward the lines.
void EndJob(bool silent_ranks) {
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EndSlurmStep();
  if (silent_ranks) EndLocalLauncher();
  std::_Exit(1);
}

// A worker whose watchdog fired tells rank 0, which gathers every rank's state, prints the hang
// verdict and ends the job (and with it this rank); this rank answers state requests meanwhile.
// When the job is still there 4 s later (rank 0 silent, or stuck without its watchdog), this rank
// prints the verdict itself.
void AwaitRankZeroVerdict() {
  if (server::Fd() < 0 || !server::PeersReady() || server::Known().size() < 2) return;
  const int64_t start = NowNs();
  int64_t next_send = start;
  for (int sent = 0;;) {
    const int64_t now = NowNs();
    if (now - start >= 4 * int64_t{1000000000}) break;
    if (sent < 3 && now >= next_send) {  // three times, 100 ms apart: a datagram may be lost
      server::SendTo(0, liveness::kFired, now);
      ++sent;
      next_send = now + 100000000;
    }
    pollfd p{server::Fd(), POLLIN, 0};
    poll(&p, 1, 50);
    server::ServePings();
  }
  LogLine(LogLevel::kError,
          "watchdog: the job did not end within 4 s of this rank's timeout (rank 0 did not act on "
          "it: its job may be ending otherwise); this rank's view follows");
  EndJob(PrintVerdict());
}

namespace {

// The verdict from `views`, unless worker `printer` (>= 0, a lower one) gives the job's one line:
// then this rank serves state requests for `wait_ms` and prints its own view only if the job is
// still there (`why`: what that worker should have acted on). Whether some rank answered nothing.
bool PrintOrDefer(const std::vector<hang::RankView>& views, int printer, int64_t wait_ms,
                  const char* why) {
  if (printer < 0) {
    LogLine(LogLevel::kError, "watchdog: " + hang::Verdict(views));
    return AnySilent(views);
  }
  ServeFor(wait_ms);
  LogLine(LogLevel::kError, "watchdog: rank " + std::to_string(printer) + " did not end the job " +
                                why + "; this rank's view follows");
  return PrintVerdict();
}

}  // namespace

// A worker whose watchdog fired while rank 0 answers nothing: gathers every rank's state and
// prints the verdict itself, unless a lower worker's watchdog fires too (that worker prints it:
// one line for the job; hang::VerdictPrinterBelow). A deferring rank answers state requests while
// that worker gathers, and prints its own view when the job is still there after it should have
// ended. Returns whether some rank answered nothing.
bool WorkerVerdict(double timeout_s) {
  std::vector<hang::RankView> views = Gather();
  int64_t wait_ms = 0;
  const int printer = hang::VerdictPrinterBelow(
      views, server::Rank(), static_cast<int64_t>(timeout_s * 1000), 3000, &wait_ms);
  // Its watchdog polls every 50 ms, gathers for at most 1.5 s and ends the job 1 s later.
  return PrintOrDefer(views, printer, wait_ms + 5000, "after its own timeout");
}

void DeadControllerVerdict(double wait_s) {
  std::vector<hang::RankView> views = Gather();
  int lower = -1;
  for (int q = 1; q < server::Rank() && q < static_cast<int>(views.size()) && lower < 0; ++q) {
    if (views[q].answered) lower = q;
  }
  PrintOrDefer(views, lower, static_cast<int64_t>(wait_s * 1000), "although rank 0 is silent");
}

// Rank 0, told by rank `rank` that its watchdog fired: every rank's state, the verdict, the end of
// the job.
void FireOnNotice(int rank, double timeout_s) {
  exit_cleanup::RemoveRegisteredFiles();  // no destructor runs from here on
  LogLine(LogLevel::kError, "watchdog: rank " + std::to_string(rank) +
                                "'s watchdog fired (a command of its own ran past DISCO_TIMEOUT=" +
                                std::to_string(static_cast<int>(timeout_s)) +
                                " s); gathering every rank's state; ending the job");
  const bool silent = PrintVerdict();
  probe::DumpInterpreterStacks();
  Dump("watchdog timeout on rank " + std::to_string(rank));
  EndJob(silent);
}

}  // namespace watchdog
}  // namespace disco
