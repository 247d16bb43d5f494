#include "session/liveness_server.h"

#include <arpa/inet.h>
#include <disco/log.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
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
#include "session/flight_recorder.h"
#include "session/hang_gather.h"

namespace disco {
namespace watchdog {
namespace {

using recorder::NowNs;

// Liveness pings: this rank's UDP socket (served by the watchdog thread) and every rank's
// address, set once by SetPingAddresses and copied into `known` by the thread.
struct Server {
  int rank = 0;
  int world = 1;
  double timeout_s = 0;
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
  int64_t previous_check_ns = 0;
  int64_t first_check_ns = 0;  // the first liveness check (rank 0: a rank never heard from)
  int missed_checks = 0;
  // Datagrams dropped since the last warning, by reason (the warning: at most one per 10 s).
  enum Drop { kMalformed, kOtherJob, kWrongSource, kBadMac, kReplay, kDropKinds };
  uint64_t dropped[kDropKinds] = {0};
  int64_t last_drop_warning_ns = 0;
};
Server& S() {
  static Server* s = new Server();  // never destroyed: the watchdog's thread may use it at exit
  return *s;
}

bool SameHost(const PingAddress& a, const PingAddress& b) {
  return std::strncmp(a.host, b.host, sizeof a.host) == 0;
}

// Whether a datagram from `from` can be rank `r`'s: its port, and its address (the one the rank's
// socket is bound to; any of its host's, or loopback on this host, when it is bound to all).
bool FromRank(const sockaddr_in& from, int r) {
  Server& s = S();
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

void Reply(const uint8_t* out, size_t n, const sockaddr_in& from) {
  sendto(S().ping_fd, out, n, 0, reinterpret_cast<const sockaddr*>(&from), sizeof from);
}

// A datagram that carries its sender's counter (a ping, a state request, a fired notice): taken
// once, as the sender's proof of life; false for a replay.
bool TakeCounted(const liveness::Packet& p, int sender, int64_t now) {
  Server& s = S();
  // Each carries its sender's counter, which grows with every one it sends.
  if (p.nonce <= s.last_counter[sender]) {  // replayed (or overtaken by a later one)
    ++s.dropped[Server::kReplay];
    return false;
  }
  s.last_counter[sender] = p.nonce;
  s.heard_ns[sender] = std::max(s.heard_ns[sender], now);
  s.answered[sender] = true;
  return true;
}

// An answer to a state request of ours.
void TakeState(const liveness::Packet& p, int sender, const uint8_t* data, int64_t now) {
  Server& s = S();
  auto it = s.state_requests.find(p.nonce);
  if (it == s.state_requests.end() || it->second != sender) {
    ++s.dropped[Server::kReplay];
    return;
  }
  s.state_requests.erase(it);
  s.states[sender] = liveness::DecodeState(data);
  s.got_state[sender] = true;
  s.heard_ns[sender] = std::max(s.heard_ns[sender], now);
  s.answered[sender] = true;
}

// A pong: settles its ping.
void TakePong(const liveness::Packet& p, int sender) {
  Server& s = S();
  auto it = s.outstanding.find(p.nonce);
  if (it == s.outstanding.end() || it->second.target != sender) {  // no ping of ours: a replay
    ++s.dropped[Server::kReplay];                                  // (or a late duplicate)
    return;
  }
  // Alive after the ping went out (not necessarily when the pong arrived).
  s.heard_ns[sender] = std::max(s.heard_ns[sender], it->second.sent_ns);
  s.answered[sender] = true;
  s.outstanding.erase(it);
}

// Whether a datagram is this job's, from the rank it says sent it, with a valid MAC; counts the
// others, dropped.
bool Authentic(const uint8_t* data, size_t n, bool truncated, const sockaddr_in& from,
               liveness::Packet* p) {
  Server& s = S();
  liveness::Verdict v = truncated ? liveness::Verdict::kMalformed
                                  : liveness::Parse(data, n, s.rank, s.world, s.job_id, p);
  if (v == liveness::Verdict::kMalformed) {
    ++s.dropped[Server::kMalformed];
    return false;
  }
  if (v == liveness::Verdict::kOtherJob) {
    ++s.dropped[Server::kOtherJob];
    return false;
  }
  // The source is checked before the MAC: a flood costs no hashing.
  if (!FromRank(from, static_cast<int>(p->sender))) {
    ++s.dropped[Server::kWrongSource];
    return false;
  }
  if (!liveness::MacValid(data, n, s.mac)) {
    ++s.dropped[Server::kBadMac];
    return false;
  }
  return true;
}

// One datagram that arrived: a ping is answered, a pong settles its ping; either proves its
// sender alive. Anything else is counted and dropped.
void Take(const uint8_t* data, size_t n, bool truncated, const sockaddr_in& from) {
  Server& s = S();
  liveness::Packet p;
  if (!Authentic(data, n, truncated, from, &p)) return;
  const int sender = static_cast<int>(p.sender);
  const int64_t now = NowNs();
  if (p.kind == liveness::kPing || p.kind == liveness::kStateRequest ||
      p.kind == liveness::kFired) {
    if (!TakeCounted(p, sender, now)) return;
  }
  if (p.kind == liveness::kFired) {
    if (s.rank == 0 && s.fired_by < 0) s.fired_by = sender;
  } else if (p.kind == liveness::kStateRequest) {
    uint8_t out[liveness::kStatePacketBytes];
    liveness::EncodeState(Outgoing(liveness::kState, sender, p.nonce), OwnState(), s.mac, out);
    Reply(out, sizeof out, from);
  } else if (p.kind == liveness::kState) {
    TakeState(p, sender, data, now);
  } else if (p.kind == liveness::kPing) {
    uint8_t out[liveness::kPacketBytes];
    liveness::Encode(Outgoing(liveness::kPong, sender, p.nonce), s.mac, out);
    Reply(out, sizeof out, from);
  } else {
    TakePong(p, sender);
  }
}

// The addresses rank `r` is pinged at: the one its socket is bound to, else each of its host's
// (which one reaches it is not known) and loopback when it runs on this host.
std::vector<uint32_t> AddressesOf(int r) {
  Server& s = S();
  const PingAddress& p = s.known[r];
  if (p.bound != 0) return {p.bound};
  std::vector<uint32_t> to;
  for (uint32_t a : p.ipv4) {
    if (a != 0) to.push_back(a);
  }
  if (SameHost(p, s.self)) to.push_back(htonl(INADDR_LOOPBACK));
  return to;
}

void SendPing(int r, int64_t now) { server::SendTo(r, liveness::kPing, now); }

// Pings `targets` for up to a second (again every 100 ms to those not heard from yet); returns,
// by rank, whether each was known alive at `since_ns` or later (true for non-targets).
std::vector<bool> Ping(const std::vector<int>& targets, int64_t since_ns) {
  Server& s = S();
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
    server::ServePings();
  }
  std::vector<bool> alive(s.known.size(), true);
  for (int r : targets) alive[r] = heard(r);
  return alive;
}

// Watched by a liveness check: the ranks that answered before, and (rank 0) those that never did
// while another rank of their host (or this rank, on its own host) did: UDP reaches that host, so
// the rank died or stopped early (during start-up, say, while the controller waits in a sync,
// which no command times). A host none of whose ranks ever answered is not judged (UDP may be
// filtered to it). `*never`: some rank watched for that reason is not alive.
std::vector<bool> Watched(const std::vector<int>& targets, const std::vector<bool>& alive,
                          bool* never) {
  Server& s = S();
  std::vector<bool> watched = s.answered;
  *never = false;
  if (s.rank != 0) return watched;
  for (int r : targets) {
    if (watched[r]) continue;
    bool reached = SameHost(s.known[r], s.self);
    for (int q = 1; q < static_cast<int>(s.known.size()) && !reached; ++q) {
      reached = q != r && s.answered[q] && SameHost(s.known[q], s.known[r]);
    }
    watched[r] = reached;
    *never = *never || (reached && !alive[r]);
  }
  return watched;
}

// Whether every silent rank that is watched has been heard from within the grace period.
bool WithinGrace(const std::vector<int>& targets, const std::vector<bool>& alive,
                 const std::vector<bool>& watched, int64_t now) {
  Server& s = S();
  // Checks come every DISCO_TIMEOUT / 3 (at least 1 s): with a short timeout, a live rank on a
  // node whose cores are overloaded may miss two in a row. It is declared dead only once nothing
  // was heard from it for DISCO_TIMEOUT (at most 10 s, which two checks take anyway past 15 s;
  // for a rank never heard from, since the first check).
  const int64_t grace_ns = static_cast<int64_t>(std::min(s.timeout_s, 10.0) * 1e9);
  for (int r : targets) {
    if (alive[r] || !watched[r]) continue;
    const int64_t last = s.heard_ns[r] != 0 ? s.heard_ns[r] : s.first_check_ns;
    if (now - last < grace_ns) return true;
  }
  return false;
}

// A rank this one watches is dead: ends the job, and this node's launcher.
[[noreturn]] void EndForDeadRanks(const std::string& names, bool never) {
  exit_cleanup::RemoveRegisteredFiles();  // no destructor runs from here on
  const std::string launcher = LocalLauncher();
  LogLine(LogLevel::kError, "watchdog: " + names +
                                (never ? " answered no liveness ping (some never did, while "
                                         "other ranks of their host answered): "
                                       : " stopped answering liveness pings (they answered "
                                         "before): ") +
                                "dead, or their node is off the network; ending the job" +
                                (launcher.empty() ? "" : " and this node's launcher, " + launcher));
  if (S().rank == 0) {
    PrintVerdict();
  } else {
    // The lower workers find rank 0 dead within a check or two of this one.
    DeadControllerVerdict(2 * server::CheckPeriod(S().timeout_s) + 3);
  }
  Dump("liveness");
  // A moment for the launcher to forward these lines (mpirun relays the ranks' output) before
  // it goes.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EndSlurmStep();
  EndLocalLauncher();
  std::_Exit(1);
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
  Server& s = S();
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

}  // namespace

namespace server {

void Reset(int rank, int world_size, double timeout_s) {
  Server& s = S();
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
  s.previous_check_ns = 0;
  s.first_check_ns = 0;
  s.missed_checks = 0;
}

void Open(const liveness::JobSecret& secret, const std::vector<PingAddress>& hosts) {
  Server& s = S();
  s.self = LocalHost();
  if (s.ping_fd >= 0) {  // a new job of the same process (disco.main run twice): a new socket
    close(s.ping_fd);
    s.ping_fd = -1;
  }
  // The liveness socket: only where there is a peer to watch and a timeout to enforce.
  if (s.timeout_s > 0 && s.world > 1 && static_cast<int>(hosts.size()) == s.world) {
    s.mac = crypto::HmacSha256(secret.secret, sizeof secret.secret);
    s.job_id = secret.job_id;
    OpenPingSocket(hosts);
  }
}

int Fd() { return S().ping_fd; }
int Rank() { return S().rank; }
int WorldSize() { return S().world; }
const PingAddress& Self() { return S().self; }
bool ShuttingDownNow() { return S().shutting_down.load(); }
const std::vector<PingAddress>& Known() { return S().known; }
int FiredBy() { return S().fired_by; }

bool PeersReady() {
  Server& s = S();
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

// Takes every datagram waiting on the socket, in batches, up to a bound per call (the thread
// still checks its timeouts during a flood, and comes back at once). Datagrams larger than a
// liveness packet are cut short by the kernel and dropped unread.
void ServePings() {
  Server& s = S();
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

void WarnAboutDrops(int64_t now) {
  Server& s = S();
  uint64_t total = 0;
  for (uint64_t d : s.dropped) total += d;
  if (total == 0 || now - s.last_drop_warning_ns < 10 * int64_t{1000000000}) return;
  // Stale pongs alone are the job's own (answers to pings already answered): not worth a line.
  if (total == s.dropped[Server::kReplay] && total < 100) return;
  char where[INET_ADDRSTRLEN] = "0.0.0.0";
  in_addr bound{s.self.bound};
  inet_ntop(AF_INET, &bound, where, sizeof where);
  std::ostringstream line;
  line << "watchdog: dropped " << total << " datagrams on the liveness port (UDP " << where << ":"
       << ntohs(s.self.port) << ") that were not this job's pings";
  if (s.last_drop_warning_ns != 0) {
    line << " in the last " << (now - s.last_drop_warning_ns) / 1000000000 << " s";
  }
  line << " (malformed: " << s.dropped[Server::kMalformed]
       << ", another job's: " << s.dropped[Server::kOtherJob]
       << ", from an address that is no rank's: " << s.dropped[Server::kWrongSource]
       << ", wrong MAC: " << s.dropped[Server::kBadMac]
       << ", stale or replayed: " << s.dropped[Server::kReplay]
       << "); none counts as an answer. Another process on this host or network sends them";
  LogLine(LogLevel::kWarn, line.str());
  for (uint64_t& d : s.dropped) d = 0;
  s.last_drop_warning_ns = now;
}

// Each datagram carries the next value of this rank's counter.
void SendTo(int r, uint8_t kind, int64_t now) {
  Server& s = S();
  for (uint32_t a : AddressesOf(r)) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = a;
    to.sin_port = s.known[r].port;
    const liveness::Packet p = Outgoing(kind, r, s.next_nonce++);
    uint8_t out[liveness::kPacketBytes];
    liveness::Encode(p, s.mac, out);
    if (kind == liveness::kPing) s.outstanding[p.nonce] = Server::Outstanding{r, now};
    if (kind == liveness::kStateRequest) s.state_requests[p.nonce] = r;
    sendto(s.ping_fd, out, sizeof out, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
}

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

std::string SilentRanks(std::vector<bool>* alive_out) {
  Server& s = S();
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

double CheckPeriod(double timeout_s) { return std::min(10.0, std::max(1.0, timeout_s / 3)); }

// The liveness check of a rank that waits (see Loop): rank 0 watches every rank, the others watch
// rank 0. A check passes for a rank heard from (an authenticated pong, or a fresh ping of its
// own) since the previous check began. A rank that proved alive before and fails two checks in a
// row has died or lost its network: the job cannot go on, and this rank ends it (a launcher may
// not: srun without --kill-on-bad-exit, or mpirun for a node that went silent without closing its
// connections).
void CheckLiveness() {
  Server& s = S();
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
  bool never = false;
  std::vector<bool> watched = Watched(targets, alive, &never);
  int silent = 0;
  std::string names = Name(s.known, alive, &watched, &silent);
  if (silent == 0) {
    s.missed_checks = 0;
    return;
  }
  if (++s.missed_checks < 2 || s.shutting_down.load()) return;
  if (WithinGrace(targets, alive, watched, now)) return;
  EndForDeadRanks(names, never);
}

void BeginStateRound() {
  Server& s = S();
  s.states.assign(s.known.size(), liveness::RankState());
  s.got_state.assign(s.known.size(), false);
  s.state_requests.clear();
}
bool GotState(int r) { return S().got_state[r]; }
const liveness::RankState& StateOf(int r) { return S().states[r]; }
void EndStateRound() { S().state_requests.clear(); }

}  // namespace server

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

PingAddress LocalPingAddress() { return S().self; }

void ShuttingDown() { S().shutting_down.store(true); }

void SetPingAddresses(const std::vector<PingAddress>& all) {
  Server& s = S();
  std::lock_guard<std::mutex> lock(s.peers_mu);
  s.peers = all;
  s.have_peers.store(all.size() > 1);
}

}  // namespace watchdog
}  // namespace disco
