#include "session/watchdog.h"

#include <arpa/inet.h>
#include <disco/log.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
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

#include "core/launcher.h"
#include "core/wait_record.h"
#include "mpi/clock.h"

namespace disco {
namespace watchdog {
namespace {

int64_t NowNs() { return mpi::NowNs(); }  // async-signal-safe, unlike std::chrono's clocks

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
  std::atomic<bool> dump_requested{false};
  char prefix[96] = {0};
  int rank = 0;
  double timeout_s = 0;
  std::thread thread;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;
  bool started = false;
  // Liveness pings: this rank's UDP socket (answered by the watchdog thread) and every rank's
  // address.
  int ping_fd = -1;
  PingAddress self;
  std::vector<PingAddress> peers;
  std::mutex peers_mu;
  // Ranks that answered a ping at least once (only those can be said to have stopped: UDP may be
  // filtered), and when this rank last checked.
  std::vector<bool> answered;
  int64_t last_check_ns = 0;
  int missed_checks = 0;
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> have_peers{false};
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

// The controller probe and the interpreter's stacks (their section is at the end of this
// namespace).
void DumpInterpreterStacks();
void ProbeController();
void StartProbe(int rank, double timeout_s);
void StopSignals();

std::string Describe(const Record& r) {
  std::ostringstream os;
  os << "command #" << r.seq << " (" << r.action;
  if (r.function[0] != '\0') os << " '" << r.function << "'";
  os << ")";
  return os.str();
}

// A ping or its answer: magic, kind, the sender's rank, a nonce.
struct PingPacket {
  char magic[4] = {'D', 'W', 'D', 'P'};
  uint8_t kind = 0;  // 1 ping, 2 pong
  int32_t rank = 0;
  uint64_t nonce = 0;
};

// Answers the pings waiting on the socket; with `pongs`, records the answers to `nonce` in it.
void ServePings(uint64_t nonce = 0, std::vector<bool>* pongs = nullptr) {
  State& s = S();
  if (s.ping_fd < 0) return;
  for (;;) {
    PingPacket p;
    sockaddr_in from{};
    socklen_t len = sizeof from;
    ssize_t n =
        recvfrom(s.ping_fd, &p, sizeof p, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) return;
    if (n != static_cast<ssize_t>(sizeof p) || std::memcmp(p.magic, "DWDP", 4) != 0) continue;
    if (p.kind == 1) {
      PingPacket answer = p;
      answer.kind = 2;
      answer.rank = s.rank;
      sendto(s.ping_fd, &answer, sizeof answer, 0, reinterpret_cast<sockaddr*>(&from), len);
    } else if (p.kind == 2 && pongs != nullptr && p.nonce == nonce && p.rank >= 0 &&
               p.rank < static_cast<int>(pongs->size())) {
      (*pongs)[p.rank] = true;
    }
  }
}

// Pings `targets` (all other ranks when empty) for up to a second; returns who answered, by rank.
std::vector<bool> Ping(const std::vector<PingAddress>& peers, const std::vector<int>& targets) {
  State& s = S();
  std::vector<bool> pongs(peers.size(), true);
  if (targets.empty()) {
    for (size_t r = 0; r < peers.size(); ++r) pongs[r] = static_cast<int>(r) == s.rank;
  } else {
    for (int r : targets) pongs[r] = false;
  }
  const uint64_t nonce = static_cast<uint64_t>(NowNs()) ^ (static_cast<uint64_t>(s.rank) << 48);
  const int64_t deadline = NowNs() + 1000000000;
  for (int round = 0; NowNs() < deadline; ++round) {
    if (round % 10 == 0) {  // every 100 ms, to the ranks that have not answered
      for (size_t r = 0; r < peers.size(); ++r) {
        if (pongs[r] || peers[r].port == 0) continue;
        // To each of its addresses (which one reaches it is not known), and to loopback when it
        // runs on this host.
        std::vector<uint32_t> to_addresses;
        for (uint32_t a : peers[r].ipv4) {
          if (a != 0) to_addresses.push_back(a);
        }
        if (std::strncmp(peers[r].host, s.self.host, sizeof s.self.host) == 0) {
          to_addresses.push_back(htonl(INADDR_LOOPBACK));
        }
        for (uint32_t a : to_addresses) {
          sockaddr_in to{};
          to.sin_family = AF_INET;
          to.sin_addr.s_addr = a;
          to.sin_port = peers[r].port;
          PingPacket p;
          p.kind = 1;
          p.rank = s.rank;
          p.nonce = nonce;
          sendto(s.ping_fd, &p, sizeof p, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
        }
      }
    }
    ServePings(nonce, &pongs);
    if (std::all_of(pongs.begin(), pongs.end(), [](bool b) { return b; })) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pongs;
}

std::vector<PingAddress> Peers() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.peers_mu);
  return s.peers;
}

// "ranks 2, 3 (node2)" of those not answering (and counted in `answered`, when given).
std::string Name(const std::vector<PingAddress>& peers, const std::vector<bool>& pongs,
                 const std::vector<bool>* answered, int* count) {
  std::ostringstream os;
  int silent = 0;
  for (size_t r = 0; r < peers.size(); ++r) {
    if (pongs[r] || (answered != nullptr && !(*answered)[r])) continue;
    os << (silent++ ? ", " : "") << r << " (" << peers[r].host << ")";
  }
  *count = silent;
  return (silent > 1 ? "ranks " : "rank ") + os.str();
}

// Pings every other rank for up to a second: "ranks 2, 3 (node2) answered no liveness ping ...",
// or "" (all answered, or no addresses to ping).
std::string SilentRanks() {
  State& s = S();
  std::vector<PingAddress> peers = Peers();
  if (s.ping_fd < 0 || peers.size() < 2) return "";
  std::vector<bool> pongs = Ping(peers, {});
  int silent = 0;
  std::string names = Name(peers, pongs, nullptr, &silent);
  if (silent == 0) return "";
  if (silent == static_cast<int>(peers.size()) - 1 && peers.size() > 2) {
    return "no other rank answered a liveness ping (UDP may be filtered here)";
  }
  return names + " answered no liveness ping within 1 s: dead, or their node is off the network";
}

// The liveness check of a rank that waits (see Loop): rank 0 watches every rank, the others watch
// rank 0. A rank that answered pings before and answers none in two checks in a row has died or
// lost its network: the job cannot go on, and this rank ends it (a launcher may not: srun without
// --kill-on-bad-exit, or mpirun for a node that went silent without closing its connections).
void CheckLiveness() {
  State& s = S();
  std::vector<PingAddress> peers = Peers();
  if (s.ping_fd < 0 || peers.size() < 2) return;
  std::vector<int> targets;
  if (s.rank == 0) {
    for (size_t r = 1; r < peers.size(); ++r) targets.push_back(static_cast<int>(r));
  } else {
    targets.push_back(0);
  }
  std::vector<bool> pongs = Ping(peers, targets);
  if (s.answered.size() != peers.size()) s.answered.assign(peers.size(), false);
  for (size_t r = 0; r < peers.size(); ++r) {
    if (pongs[r] &&
        std::find(targets.begin(), targets.end(), static_cast<int>(r)) != targets.end()) {
      s.answered[r] = true;
    }
  }
  int silent = 0;
  std::string names = Name(peers, pongs, &s.answered, &silent);
  if (silent == 0) {
    s.missed_checks = 0;
    return;
  }
  if (++s.missed_checks < 2 || s.shutting_down.load()) return;
  LogLine(LogLevel::kError, "watchdog: " + names +
                                " stopped answering liveness pings (they answered before): "
                                "dead, or their node is off the network; ending the job");
  Dump("liveness");
  // A moment for the launcher to forward these lines (mpirun relays the ranks' output) before
  // it goes.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EndSlurmStep();
  EndLocalLauncher();
  std::_Exit(1);
}

void Fire(double elapsed_s) {
  State& s = S();
  const Record current = s.records[(s.next.load() + kFlightRecords - 1) % kFlightRecords];
  std::ostringstream line;
  line << "watchdog: " << Describe(current) << " has run for " << elapsed_s
       << " s, past DISCO_TIMEOUT=" << s.timeout_s << " s";
  int peer = wait_record::Peer();
  if (peer >= 0) {
    line << "; it waits for rank " << peer << " in a collective"
         << (s.rank == 0 ? ", which never arrived" : "");
  } else if (s.rank == 0) {
    line << "; the ranks that never arrived are not known to this transport (their own lines "
            "say where they are)";
  }
  const std::string silent = SilentRanks();
  if (!silent.empty()) line << "; " << silent;
  line << "; ending the job";
  LogLine(LogLevel::kError, line.str());
  DumpInterpreterStacks();
  Dump("watchdog timeout");
  // Give the other stuck ranks' watchdogs a moment to print their lines before the launcher,
  // seeing this rank exit, terminates them (srun without --kill-on-bad-exit would not: the step
  // is cancelled).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EndSlurmStep();
  std::_Exit(1);
}

void Loop() {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.stop_mu);
  while (!s.stop_cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return s.stopping; })) {
    ServePings();
    if (s.dump_requested.exchange(false)) Dump("SIGUSR1");
    if (s.timeout_s <= 0) continue;
    const int64_t now = NowNs();
    if (s.busy.load()) {
      double elapsed = (now - s.start_ns.load()) / 1e9;
      if (elapsed > s.timeout_s) Fire(elapsed);
    }
    ProbeController();
    // Liveness: once at start (who answers pings at all), then every DISCO_TIMEOUT / 3 (at most
    // 10 s) while the job runs, so that a dead rank or node ends the job within DISCO_TIMEOUT
    // even where nothing waits on it in a command (idle workers, a controller in SyncAll).
    const double period_s = std::min(10.0, std::max(1.0, s.timeout_s / 3));
    if (s.shutting_down.load() || !s.have_peers.load()) continue;
    if (s.last_check_ns == 0 || now - s.last_check_ns > static_cast<int64_t>(period_s * 1e9)) {
      s.last_check_ns = now;
      CheckLiveness();
    }
  }
}

// ---- A controller blocked outside disco, and the interpreter's stacks ---------------------------
//
// Commands are timed; a controller that sends none cannot hang a command, but it can hang the job:
// blocked in an MPI call of its own (mpi4py's COMM_WORLD.Barrier()) that the workers, waiting in
// disco's command loop, never join. When rank 0 has run no command for DISCO_TIMEOUT / 2, the
// watchdog samples the controller thread's native stack about once a second (a signal whose
// handler records backtrace()); a controller that stays inside the same MPI entry point, called
// from outside disco (not libdisco), until DISCO_TIMEOUT has passed without a command ends the
// job, naming the call and the library that made it. A controller that computes, or waits inside
// a disco call, is never ended by this.

struct Probe {
  std::atomic<bool> running{false};
  std::atomic<uint64_t> runs{0};  // controllers started so far (a new one starts quiet)
  uint64_t runs_seen = 0;
  pthread_t thread{};
  int signal = 0;  // 0: no probe in this job
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

void OnProbe(int) {
  const int saved = errno;
  Probe& p = P();
  p.depth.store(backtrace(p.frames, 64), std::memory_order_release);
  errno = saved;
}

void DumpInterpreterStacks() {
  if (void (*dump)() = P().dump_stacks.load()) dump();
}

// The MPI entry point (MPI_Barrier) the sampled stack is inside, when it was called from outside
// libdisco, with the path of the library that called it; "" otherwise.
std::string ForeignMpiCall(void* const* frames, int depth, std::string* caller) {
  Dl_info disco_lib{};
  if (dladdr(reinterpret_cast<void*>(&Start), &disco_lib) == 0) return "";
  // Return addresses point just past their call: look one byte back to stay inside it.
  auto at = [&](int i, Dl_info* info) {
    return dladdr(static_cast<char*>(frames[i]) - (i > 0 ? 1 : 0), info) != 0;
  };
  auto is_entry = [](const Dl_info& info) {
    if (info.dli_sname == nullptr) return false;
    const std::string name = info.dli_sname;
    return name.rfind("MPI_", 0) == 0 || name.rfind("PMPI_", 0) == 0;
  };
  for (int i = 0; i < depth; ++i) {
    Dl_info entry{};
    if (!at(i, &entry) || !is_entry(entry)) continue;
    std::string name = entry.dli_sname;
    for (int j = i + 1; j < depth; ++j) {
      Dl_info up{};
      if (!at(j, &up)) return "";             // an unknown caller: no verdict
      if (up.dli_fbase == entry.dli_fbase) {  // still inside the MPI library: the outermost entry
        if (is_entry(up)) name = up.dli_sname;
        continue;
      }
      if (up.dli_fbase == disco_lib.dli_fbase) return "";  // disco's own call
      *caller = up.dli_fname != nullptr ? up.dli_fname : "an unknown library";
      return name[0] == 'P' ? name.substr(1) : name;
    }
    return "";
  }
  return "";
}

[[noreturn]] void FireControllerBlocked(const std::string& call, const std::string& caller,
                                        double quiet_s) {
  State& s = S();
  std::ostringstream line;
  line << "watchdog: the controller (rank 0) has been inside " << call
       << ", called from outside disco (" << caller << "), with no disco command for " << quiet_s
       << " s, past DISCO_TIMEOUT=" << s.timeout_s
       << " s: the workers wait in disco's command loop and cannot join an MPI call of the "
          "controller's own; ending the job";
  LogLine(LogLevel::kError, line.str());
  DumpInterpreterStacks();
  Dump("controller blocked in " + call);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // for the launcher to forward the lines
  EndSlurmStep();
  std::_Exit(1);
}

// One step of the probe, on the watchdog thread (every 50 ms while DISCO_TIMEOUT is set).
void ProbeController() {
  State& s = S();
  Probe& p = P();
  if (p.signal == 0) return;
  const int64_t now = NowNs();
  const uint64_t commands = s.next.load(std::memory_order_acquire);
  const uint64_t runs = p.runs.load();
  if (!p.running.load() || s.busy.load() || commands != p.commands_seen || runs != p.runs_seen) {
    p.commands_seen = commands;
    p.runs_seen = runs;
    p.quiet_since_ns = now;
    p.stuck_in.clear();
    return;
  }
  const int64_t timeout_ns = static_cast<int64_t>(s.timeout_s * 1e9);
  const int64_t quiet_ns = now - p.quiet_since_ns;
  if (quiet_ns < timeout_ns / 2 || now - p.last_sample_ns < 1000000000) return;
  p.last_sample_ns = now;
  p.depth.store(-1, std::memory_order_relaxed);
  if (pthread_kill(p.thread, p.signal) != 0) return;
  int depth = -1;
  for (int i = 0; i < 200 && (depth = p.depth.load(std::memory_order_acquire)) < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
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

// Rank 0 with a timeout samples its controller (a real-time signal nothing else here uses).
void StartProbe(int rank, double timeout_s) {
  Probe& p = P();
  p.signal = 0;
  if (rank != 0 || timeout_s <= 0) return;
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

// Gives back the signals this watchdog handled (the SIGTERM line, SIGUSR1, the probe's).
void StopSignals() {
  auto restore = [](int sig, void (*mine)(int)) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == mine) signal(sig, SIG_DFL);
  };
  restore(SIGTERM, OnTerminate);
  restore(SIGUSR1, OnDumpRequest);
  Probe& p = P();
  if (p.signal != 0) restore(p.signal, OnProbe);
  p.signal = 0;
}

}  // namespace

void ControllerRunning(bool running) {
  Probe& p = P();
  if (running) {
    p.thread = pthread_self();
    p.runs.fetch_add(1);
  }
  p.running.store(running);
}

void SetStackDumper(void (*dump)()) { P().dump_stacks.store(dump); }

void Start(int rank, int world_size, double timeout_s) {
  State& s = S();
  if (s.started) return;
  s.started = true;
  s.stopping = false;
  s.rank = rank;
  s.timeout_s = timeout_s;
  // A new job of the same process (Python's disco.main run twice): the last one's ending state.
  s.shutting_down.store(false);
  s.have_peers.store(false);
  s.answered.clear();
  s.last_check_ns = 0;
  s.missed_checks = 0;
  std::snprintf(s.prefix, sizeof s.prefix, "[rank %d/%d] watchdog: ", rank, world_size);
#if DISCO_SIMULATED
  // Under SimGrid's SMPI every rank is a simulated actor of one process: a thread of our own would
  // not be one (its clock reads and sleeps crash the simulator), and a simulated job cannot hang on
  // a real rank anyway. The flight recorder still records every command.
  if (timeout_s > 0 && rank == 0) {
    DISCO_LOG(WARN) << "DISCO_TIMEOUT=" << timeout_s
                    << " is ignored: this disco is built for SimGrid SMPI, which has no watchdog";
  }
  return;
#endif
  struct sigaction old;
  if (sigaction(SIGTERM, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGTERM, OnTerminate);
  }
  if (sigaction(SIGUSR1, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGUSR1, OnDumpRequest);
  }
  StartProbe(rank, timeout_s);
  if (s.ping_fd >= 0) {  // a new job of the same process keeps its liveness socket
    s.thread = std::thread(Loop);
    return;
  }
  // The liveness socket: any port, on every address of this host.
  s.ping_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s.ping_fd >= 0) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof addr;
    if (bind(s.ping_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(s.ping_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close(s.ping_fd);
      s.ping_fd = -1;
    } else {
      s.self.port = addr.sin_port;
    }
  }
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  std::snprintf(s.self.host, sizeof s.self.host, "%s", host);
  // Every IPv4 address of the host but loopback (which one reaches another node is not known
  // here; ranks on this host are also pinged on loopback).
  ifaddrs* interfaces = nullptr;
  if (s.ping_fd >= 0 && getifaddrs(&interfaces) == 0) {
    int n = 0;
    for (ifaddrs* i = interfaces; i != nullptr && n < PingAddress::kMaxAddresses; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
      s.self.ipv4[n++] = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    }
    freeifaddrs(interfaces);
  }
  s.thread = std::thread(Loop);
}

PingAddress LocalPingAddress() { return S().self; }

void ShuttingDown() { S().shutting_down.store(true); }

void SetPingAddresses(const std::vector<PingAddress>& all) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.peers_mu);
  s.peers = all;
  s.have_peers.store(all.size() > 1);
}

void Stop() {
  State& s = S();
  StopSignals();
  if (!s.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(s.stop_mu);
    s.stopping = true;
  }
  s.stop_cv.notify_all();
  s.thread.join();
  s.started = false;
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
  wait_record::Clear();
  const uint64_t next = s.next.load(std::memory_order_relaxed);
  if (next == 0) return;
  Record& r = s.records[(next - 1) % kFlightRecords];
  r.duration_ns = NowNs() - r.start_ns;
}

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
