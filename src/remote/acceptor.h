// The listening end of disco::Serve: accepts connections in a thread of its own, runs their
// handshakes (handshake.h) and hands a client that proved the key to the serving thread.
#ifndef DISCO_REMOTE_ACCEPTOR_H_
#define DISCO_REMOTE_ACCEPTOR_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/crypto.h"
#include "remote/handshake.h"
#include "remote/socket.h"

namespace disco {
namespace remote {

// Accepts connections in a thread of its own and runs their handshakes, many at once, each step
// with a deadline for all of it: a peer that drips its bytes, or many of them, cannot keep a
// client with the key out.
// - At most kMaxPending connections wait in their handshake; a new one beyond that closes the
//   oldest (an honest client sends each message at once, within a millisecond).
// - Failures count per network, not per address (remote::AddressGroup: all of 127.0.0.0/8 is one,
//   other IPv4 addresses by DISCO_SERVE_PEER_PREFIX bits, IPv6 by /64), so that one host cannot
//   reset its record by changing its source address. A wrong key is answered only after a delay
//   that doubles with each failure from that network (kFirstBackoffMs .. kMaxBackoffMs, forgotten
//   after kForgetMs without a failure); a wrong key from a network that already has
//   kMaxDelayedPerPeer answers waiting is closed unanswered. The right key is answered at once,
//   whatever the network did before.
// - Refusals are logged at most once per kLogEveryMs in all: the first as it comes, the rest
//   counted per network and reason and summed up in one line when the time is up (and when the
//   server stops).
// Hands an accepted client to the serving thread; answers "busy" while one is being served.
class Acceptor {
 public:
  static constexpr size_t kMaxPending = 64;
  static constexpr size_t kMaxDelayedPerPeer = 8;
  static constexpr int kFirstBackoffMs = 100;
  static constexpr int kMaxBackoffMs = 10000;
  static constexpr int64_t kForgetMs = 600000;
  static constexpr int64_t kLogEveryMs = 10000;

  Acceptor(Socket* listener, const std::string& key, int ipv4_prefix);
  ~Acceptor();

  /// Waits for the next client that passed the handshake.
  Socket Next();
  /// The served client has gone: the next one may come in.
  void Release();

 private:
  struct Pending {
    explicit Pending(Socket sock) : handshake(std::move(sock)) {}
    ServerHandshake handshake;
    std::string peer;           // ip:port
    std::string group;          // its network (remote::AddressGroup): failures count per group
    int64_t deadline_ms = 0;    // for the current step
    int64_t answer_at_ms = -1;  // a wrong key waiting for its delayed answer
  };
  struct PeerRecord {
    int failures = 0;
    int64_t last_failure_ms = 0;
  };

  void LogRefusal(const Pending& p, const std::string& why, const char* reason);
  void FlushRefusals(bool now_or_never = false);
  bool Decide(Pending* p);
  bool Admit(Pending* p);
  bool DelayWrongKey(Pending* p);
  bool ReadHello(Pending* p);
  void Run();
  void ExpireDue(int64_t now);
  void ForgetQuietPeers();
  void AcceptNew();

  Socket* listener_;
  const crypto::HmacSha256 mac_;  // keyed with the server's key
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool attached_ = false;
  Socket next_;
  std::list<Pending> pending_;                         // the acceptor thread's alone
  std::unordered_map<std::string, PeerRecord> peers_;  // likewise, by network
  const int ipv4_prefix_;
  // Refusals not logged yet, by network and reason; when the last refusal line went out.
  std::map<std::string, std::map<std::string, uint64_t>> unlogged_;
  uint64_t unlogged_total_ = 0;
  int64_t last_log_ms_ = -kLogEveryMs;
  std::thread thread_;
};

}  // namespace remote
}  // namespace disco

#endif  // DISCO_REMOTE_ACCEPTOR_H_
