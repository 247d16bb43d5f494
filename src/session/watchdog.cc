#include "session/watchdog.h"

#include <arpa/inet.h>
#include <disco/log.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/exit_cleanup.h"
#include "core/launcher.h"
#include "core/printable.h"
#include "core/trace.h"
#include "core/wait_record.h"
#include "mpi/clock.h"
#include "session/flight_record.h"
#include "session/hang.h"

namespace disco {
namespace watchdog {
namespace {

int64_t NowNs() { return mpi::NowNs(); }  // async-signal-safe, unlike std::chrono's clocks

// Only the thread running commands writes the records (no lock: Begin/End sit on every call's
// path); readers on other threads or in signal handlers copy one out (FlightRecord::Read), which
// says when it was being written as they read it.
struct State {
  FlightRecord records[kFlightRecords];
  std::atomic<uint64_t> next{0};  // records written so far
  std::atomic<bool> busy{false};
  std::atomic<const char*> step_label{nullptr};  // the call a replay is at (Step)
  std::atomic<bool> collective{false};           // the running function talks to other ranks
  std::atomic<int64_t> start_ns{0};
  std::atomic<bool> dump_requested{false};
  char prefix[96] = {0};
  int rank = 0;
  int world = 1;
  double timeout_s = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  int wake_fd = -1;  // an eventfd: Stop wakes the thread from its poll
  bool started = false;
  // Liveness pings: this rank's UDP socket (served by the watchdog thread) and every rank's
  // address, set once by SetPingAddresses and copied into `known` by the thread.
  int ping_fd = -1;
  PingAddress self;
  std::vector<PingAddress> peers;
  std::mutex peers_mu;
  std::atomic<bool> have_peers{false};
  std::atomic<bool> shutting_down{false};
  crypto::HmacSha256 mac;  // keyed with the job's secret
  uint64_t job_id = 0;
  // The watchdog thread's alone from here on.
  std::vector<PingAddress> known;
  bool peers_ready = false;
  uint64_t next_nonce = 1;             // the counter of the pings this rank sends
  std::vector<uint64_t> last_counter;  // per rank: the highest ping counter taken from it
  std::vector<int64_t> heard_ns;       // per rank: the latest time it was known alive (0: never)
  std::vector<bool> answered;          // per rank: proved alive at least once
  struct Outstanding {
    int target;
    int64_t sent_ns;
  };
  std::unordered_map<uint64_t, Outstanding> outstanding;  // pings waiting for a pong, by nonce
  // The hang verdict: state requests waiting for their answer (by nonce), the states answered,
  // and on rank 0 the first rank that told it its watchdog fired (-1: none).
  std::unordered_map<uint64_t, int> state_requests;
  std::vector<liveness::RankState> states;
  std::vector<bool> got_state;
  int fired_by = -1;
  int64_t last_check_ns = 0;
  int64_t previous_check_ns = 0;
  int64_t first_check_ns = 0;  // the first liveness check (rank 0: a rank never heard from)
  int missed_checks = 0;
  // Datagrams dropped since the last warning, by reason (the warning: at most one per 10 s).
  enum Drop { kMalformed, kOtherJob, kWrongSource, kBadMac, kReplay, kDropKinds };
  uint64_t dropped[kDropKinds] = {0};
  int64_t last_drop_warning_ns = 0;
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
// PutStr with every byte that is not printable ASCII as '?' (names from the program).
void PutPrintable(char* buf, size_t cap, size_t* at, const char* s) {
  for (; *s != '\0' && *at + 1 < cap; ++s) buf[(*at)++] = PrintableChar(*s);
}

// SIGTERM (the launcher ending the job) or SIGINT: the registered files go (a served job's key
// file), one line says what this rank was doing, then the default action.
void OnTerminate(int sig) {
  exit_cleanup::RemoveRegisteredFiles();
  State& s = S();
  char line[512];
  size_t at = 0;
  PutStr(line, sizeof line, &at, s.prefix);
  PutStr(line, sizeof line, &at,
         sig == SIGINT ? "interrupted (SIGINT) " : "terminated by the launcher ");
  const uint64_t next = s.next.load();
  if (next == 0) {
    PutStr(line, sizeof line, &at, "before its first command");
  } else {
    const CommandRecord r = s.records[(next - 1) % kFlightRecords].Read();
    const bool busy = s.busy.load();
    PutStr(line, sizeof line, &at, busy ? "while running command #" : "idle after command #");
    PutInt(line, sizeof line, &at, static_cast<int64_t>(r.seq));
    PutStr(line, sizeof line, &at, " (");
    PutPrintable(line, sizeof line, &at, r.action);
    if (r.function[0] != '\0') {
      PutStr(line, sizeof line, &at, " '");
      PutPrintable(line, sizeof line, &at, r.function);
      PutStr(line, sizeof line, &at, "'");
    }
    PutStr(line, sizeof line, &at, r.torn ? ", being recorded)" : ")");
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
  // The timeline (DISCO_TRACE) of a rank the launcher ends: its own file, with the command it was
  // running (both async-signal-safe).
  if (trace::Enabled()) {
    const uint64_t last = s.next.load();
    if (last > 0 && s.busy.load()) {
      const CommandRecord r = s.records[(last - 1) % kFlightRecords].Read();
      char name[trace::kNameBytes];
      size_t n = 0;
      PutStr(name, sizeof name, &n, r.function);
      PutStr(name, sizeof name, &n, " (running)");
      trace::Record(trace::Kind::kRun, name, n, r.start_ns, NowNs(), static_cast<int64_t>(r.seq));
    }
    trace::WriteRankFile(sig == SIGINT ? "interrupted (SIGINT)" : "terminated by the launcher");
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

// SIGUSR1: the action that was there before ours (MPICH's MPI_Init installs one; so may the
// program), which ours passes the signal on to, and gives back when the job ends. Written only
// while ours is not installed.
struct sigaction g_previous_usr1 {};

void OnDumpRequest(int sig, siginfo_t* info, void* context) {
  S().dump_requested.store(true);
  const struct sigaction& prev = g_previous_usr1;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
             prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
}

bool IsOurDumpHandler(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) != 0 && action.sa_sigaction == OnDumpRequest;
}

// Ours in front of whatever handles SIGUSR1 now, which still gets every signal (a default action,
// which would end the process, or an ignored signal is not passed on).
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

// The controller probe and the interpreter's stacks (their section is at the end of this
// namespace), and this rank's state for a hang verdict.
void DumpInterpreterStacks();
liveness::RankState OwnState();
void ProbeController();
int SampleStack();
void StartProbe(int rank, double timeout_s);
void StopSignals();

// `text` with every byte that is not printable ASCII as '?' (a function's name may hold a newline
// or a terminal's escape codes: one line stays one line).
std::string Printable(const char* text) {
  std::string out = text != nullptr ? text : "";
  for (char& c : out) c = PrintableChar(c);
  return out;
}

std::string Describe(const CommandRecord& r) {
  std::ostringstream os;
  os << "command #" << r.seq << " (" << Printable(r.action);
  if (r.function[0] != '\0') os << " '" << Printable(r.function) << "'";
  os << (r.torn ? ", being recorded)" : ")");
  return os.str();
}

bool SameHost(const PingAddress& a, const PingAddress& b) {
  return std::strncmp(a.host, b.host, sizeof a.host) == 0;
}

// Whether a datagram from `from` can be rank `r`'s: its port, and its address (the one the rank's
// socket is bound to; any of its host's, or loopback on this host, when it is bound to all).
bool FromRank(const sockaddr_in& from, int r) {
  State& s = S();
  const PingAddress& p = s.known[r];
  if (p.port == 0 || from.sin_port != p.port) return false;
  const uint32_t a = from.sin_addr.s_addr;
  if (p.bound != 0) return a == p.bound;
  for (uint32_t x : p.ipv4) {
    if (x != 0 && x == a) return true;
  }
  return SameHost(p, s.self) && (ntohl(a) >> 24) == 127;
}

// A datagram of `kind` from this rank to rank `receiver` of this job, with `nonce`.
liveness::Packet Outgoing(uint8_t kind, int receiver, uint64_t nonce) {
  liveness::Packet p;
  p.kind = kind;
  p.sender = static_cast<uint32_t>(S().rank);
  p.receiver = static_cast<uint32_t>(receiver);
  p.job_id = S().job_id;
  p.nonce = nonce;
  return p;
}

// One datagram that arrived: a ping is answered, a pong settles its ping; either proves its
// sender alive. Anything else is counted and dropped.
void Take(const uint8_t* data, size_t n, bool truncated, const sockaddr_in& from) {
  State& s = S();
  liveness::Packet p;
  liveness::Verdict v = truncated ? liveness::Verdict::kMalformed
                                  : liveness::Parse(data, n, s.rank, s.world, s.job_id, &p);
  if (v == liveness::Verdict::kMalformed) {
    ++s.dropped[State::kMalformed];
    return;
  }
  if (v == liveness::Verdict::kOtherJob) {
    ++s.dropped[State::kOtherJob];
    return;
  }
  const int sender = static_cast<int>(p.sender);
  if (!FromRank(from, sender)) {  // checked before the MAC: a flood costs no hashing
    ++s.dropped[State::kWrongSource];
    return;
  }
  if (!liveness::MacValid(data, n, s.mac)) {
    ++s.dropped[State::kBadMac];
    return;
  }
  const int64_t now = NowNs();
  if (p.kind == liveness::kPing || p.kind == liveness::kStateRequest ||
      p.kind == liveness::kFired) {
    // Each carries its sender's counter, which grows with every one it sends.
    if (p.nonce <= s.last_counter[sender]) {  // replayed (or overtaken by a later one)
      ++s.dropped[State::kReplay];
      return;
    }
    s.last_counter[sender] = p.nonce;
    s.heard_ns[sender] = std::max(s.heard_ns[sender], now);
    s.answered[sender] = true;
  }
  if (p.kind == liveness::kFired) {
    if (s.rank == 0 && s.fired_by < 0) s.fired_by = sender;
    return;
  }
  if (p.kind == liveness::kStateRequest) {
    uint8_t out[liveness::kStatePacketBytes];
    liveness::EncodeState(Outgoing(liveness::kState, sender, p.nonce), OwnState(), s.mac, out);
    sendto(s.ping_fd, out, sizeof out, 0, reinterpret_cast<const sockaddr*>(&from), sizeof from);
    return;
  }
  if (p.kind == liveness::kState) {
    auto it = s.state_requests.find(p.nonce);
    if (it == s.state_requests.end() || it->second != sender) {
      ++s.dropped[State::kReplay];
      return;
    }
    s.state_requests.erase(it);
    s.states[sender] = liveness::DecodeState(data);
    s.got_state[sender] = true;
    s.heard_ns[sender] = std::max(s.heard_ns[sender], now);
    s.answered[sender] = true;
    return;
  }
  if (p.kind == liveness::kPing) {
    uint8_t out[liveness::kPacketBytes];
    liveness::Encode(Outgoing(liveness::kPong, sender, p.nonce), s.mac, out);
    sendto(s.ping_fd, out, sizeof out, 0, reinterpret_cast<const sockaddr*>(&from), sizeof from);
    return;
  }
  auto it = s.outstanding.find(p.nonce);
  if (it == s.outstanding.end() || it->second.target != sender) {  // no ping of ours: a replay
    ++s.dropped[State::kReplay];                                   // (or a late duplicate)
    return;
  }
  // Alive after the ping went out (not necessarily when the pong arrived).
  s.heard_ns[sender] = std::max(s.heard_ns[sender], it->second.sent_ns);
  s.answered[sender] = true;
  s.outstanding.erase(it);
}

// Takes every datagram waiting on the socket, in batches, up to a bound per call (the thread
// still checks its timeouts during a flood, and comes back at once). Datagrams larger than a
// liveness packet are cut short by the kernel and dropped unread.
void ServePings() {
  State& s = S();
  if (s.ping_fd < 0) return;
  constexpr int kBatch = 64;
  static uint8_t bufs[kBatch][liveness::kStatePacketBytes + 16];  // the watchdog thread's alone
  mmsghdr msgs[kBatch];
  iovec iovs[kBatch];
  sockaddr_in froms[kBatch];
  for (int batch = 0; batch < 64; ++batch) {
    for (int i = 0; i < kBatch; ++i) {
      iovs[i] = {bufs[i], sizeof bufs[i]};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = &froms[i];
      msgs[i].msg_hdr.msg_namelen = sizeof froms[i];
    }
    int n = recvmmsg(s.ping_fd, msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return;
    for (int i = 0; i < n; ++i) {
      if (!s.peers_ready || msgs[i].msg_hdr.msg_namelen != sizeof froms[i]) continue;
      Take(bufs[i], msgs[i].msg_len, (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0, froms[i]);
    }
    if (n < kBatch) return;
  }
}

// At most one line per 10 s about datagrams that were dropped, with their counts.
void WarnAboutDrops(int64_t now) {
  State& s = S();
  uint64_t total = 0;
  for (uint64_t d : s.dropped) total += d;
  if (total == 0 || now - s.last_drop_warning_ns < 10 * int64_t{1000000000}) return;
  // Stale pongs alone are the job's own (answers to pings already answered): not worth a line.
  if (total == s.dropped[State::kReplay] && total < 100) return;
  char where[INET_ADDRSTRLEN] = "0.0.0.0";
  in_addr bound{s.self.bound};
  inet_ntop(AF_INET, &bound, where, sizeof where);
  std::ostringstream line;
  line << "watchdog: dropped " << total << " datagrams on the liveness port (UDP " << where << ":"
       << ntohs(s.self.port) << ") that were not this job's pings";
  if (s.last_drop_warning_ns != 0) {
    line << " in the last " << (now - s.last_drop_warning_ns) / 1000000000 << " s";
  }
  line << " (malformed: " << s.dropped[State::kMalformed]
       << ", another job's: " << s.dropped[State::kOtherJob]
       << ", from an address that is no rank's: " << s.dropped[State::kWrongSource]
       << ", wrong MAC: " << s.dropped[State::kBadMac]
       << ", stale or replayed: " << s.dropped[State::kReplay]
       << "); none counts as an answer. Another process on this host or network sends them";
  LogLine(LogLevel::kWarn, line.str());
  for (uint64_t& d : s.dropped) d = 0;
  s.last_drop_warning_ns = now;
}

// The addresses rank `r` is pinged at: the one its socket is bound to, else each of its host's
// (which one reaches it is not known) and loopback when it runs on this host.
std::vector<uint32_t> AddressesOf(int r) {
  State& s = S();
  const PingAddress& p = s.known[r];
  if (p.bound != 0) return {p.bound};
  std::vector<uint32_t> to;
  for (uint32_t a : p.ipv4) {
    if (a != 0) to.push_back(a);
  }
  if (SameHost(p, s.self)) to.push_back(htonl(INADDR_LOOPBACK));
  return to;
}

// Sends rank `r` a datagram of `kind` (a ping, a state request, a fired notice) at each of its
// addresses, each with the next value of this rank's counter, and remembers what awaits an answer.
void SendTo(int r, uint8_t kind, int64_t now) {
  State& s = S();
  for (uint32_t a : AddressesOf(r)) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = a;
    to.sin_port = s.known[r].port;
    const liveness::Packet p = Outgoing(kind, r, s.next_nonce++);
    uint8_t out[liveness::kPacketBytes];
    liveness::Encode(p, s.mac, out);
    if (kind == liveness::kPing) s.outstanding[p.nonce] = State::Outstanding{r, now};
    if (kind == liveness::kStateRequest) s.state_requests[p.nonce] = r;
    sendto(s.ping_fd, out, sizeof out, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
}
void SendPing(int r, int64_t now) { SendTo(r, liveness::kPing, now); }

// Pings `targets` for up to a second (again every 100 ms to those not heard from yet); returns,
// by rank, whether each was known alive at `since_ns` or later (true for non-targets).
std::vector<bool> Ping(const std::vector<int>& targets, int64_t since_ns) {
  State& s = S();
  const int64_t start = NowNs();
  // Pings older than 10 s get no more credit for an answer.
  for (auto it = s.outstanding.begin(); it != s.outstanding.end();) {
    it = start - it->second.sent_ns > 10 * int64_t{1000000000} ? s.outstanding.erase(it)
                                                               : std::next(it);
  }
  auto heard = [&](int r) { return s.heard_ns[r] >= since_ns; };
  const int64_t deadline = start + 1000000000;
  int64_t next_send = start;
  for (;;) {
    const int64_t now = NowNs();
    if (now >= next_send) {
      for (int r : targets) {
        if (!heard(r) && s.known[r].port != 0) SendPing(r, now);
      }
      next_send = now + 100000000;
    }
    if (std::all_of(targets.begin(), targets.end(), heard) || now >= deadline) break;
    pollfd p{s.ping_fd, POLLIN, 0};
    const int64_t wake = std::min(next_send, deadline);
    poll(&p, 1, static_cast<int>(std::max<int64_t>(1, (wake - now) / 1000000)));
    ServePings();
  }
  std::vector<bool> alive(s.known.size(), true);
  for (int r : targets) alive[r] = heard(r);
  return alive;
}

// "ranks 2, 3 (node2)" of those not alive (and counted in `answered`, when given).
std::string Name(const std::vector<PingAddress>& peers, const std::vector<bool>& alive,
                 const std::vector<bool>* answered, int* count) {
  std::ostringstream os;
  int silent = 0;
  for (size_t r = 0; r < peers.size(); ++r) {
    if (alive[r] || (answered != nullptr && !(*answered)[r])) continue;
    os << (silent++ ? ", " : "") << r << " (" << peers[r].host << ")";
  }
  *count = silent;
  return (silent > 1 ? "ranks " : "rank ") + os.str();
}

// The thread's copy of every rank's address, once SetPingAddresses has run.
bool PeersReady() {
  State& s = S();
  if (s.peers_ready) return true;
  if (!s.have_peers.load()) return false;
  {
    std::lock_guard<std::mutex> lock(s.peers_mu);
    s.known = s.peers;
  }
  s.last_counter.assign(s.known.size(), 0);
  s.heard_ns.assign(s.known.size(), 0);
  s.answered.assign(s.known.size(), false);
  s.peers_ready = true;
  return true;
}

// Pings every other rank for up to a second: "ranks 2, 3 (node2) answered no liveness ping ...",
// or "" (all answered, or no addresses to ping).
std::string SilentRanks(std::vector<bool>* alive_out = nullptr) {
  State& s = S();
  if (s.ping_fd < 0 || !PeersReady() || s.known.size() < 2) return "";
  std::vector<int> targets;
  for (int r = 0; r < static_cast<int>(s.known.size()); ++r) {
    if (r != s.rank) targets.push_back(r);
  }
  std::vector<bool> alive = Ping(targets, NowNs());
  if (alive_out != nullptr) *alive_out = alive;
  int silent = 0;
  std::string names = Name(s.known, alive, nullptr, &silent);
  if (silent == 0) return "";
  if (silent == static_cast<int>(s.known.size()) - 1 && s.known.size() > 2) {
    return "no other rank answered a liveness ping (UDP may be filtered here)";
  }
  return names + " answered no liveness ping within 1 s: dead, or their node is off the network";
}

// Every rank's state, for the hang verdict: this rank's own, and each other's as it answers a
// state request (sent again every 200 ms to those that have not) within 1.5 s. A rank that
// answers nothing is reported so (dead, stopped, off the network, or UDP filtered).
std::vector<hang::RankView> Gather() {
  State& s = S();
  std::vector<hang::RankView> views(static_cast<size_t>(std::max(s.world, 1)));
  views[s.rank].answered = true;
  views[s.rank].host = s.self.host;
  views[s.rank].state = OwnState();
  if (s.ping_fd < 0 || !PeersReady() || static_cast<int>(s.known.size()) != s.world) {
    return views;
  }
  s.states.assign(s.known.size(), liveness::RankState());
  s.got_state.assign(s.known.size(), false);
  s.state_requests.clear();
  const int64_t start = NowNs();
  const int64_t deadline = start + 1500000000;
  int64_t next_send = start;
  auto all_in = [&] {
    for (int r = 0; r < s.world; ++r) {
      if (r != s.rank && !s.got_state[r]) return false;
    }
    return true;
  };
  for (;;) {
    const int64_t now = NowNs();
    if (now >= next_send) {
      for (int r = 0; r < s.world; ++r) {
        if (r != s.rank && !s.got_state[r] && s.known[r].port != 0) {
          SendTo(r, liveness::kStateRequest, now);
        }
      }
      next_send = now + 200000000;
    }
    if (all_in() || now >= deadline) break;
    pollfd p{s.ping_fd, POLLIN, 0};
    const int64_t wake = std::min(next_send, deadline);
    poll(&p, 1, static_cast<int>(std::max<int64_t>(1, (wake - now) / 1000000)));
    ServePings();
  }
  for (int r = 0; r < s.world; ++r) {
    views[r].host = s.known[r].host;
    if (r == s.rank) continue;
    views[r].answered = s.got_state[r];
    views[r].state = s.states[r];
  }
  s.state_requests.clear();
  return views;
}

// Gathers every rank's state and prints the hang verdict: one line naming the rank(s) that hold
// the others up and why (session/hang.h). Returns whether some rank answered nothing.
bool PrintVerdict() {
  std::vector<hang::RankView> views = Gather();
  LogLine(LogLevel::kError, "watchdog: " + hang::Verdict(views));
  return std::any_of(views.begin(), views.end(),
                     [](const hang::RankView& v) { return !v.answered; });
}

// The end of a job whose watchdog fired: the Slurm step, and this node's launcher too when a rank
// answered nothing (a launcher may wait for good for a rank that stopped or lost its node, or be
// told to keep a job whose rank died), after a moment for the launcher to forward the lines.
[[noreturn]] void EndJob(bool silent_ranks) {
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EndSlurmStep();
  if (silent_ranks) EndLocalLauncher();
  std::_Exit(1);
}

// The liveness check of a rank that waits (see Loop): rank 0 watches every rank, the others watch
// rank 0. A check passes for a rank heard from (an authenticated pong, or a fresh ping of its
// own) since the previous check began. A rank that proved alive before and fails two checks in a
// row has died or lost its network: the job cannot go on, and this rank ends it (a launcher may
// not: srun without --kill-on-bad-exit, or mpirun for a node that went silent without closing its
// connections).
void CheckLiveness() {
  State& s = S();
  if (s.ping_fd < 0 || !PeersReady() || s.known.size() < 2) return;
  const int64_t now = NowNs();
  const int64_t since = s.previous_check_ns != 0 ? s.previous_check_ns : now;
  s.previous_check_ns = now;
  std::vector<int> targets;
  if (s.rank == 0) {
    for (int r = 1; r < static_cast<int>(s.known.size()); ++r) targets.push_back(r);
  } else {
    targets.push_back(0);
  }
  if (s.first_check_ns == 0) s.first_check_ns = now;
  std::vector<bool> alive = Ping(targets, since);
  // Watched: the ranks that answered before, and (rank 0) those that never did while another rank
  // of their host (or this rank, on its own host) did: UDP reaches that host, so the rank died or
  // stopped early (during start-up, say, while the controller waits in a sync, which no command
  // times). A host none of whose ranks ever answered is not judged (UDP may be filtered to it).
  std::vector<bool> watched = s.answered;
  bool never = false;
  if (s.rank == 0) {
    for (int r : targets) {
      if (watched[r]) continue;
      bool reached = SameHost(s.known[r], s.self);
      for (int q = 1; q < static_cast<int>(s.known.size()) && !reached; ++q) {
        reached = q != r && s.answered[q] && SameHost(s.known[q], s.known[r]);
      }
      watched[r] = reached;
      never = never || (reached && !alive[r]);
    }
  }
  int silent = 0;
  std::string names = Name(s.known, alive, &watched, &silent);
  if (silent == 0) {
    s.missed_checks = 0;
    return;
  }
  if (++s.missed_checks < 2 || s.shutting_down.load()) return;
  // Checks come every DISCO_TIMEOUT / 3 (at least 1 s): with a short timeout, a live rank on a
  // node whose cores are overloaded may miss two in a row. It is declared dead only once nothing
  // was heard from it for DISCO_TIMEOUT (at most 10 s, which two checks take anyway past 15 s;
  // for a rank never heard from, since the first check).
  const int64_t grace_ns = static_cast<int64_t>(std::min(s.timeout_s, 10.0) * 1e9);
  for (int r : targets) {
    if (alive[r] || !watched[r]) continue;
    const int64_t last = s.heard_ns[r] != 0 ? s.heard_ns[r] : s.first_check_ns;
    if (now - last < grace_ns) return;
  }
  exit_cleanup::RemoveRegisteredFiles();  // no destructor runs from here on
  const std::string launcher = LocalLauncher();
  LogLine(LogLevel::kError, "watchdog: " + names +
                                (never ? " answered no liveness ping (some never did, while "
                                         "other ranks of their host answered): "
                                       : " stopped answering liveness pings (they answered "
                                         "before): ") +
                                "dead, or their node is off the network; ending the job" +
                                (launcher.empty() ? "" : " and this node's launcher, " + launcher));
  PrintVerdict();
  Dump("liveness");
  // A moment for the launcher to forward these lines (mpirun relays the ranks' output) before
  // it goes.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EndSlurmStep();
  EndLocalLauncher();
  std::_Exit(1);
}

// A worker whose watchdog fired tells rank 0, which gathers every rank's state, prints the hang
// verdict and ends the job (and with it this rank); this rank answers state requests meanwhile.
// When the job is still there 4 s later (rank 0 silent, or stuck without its watchdog), this rank
// prints the verdict itself.
void AwaitRankZeroVerdict() {
  State& s = S();
  if (s.ping_fd < 0 || !PeersReady() || s.known.size() < 2) return;
  const int64_t start = NowNs();
  int64_t next_send = start;
  for (int sent = 0;;) {
    const int64_t now = NowNs();
    if (now - start >= 4 * int64_t{1000000000}) break;
    if (sent < 3 && now >= next_send) {  // three times, 100 ms apart: a datagram may be lost
      SendTo(0, liveness::kFired, now);
      ++sent;
      next_send = now + 100000000;
    }
    pollfd p{s.ping_fd, POLLIN, 0};
    poll(&p, 1, 50);
    ServePings();
  }
  LogLine(LogLevel::kError,
          "watchdog: the job did not end within 4 s of this rank's timeout (rank 0 did not act on "
          "it: its job may be ending otherwise); this rank's view follows");
  EndJob(PrintVerdict());
}

// A worker whose watchdog fired while rank 0 answers nothing: gathers every rank's state and
// prints the verdict itself, unless a lower worker's command ran past DISCO_TIMEOUT too (that
// worker prints it: one line for the job). Returns whether some rank answered nothing.
bool WorkerVerdict() {
  State& s = S();
  std::vector<hang::RankView> views = Gather();
  bool defer = false;
  for (int q = 1; q < s.rank && q < static_cast<int>(views.size()) && !defer; ++q) {
    const liveness::RankState& st = views[q].state;
    defer = views[q].answered && (st.flags & liveness::RankState::kBusy) != 0 &&
            static_cast<double>(st.elapsed_ms) >= s.timeout_s * 1000;
  }
  if (!defer) LogLine(LogLevel::kError, "watchdog: " + hang::Verdict(views));
  return std::any_of(views.begin(), views.end(),
                     [](const hang::RankView& v) { return !v.answered; });
}

// Rank 0, told by rank `rank` that its watchdog fired: every rank's state, the verdict, the end of
// the job.
void FireOnNotice(int rank) {
  exit_cleanup::RemoveRegisteredFiles();  // no destructor runs from here on
  State& s = S();
  LogLine(LogLevel::kError, "watchdog: rank " + std::to_string(rank) +
                                "'s watchdog fired (a command of its own ran past DISCO_TIMEOUT=" +
                                std::to_string(static_cast<int>(s.timeout_s)) +
                                " s); gathering every rank's state; ending the job");
  const bool silent = PrintVerdict();
  DumpInterpreterStacks();
  Dump("watchdog timeout on rank " + std::to_string(rank));
  EndJob(silent);
}

void Fire(double elapsed_s) {
  exit_cleanup::RemoveRegisteredFiles();  // no destructor runs from here on
  State& s = S();
  const CommandRecord current =
      s.records[(s.next.load() + kFlightRecords - 1) % kFlightRecords].Read();
  std::ostringstream line;
  line << "watchdog: " << Describe(current);
  if (const char* step = s.step_label.load(std::memory_order_relaxed)) {
    line << " at " << Printable(step);
  }
  line << " has run for " << elapsed_s << " s, past DISCO_TIMEOUT=" << s.timeout_s << " s";
  int peer = wait_record::Peer();
  if (peer >= 0) {
    line << "; it waits for rank " << peer << " in a collective"
         << (s.rank == 0 ? ", which never arrived" : "");
  } else if (!s.collective.load(std::memory_order_relaxed) &&
             wait_record::Collective() == nullptr) {
    line << "; it is not a collective: the function itself is still running on this rank (no "
            "other rank holds it up)";
  } else if (s.rank == 0) {
    line << "; the ranks that never arrived are not known to this transport (their own lines "
            "say where they are)";
  }
  // Rank 0 gathers every rank's state (which also finds the ranks that answer nothing) before
  // its line, and prints the verdict after it; a worker pings every rank.
  std::vector<hang::RankView> views;
  bool silent = false;
  if (s.rank == 0) {
    views = Gather();
    std::vector<bool> alive(views.size(), true);
    for (size_t r = 0; r < views.size(); ++r) alive[r] = views[r].answered;
    int count = 0;
    const std::string names =
        s.known.size() == views.size() ? Name(s.known, alive, nullptr, &count) : std::string();
    silent = count > 0;
    if (silent)
      line << "; " << names
           << " answered no state request within 1.5 s: dead, or their "
              "node is off the network";
  }
  std::vector<bool> alive;
  if (s.rank != 0) {
    const std::string silent_line = SilentRanks(&alive);
    if (!silent_line.empty()) line << "; " << silent_line;
  }
  line << "; ending the job";
  LogLine(LogLevel::kError, line.str());
  if (s.rank == 0) LogLine(LogLevel::kError, "watchdog: " + hang::Verdict(views));
  DumpInterpreterStacks();
  Dump("watchdog timeout");
  if (s.rank != 0) {
    if (alive.empty() || alive[0]) {
      AwaitRankZeroVerdict();  // ends the job itself when rank 0 does not
    } else {
      silent = WorkerVerdict();  // rank 0 answers nothing: no waiting for it
    }
  }
  // Give the other stuck ranks' watchdogs a moment to print their lines before the launcher,
  // seeing this rank exit, terminates them (srun without --kill-on-bad-exit would not: the step
  // is cancelled).
  EndJob(silent);
}

void Loop() {
  State& s = S();
  while (!s.stopping.load()) {
    // Asleep until a datagram comes, Stop wakes it, or 50 ms pass.
    pollfd fds[2];
    nfds_t n = 0;
    if (s.wake_fd >= 0) fds[n++] = pollfd{s.wake_fd, POLLIN, 0};
    if (s.ping_fd >= 0) fds[n++] = pollfd{s.ping_fd, POLLIN, 0};
    if (n > 0) {
      poll(fds, n, 50);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (s.stopping.load()) break;
    PeersReady();
    ServePings();
    if (s.dump_requested.exchange(false)) Dump("SIGUSR1");
    if (s.timeout_s <= 0) continue;
    const int64_t now = NowNs();
    WarnAboutDrops(now);
    if (s.busy.load()) {
      double elapsed = (now - s.start_ns.load()) / 1e9;
      if (elapsed > s.timeout_s) Fire(elapsed);
    }
    if (s.fired_by >= 0 && !s.shutting_down.load()) FireOnNotice(s.fired_by);
    ProbeController();
    // Liveness: once at start (who answers pings at all), then every DISCO_TIMEOUT / 3 (at most
    // 10 s) while the job runs, so that a dead rank or node ends the job within DISCO_TIMEOUT
    // even where nothing waits on it in a command (idle workers, a controller in SyncAll).
    const double period_s = std::min(10.0, std::max(1.0, s.timeout_s / 3));
    if (s.shutting_down.load() || !s.peers_ready) continue;
    if (s.last_check_ns == 0 || now - s.last_check_ns > static_cast<int64_t>(period_s * 1e9)) {
      s.last_check_ns = now;
      CheckLiveness();
    }
  }
}

// The address to bind the liveness socket to (network byte order; 0: every interface): see
// PingAddress.
uint32_t BindAddress(const PingAddress& me, const std::vector<PingAddress>& hosts) {
  if (std::all_of(hosts.begin(), hosts.end(),
                  [&](const PingAddress& h) { return SameHost(h, me); })) {
    return htonl(INADDR_LOOPBACK);
  }
  // The source address the kernel picks towards another host's addresses (a UDP connect sends
  // nothing), if it is one of this host's listed ones; the first few other hosts are asked.
  int asked = 0;
  for (const PingAddress& h : hosts) {
    if (SameHost(h, me) || asked++ >= 8) continue;
    for (uint32_t a : h.ipv4) {
      if (a == 0) continue;
      int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return 0;
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = a;
      to.sin_port = htons(9);
      sockaddr_in local{};
      socklen_t len = sizeof local;
      const bool routed = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                          getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
      close(fd);
      if (!routed) continue;
      for (uint32_t mine : me.ipv4) {
        if (mine != 0 && mine == local.sin_addr.s_addr) return mine;
      }
    }
  }
  return 0;
}

void OpenPingSocket(const std::vector<PingAddress>& hosts) {
  State& s = S();
  s.self.bound = BindAddress(s.self, hosts);
  s.ping_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s.ping_fd < 0) return;
  // Room for many datagrams, so that a burst of foreign ones does not crowd out the answers
  // between two wake-ups (SO_RCVBUFFORCE passes net.core.rmem_max where the process may).
  int bytes = 4 << 20;
  if (setsockopt(s.ping_fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0) {
    setsockopt(s.ping_fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = s.self.bound;
  socklen_t len = sizeof addr;
  if (bind(s.ping_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(s.ping_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(s.ping_fd);
    s.ping_fd = -1;
    return;
  }
  s.self.port = addr.sin_port;
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
  // Acquires SampleStack's request: the watchdog's reads of the last sample come before this one.
  if (p.depth.load(std::memory_order_acquire) >= 0) return;  // not asked for (a stray signal)
  p.depth.store(backtrace(p.frames, 64), std::memory_order_release);
  errno = saved;
}

void DumpInterpreterStacks() {
  if (void (*dump)() = P().dump_stacks.load()) dump();
}

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

// The MPI entry point (MPI_Barrier) the sampled stack is inside, when it was called from outside
// libdisco (and outside HDF5, which disco's I/O calls MPI-IO through), with the path of the
// library that called it; "" otherwise. `*in_mpi` (when given): whether the stack is inside any
// MPI entry point at all.
std::string ForeignMpiCall(void* const* frames, int depth, std::string* caller,
                           bool* in_mpi = nullptr) {
  Dl_info disco_lib{};
  if (in_mpi != nullptr) *in_mpi = false;
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
    if (in_mpi != nullptr) *in_mpi = true;
    std::string name = entry.dli_sname;
    for (int j = i + 1; j < depth; ++j) {
      Dl_info up{};
      if (!at(j, &up)) return "";             // an unknown caller: no verdict
      if (up.dli_fbase == entry.dli_fbase) {  // still inside the MPI library: the outermost entry
        if (is_entry(up)) name = up.dli_sname;
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
  PrintVerdict();
  DumpInterpreterStacks();
  Dump("controller blocked in " + call);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // for the launcher to forward the lines
  EndSlurmStep();
  std::_Exit(1);
}

// Samples the native stack of the thread that runs commands (and rank 0's controller) into
// P().frames; returns its depth, or -1 (no probe, or the thread did not answer within 200 ms).
// On the watchdog thread only.
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

// Copies `src` into a state's field; a text cut short ends in "..." (a name cut silently could
// pass for another function's).
void CopyField(char* dst, size_t cap, const std::string& src) {
  CopyTruncated(dst, cap, src.data(), src.size());
  if (src.size() > cap - 1 && cap > 4) std::memcpy(dst + cap - 4, "...", 3);
}

liveness::RankState OwnState() {
  State& s = S();
  liveness::RankState st;
  const int64_t now = NowNs();
  const uint64_t next = s.next.load(std::memory_order_acquire);
  const bool busy = s.busy.load(std::memory_order_acquire);
  if (next > 0) {
    const CommandRecord r = s.records[(next - 1) % kFlightRecords].Read();
    st.seq = r.seq;
    st.flags |= liveness::RankState::kRanCommand;
    CopyField(st.action, sizeof st.action, r.action);
    const char* step = busy ? s.step_label.load(std::memory_order_relaxed) : nullptr;
    CopyField(st.function, sizeof st.function, step != nullptr ? step : r.function);
    const int64_t since =
        busy ? s.start_ns.load() : r.start_ns + std::max<int64_t>(0, r.duration_ns);
    st.elapsed_ms = static_cast<uint64_t>(std::max<int64_t>(0, now - since) / 1000000);
  }
  if (busy) {
    st.flags |= liveness::RankState::kBusy;
    if (s.collective.load(std::memory_order_relaxed)) st.flags |= liveness::RankState::kCollective;
    st.peer = wait_record::Peer();
    if (const char* op = wait_record::Collective()) {
      st.flags |= liveness::RankState::kInCollective;
      CopyField(st.activity, sizeof st.activity, std::string("in ") + op);
    }
  }
  char activity[wait_record::kActivityBytes];
  wait_record::Activity(activity, sizeof activity);
  if (activity[0] != '\0') CopyField(st.activity, sizeof st.activity, activity);
  if (s.rank == 0 && P().running.load()) st.flags |= liveness::RankState::kController;
  const int depth = SampleStack();
  if (depth > 0) {
    std::string caller;
    bool in_mpi = false;
    const std::string call = ForeignMpiCall(P().frames, depth, &caller, &in_mpi);
    if (in_mpi) st.flags |= liveness::RankState::kInMpi;
    if (!call.empty()) {
      const size_t slash = caller.rfind('/');
      CopyField(st.foreign_call, sizeof st.foreign_call, call);
      CopyField(st.foreign_caller, sizeof st.foreign_caller,
                slash == std::string::npos ? caller : caller.substr(slash + 1));
    }
  }
  return st;
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

// With a timeout, the watchdog samples the stack of the thread that runs commands (rank 0's
// controller too) with a real-time signal nothing else here uses: rank 0 watches its controller,
// and every rank tells where it is in its state for a hang verdict.
void StartProbe(int rank, double timeout_s) {
  Probe& p = P();
  p.signal = 0;
  (void)rank;
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

// Gives back the signals this watchdog handled (the SIGTERM/SIGINT line, SIGUSR1, the probe's).
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

PingAddress LocalHost() {
  PingAddress me;
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  std::snprintf(me.host, sizeof me.host, "%s", host);
  // Every IPv4 address of the host but loopback.
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) == 0) {
    int n = 0;
    for (ifaddrs* i = interfaces; i != nullptr && n < PingAddress::kMaxAddresses; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
      me.ipv4[n++] = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    }
    freeifaddrs(interfaces);
  }
  return me;
}

void Start(int rank, int world_size, double timeout_s, const liveness::JobSecret& secret,
           const std::vector<PingAddress>& hosts) {
  State& s = S();
  if (s.started) return;
  s.started = true;
  s.stopping = false;
  s.rank = rank;
  s.world = world_size;
  s.timeout_s = timeout_s;
  // A new job of the same process (Python's disco.main run twice): the last one's ending state.
  s.shutting_down.store(false);
  s.have_peers.store(false);
  s.known.clear();
  s.peers_ready = false;
  s.last_counter.clear();
  s.heard_ns.clear();
  s.answered.clear();
  s.outstanding.clear();
  s.state_requests.clear();
  s.fired_by = -1;
  s.last_check_ns = 0;
  s.previous_check_ns = 0;
  s.first_check_ns = 0;
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
  (void)secret;
  (void)hosts;
  return;
#endif
  struct sigaction old;
  for (int sig : {SIGTERM, SIGINT}) {  // unless the program handles them itself (Python: SIGINT)
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(sig, OnTerminate);
  }
  InstallDumpHandler();
  StartProbe(rank, timeout_s);
  s.self = LocalHost();
  if (s.ping_fd >= 0) {  // a new job of the same process (disco.main run twice): a new socket
    close(s.ping_fd);
    s.ping_fd = -1;
  }
  // The liveness socket: only where there is a peer to watch and a timeout to enforce.
  if (timeout_s > 0 && world_size > 1 && static_cast<int>(hosts.size()) == world_size) {
    s.mac = crypto::HmacSha256(secret.secret, sizeof secret.secret);
    s.job_id = secret.job_id;
    OpenPingSocket(hosts);
  }
  if (s.wake_fd >= 0) close(s.wake_fd);
  s.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
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
}

void Begin(uint64_t seq, const char* action, const std::string& function) {
  State& s = S();
  const int64_t now = NowNs();
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
  S().step_label.store(label, std::memory_order_relaxed);
}

void MarkCollective() { S().collective.store(true, std::memory_order_relaxed); }

void End() {
  State& s = S();
  s.busy.store(false, std::memory_order_release);
  wait_record::Clear();
  const uint64_t next = s.next.load(std::memory_order_relaxed);
  if (next == 0) return;
  FlightRecord& slot = s.records[(next - 1) % kFlightRecords];
  const int64_t now = NowNs();
  slot.SetDuration(now - slot.start_ns());
  if (trace::Enabled()) {  // named after the function, or the command when it runs none
    const CommandRecord r = slot.Read();
    const char* name = r.function[0] != '\0' ? r.function : r.action;
    trace::Record(trace::Kind::kRun, name, std::strlen(name), r.start_ns, now,
                  static_cast<int64_t>(r.seq));
  }
}

void Dump(const std::string& why) {
  State& s = S();
  // A job that ends here leaves this rank's timeline (DISCO_TRACE) in a file of its own, with the
  // command it was running; a SIGUSR1 dump of a running job does not.
  if (why != "SIGUSR1" && trace::Enabled()) {
    const uint64_t last = s.next.load(std::memory_order_acquire);
    if (last > 0 && s.busy.load(std::memory_order_acquire)) {
      const CommandRecord r = s.records[(last - 1) % kFlightRecords].Read();
      const std::string name = std::string(r.function) + " (running)";  // why: in the file
      trace::Record(trace::Kind::kRun, name, r.start_ns, NowNs(), static_cast<int64_t>(r.seq));
    }
    trace::WriteRankFile(why.c_str());
  }
  std::ostringstream os;
  const uint64_t next = s.next.load(std::memory_order_acquire);
  const uint64_t n = std::min<uint64_t>(next, kFlightRecords);
  os << "flight recorder (" << why << "): the last " << n << " of " << next
     << " commands this rank ran, oldest first";
  const int64_t now = NowNs();
  for (uint64_t i = next - n; i < next; ++i) {
    const CommandRecord r = s.records[i % kFlightRecords].Read();
    os << "\n  " << Describe(r) << ": ";
    if (r.duration_ns < 0) {
      const char* step = s.step_label.load(std::memory_order_relaxed);
      if (i + 1 == next && step != nullptr) os << "at " << Printable(step) << ", ";  // a replay's
      os << "running for " << (now - r.start_ns) / 1e6 << " ms";
    } else {
      os << r.duration_ns / 1e6 << " ms";
    }
  }
  LogLine(LogLevel::kError, os.str());
}

}  // namespace watchdog
}  // namespace disco
