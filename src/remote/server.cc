// The server end of remote sessions, on rank 0 of a job: an acceptor thread that runs handshakes
// (and answers "busy" while a client is attached), and the main thread, which alone touches the
// session (MPI stays in one thread), serving one client's requests at a time.
#include <disco/files.h>
#include <disco/log.h>
#include <disco/remote.h>
#include <disco/worker.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/crypto.h"
#include "core/device_memory.h"
#include "core/env.h"
#include "core/exit_cleanup.h"
#include "core/trace.h"
#include "protocol/graph.h"
#include "protocol/serializer.h"
#include "remote/key.h"
#include "remote/rpc.h"
#include "remote/socket.h"
#include "session/session_impl.h"

namespace disco {
namespace {

using remote::Op;
using remote::Socket;

constexpr int kHandshakeTimeoutMs = 5000;
// The most a refused CopyToWorker0 is read (and dropped) to keep the stream in step.
constexpr size_t kMaxDrainBytes = size_t{64} << 20;
// A client silent this long parks the workers; so does a copy of this many bytes or more (it
// keeps rank 0 on the socket for milliseconds, while workers would spin for the next frame).
constexpr int kParkAfterMs = 20;
constexpr size_t kParkForCopyBytes = size_t{1} << 20;

// Whether `host` resolves to a loopback address (by its address, not its spelling).
// `path` from the root (clients run in other directories).
std::string AbsolutePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[4096];
  return getcwd(cwd, sizeof cwd) != nullptr ? std::string(cwd) + "/" + path : path;
}

bool IsLoopback(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  if (getaddrinfo(host.empty() ? "localhost" : host.c_str(), nullptr, &hints, &res) != 0) {
    return false;
  }
  bool loopback = res != nullptr;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      loopback &= (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      loopback &= IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    }
  }
  freeaddrinfo(res);
  return loopback;
}

void WritePortFile(const std::string& path, int port) {
  // Created beside `path` (O_EXCL, O_NOFOLLOW: a link planted there is not written through), 0600,
  // then renamed onto it.
  try {
    AtomicFile file(path);
    file.Write(std::to_string(port) + "\n");
    file.Commit();
  } catch (const RuntimeError& e) {
    DISCO_THROW(ValueError) << "cannot write the port file '" << path << "': " << e.what();
  }
}

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

  Acceptor(Socket* listener, const std::string& key, int ipv4_prefix)
      : listener_(listener), mac_(key), ipv4_prefix_(ipv4_prefix) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Acceptor() {
    stop_ = true;
    thread_.join();
    FlushRefusals(/*now_or_never=*/true);  // the count since the last line, once at the end
  }

  /// Waits for the next client that passed the handshake.
  Socket Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return next_.valid(); });
    return std::move(next_);
  }
  /// The served client has gone: the next one may come in.
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    attached_ = false;
  }

 private:
  struct Pending {
    Socket sock;
    std::string peer;         // ip:port
    std::string group;        // its network (remote::AddressGroup): failures count per group
    int64_t deadline_ms = 0;  // for the current step
    bool challenged = false;  // the hello was answered with a challenge; the proof comes next
    std::vector<uint8_t> in;  // the bytes of the hello, then of the proof
    uint8_t challenge[remote::kNonceBytes] = {0};
    int64_t answer_at_ms = -1;  // a wrong key waiting for its delayed answer
  };
  struct PeerRecord {
    int failures = 0;
    int64_t last_failure_ms = 0;
  };

  static int64_t NowMs() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
  }
  static std::string AddressOf(const std::string& peer) { return peer.substr(0, peer.rfind(':')); }
  static int64_t BackoffMs(int failures) {
    return std::min<int64_t>(int64_t{kFirstBackoffMs} << (std::max(failures, 1) - 1),
                             kMaxBackoffMs);
  }

  // The first refusal after a quiet kLogEveryMs is logged as it comes; the rest are counted (per
  // network and reason) for FlushRefusals.
  void LogRefusal(const Pending& p, const std::string& why, const char* reason) {
    const int64_t now = NowMs();
    if (unlogged_total_ == 0 && now - last_log_ms_ >= kLogEveryMs) {
      DISCO_LOG(WARN) << "disco-serve: refused " << p.peer << ": " << why;
      last_log_ms_ = now;
      return;
    }
    ++unlogged_[p.group][reason];
    ++unlogged_total_;
  }

  // One line for the refusals counted since the last line, once kLogEveryMs has passed: the
  // networks with the most, each with its reasons (and its wrong keys' current delay).
  void FlushRefusals(bool now_or_never = false) {
    const int64_t now = NowMs();
    if (unlogged_total_ == 0 || (now - last_log_ms_ < kLogEveryMs && !now_or_never)) return;
    std::vector<std::pair<uint64_t, std::string>> groups;
    for (const auto& g : unlogged_) {
      uint64_t n = 0;
      for (const auto& r : g.second) n += r.second;
      groups.emplace_back(n, g.first);
    }
    std::sort(groups.rbegin(), groups.rend());
    std::ostringstream line;
    line << "disco-serve: refused " << unlogged_total_ << " more connections in the last "
         << (now - last_log_ms_ + 500) / 1000 << " s: ";
    const size_t shown = std::min<size_t>(groups.size(), 4);
    for (size_t i = 0; i < shown; ++i) {
      line << (i > 0 ? "; " : "") << groups[i].first << " from " << groups[i].second << " (";
      bool first = true;
      for (const auto& r : unlogged_[groups[i].second]) {
        line << (first ? "" : ", ") << r.second << " " << r.first;
        first = false;
      }
      auto rec = peers_.find(groups[i].second);
      if (rec != peers_.end() && rec->second.failures > 0) {
        line << "; a wrong key from there is now answered after " << BackoffMs(rec->second.failures)
             << " ms";
      }
      line << ")";
    }
    if (groups.size() > shown) line << "; and from " << groups.size() - shown << " more networks";
    DISCO_LOG(WARN) << line.str();
    unlogged_.clear();
    unlogged_total_ = 0;
    last_log_ms_ = now;
  }

  // Sends `n` bytes of an answer (they fit in the socket's empty send buffer); false if the peer
  // is gone.
  static bool Send(Pending* p, const uint8_t* data, size_t n) {
    try {
      p->sock.SendAll(data, n, 100);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }
  // A refusal: its code, and whatever the peer sent beyond what was read is dropped, so that the
  // close does not reset the connection before the peer reads the code.
  static void Refuse(Pending* p, remote::HandshakeCode code) {
    uint8_t c = static_cast<uint8_t>(code);
    Send(p, &c, 1);
    uint8_t sink[4096];
    for (int i = 0; i < 16 && ::recv(p->sock.fd(), sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
    }
  }

  // The proof of `p` is complete: answer it (or schedule the answer); true when `p` is done.
  bool Decide(Pending* p) {
    if (remote::CheckClientProof(mac_, p->challenge, p->in.data())) {
      bool busy;
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy = attached_;
        if (!busy) attached_ = true;
      }
      if (busy) {
        Refuse(p, remote::HandshakeCode::kBusy);
        LogRefusal(*p, remote::HandshakeCodeName(remote::HandshakeCode::kBusy), "busy");
        return true;
      }
      uint8_t answer[remote::kServerProofBytes] = {
          static_cast<uint8_t>(remote::HandshakeCode::kOk)};
      crypto::Digest d = remote::ServerMac(mac_, p->in.data(), p->challenge);
      std::memcpy(answer + 1, d.data(), remote::kMacBytes);
      if (!Send(p, answer, sizeof answer)) {
        std::lock_guard<std::mutex> lock(mu_);
        attached_ = false;
        return true;
      }
      DISCO_LOG(INFO) << "disco-serve: client " << p->peer << " attached";
      std::lock_guard<std::mutex> lock(mu_);
      next_ = std::move(p->sock);
      cv_.notify_all();
      return true;
    }
    // A wrong key: answered late, later with each failure from this network.
    PeerRecord& r = peers_[p->group];
    const int64_t now = NowMs();
    if (now - r.last_failure_ms > kForgetMs) r.failures = 0;
    r.failures = std::min(r.failures + 1, 30);
    r.last_failure_ms = now;
    size_t delayed = 0;
    for (const Pending& q : pending_) delayed += q.group == p->group && q.answer_at_ms >= 0;
    if (delayed >= kMaxDelayedPerPeer) {
      LogRefusal(*p,
                 "wrong key (closed unanswered: too many guesses at once from " + p->group + ")",
                 "wrong keys closed unanswered");
      return true;
    }
    const int64_t delay = BackoffMs(r.failures);
    p->answer_at_ms = now + delay;
    p->deadline_ms = p->answer_at_ms + 1000;
    LogRefusal(*p,
               "wrong key (failure " + std::to_string(r.failures) + " from " + p->group +
                   "; answered after " + std::to_string(delay) + " ms)",
               "wrong keys");
    return false;
  }

  // Reads what `p` has sent: its hello, answered with a challenge at once (or refused), then
  // its proof of the key (Decide). True when `p` is done (answered, closed or failed).
  bool ReadHello(Pending* p) {
    for (;;) {
      const size_t need = p->challenged ? remote::kClientProofBytes : remote::kHelloHeadBytes;
      if (p->in.size() == need) {
        if (p->challenged) return Decide(p);
        remote::HandshakeCode code = remote::CheckHello(p->in.data());
        if (code != remote::HandshakeCode::kOk) {  // a foreign protocol or another version
          Refuse(p, code);
          LogRefusal(*p, remote::HandshakeCodeName(code),
                     code == remote::HandshakeCode::kBadMagic ? "not disco" : "other versions");
          return true;
        }
        uint8_t challenge[remote::kChallengeBytes] = {
            static_cast<uint8_t>(remote::HandshakeCode::kOk)};
        crypto::RandomBytes(p->challenge, sizeof p->challenge);
        std::memcpy(challenge + 1, p->challenge, sizeof p->challenge);
        if (!Send(p, challenge, sizeof challenge)) return true;
        p->challenged = true;
        p->in.clear();
        p->deadline_ms = NowMs() + kHandshakeTimeoutMs;  // a new step: the proof
        continue;
      }
      uint8_t buf[remote::kClientProofBytes];
      ssize_t k = ::recv(p->sock.fd(), buf, need - p->in.size(), 0);
      if (k > 0) {
        p->in.insert(p->in.end(), buf, buf + k);
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
      return true;  // closed or failed before its hello or proof was complete
    }
  }

  void Run() {
    while (!stop_) {
      FlushRefusals();
      const int64_t now = NowMs();
      // Answers that are due, and handshakes past their deadline.
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->answer_at_ms >= 0 && it->answer_at_ms <= now) {
          Refuse(&*it, remote::HandshakeCode::kBadKey);
          it = pending_.erase(it);
        } else if (it->answer_at_ms < 0 && it->deadline_ms <= now) {
          LogRefusal(*it,
                     "no complete handshake within " + std::to_string(kHandshakeTimeoutMs) + " ms",
                     "handshakes too slow");
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
      std::vector<pollfd> fds;
      fds.push_back(pollfd{listener_->fd(), POLLIN, 0});
      int64_t wake = now + 200;
      for (const Pending& p : pending_) {
        // A wrong key waiting for its delayed answer is watched for the peer leaving (its slot
        // among the network's delayed answers is free again at once).
        fds.push_back(
            pollfd{p.sock.fd(), static_cast<short>(p.answer_at_ms < 0 ? POLLIN : POLLRDHUP), 0});
        wake = std::min(wake, p.answer_at_ms >= 0 ? p.answer_at_ms : p.deadline_ms);
      }
      int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wake - now)));
      if (rc < 0 && errno != EINTR) {
        DISCO_LOG_EVERY_N_SEC(WARN, 10) << "disco-serve: poll failed: " << std::strerror(errno);
        continue;
      }
      if (rc <= 0) continue;
      // Hellos that arrived (before accepting more: the pending list may shrink).
      std::vector<bool> done(pending_.size(), false);
      size_t i = 0;
      for (Pending& p : pending_) {
        const short ev = fds[i + 1].revents;
        if (p.answer_at_ms < 0 && (ev & (POLLIN | POLLHUP | POLLERR)) != 0) {
          done[i] = ReadHello(&p);
        } else if (p.answer_at_ms >= 0 && (ev & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
          done[i] = true;  // gone before its delayed answer: nothing to wait for
        }
        ++i;
      }
      i = 0;
      for (auto it = pending_.begin(); it != pending_.end(); ++i) {
        it = done[i] ? pending_.erase(it) : std::next(it);
      }
      if ((fds[0].revents & POLLIN) != 0) AcceptNew();
      if (peers_.size() > 4096) ForgetQuietPeers();
    }
  }

  // Addresses whose last failure is long past are forgotten (the table stays small).
  void ForgetQuietPeers() {
    const int64_t now = NowMs();
    for (auto it = peers_.begin(); it != peers_.end();) {
      it = now - it->second.last_failure_ms > kForgetMs ? peers_.erase(it) : std::next(it);
    }
  }

  void AcceptNew() {
    for (int n = 0; n < 64; ++n) {
      Socket c;
      try {
        c = listener_->Accept(0);
      } catch (const std::exception& e) {
        DISCO_LOG(WARN) << "disco-serve: accept failed: " << e.what();
        return;
      }
      if (!c.valid()) return;
      if (pending_.size() >= kMaxPending) {  // the oldest handshake makes room
        auto oldest = std::find_if(pending_.begin(), pending_.end(),
                                   [](const Pending& p) { return p.answer_at_ms < 0; });
        if (oldest == pending_.end()) oldest = pending_.begin();
        LogRefusal(*oldest, "handshake not complete when room was needed",
                   "handshakes closed to make room");
        pending_.erase(oldest);
      }
      Pending p;
      p.peer = c.PeerName();
      p.group = remote::AddressGroup(AddressOf(p.peer), ipv4_prefix_);
      p.deadline_ms = NowMs() + kHandshakeTimeoutMs;
      p.sock = std::move(c);
      pending_.push_back(std::move(p));
      if (ReadHello(&pending_.back())) pending_.pop_back();  // an honest hello is there already
    }
  }

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

// One attached client: its registers, its requests, its answers.
class ClientConnection {
 public:
  /// `release` lets the next client in; a client that detaches hears back only after it ran,
  /// so that it may attach again at once.
  ClientConnection(Session* session, Socket sock, const ServeOptions& options,
                   std::function<void()> release)
      : session_(session),
        impl_(session->impl()),
        sock_(std::move(sock)),
        peer_(sock_.PeerName()),
        options_(options),
        release_(std::move(release)) {}

  /// Serves requests until the client leaves; returns true when it asked to end the job (with
  /// `*exit_code`).
  bool Serve(int* exit_code) {
    for (;;) {
      const int idle_ms = options_.idle_timeout_s > 0 ? options_.idle_timeout_s * 1000 : -1;
      try {
        // A client that pauses: workers park (sleep instead of spinning) until its next request.
        const int first_ms = idle_ms < 0 ? kParkAfterMs : std::min(kParkAfterMs, idle_ms);
        bool ready = sock_.WaitReadable(first_ms);
        if (!ready) {
          if (!impl_->capturing()) impl_->ParkWorkers();  // (a capture sends them nothing)
          ready = sock_.WaitReadable(idle_ms < 0 ? -1 : idle_ms - first_ms);
        }
        if (!ready) {
          DISCO_LOG(WARN) << "disco-serve: client " << peer_ << " idle for "
                          << options_.idle_timeout_s << " s: disconnected";
          return false;
        }
        remote::RecvPacket(&sock_, &in_, options_.max_packet_bytes, options_.request_timeout_ms);
      } catch (const std::exception& e) {
        // A closed, slow or lying peer: the stream cannot be trusted past this point.
        DISCO_LOG(WARN) << "disco-serve: client " << peer_ << " dropped: " << e.what();
        return false;
      }
      try {
        Handle();
      } catch (const std::exception& e) {
        DISCO_LOG(WARN) << "disco-serve: client " << peer_ << " dropped: " << e.what();
        return false;
      }
      if (stop_) {
        *exit_code = exit_code_;
        return end_job_;
      }
    }
  }

  ~ClientConnection() {
    CleanUp();
    Release();
    DISCO_LOG(INFO) << "disco-serve: client " << peer_ << " detached";
  }

 private:
  /// Lets the next client in, once: after a detach has done so, the next client may already be
  /// attached, and a second release would let a third in beside it.
  void Release() {
    if (released_) return;
    released_ = true;
    release_();
  }

  /// Frees the client's registers on every worker and settles the errors it never observed.
  void CleanUp() {
    if (cleaned_up_) return;
    cleaned_up_ = true;
    if (impl_ != nullptr && impl_->capturing()) {
      try {
        impl_->EndCapture(/*discard=*/true);
      } catch (const std::exception&) {
        // the client left in the middle of a capture: discarded, as it must be
      }
    }
    graphs_.clear();
    owned_.clear();
    try {
      session_->SyncAll();
    } catch (const RemoteError& e) {
      DISCO_LOG(WARN) << "disco-serve: client " << peer_
                      << " left remote errors it never observed: " << e.what();
    } catch (const std::exception& e) {
      DISCO_LOG(ERROR) << "disco-serve: cleaning up after client " << peer_ << ": " << e.what();
    }
  }

  // Decodes and runs one request and sends its answer. Socket failures propagate (the client is
  // dropped); every other error becomes an error answer and the client may go on.
  void Handle() {
    const int64_t trace_start = trace::Enabled() ? trace::NowNs() : -1;
    bool ok = true;
    try {
      remote::DecodeRequest(in_.data(), in_.size(), &req_);
      for (int64_t reg : req_.frees) owned_.erase(reg);
      std::vector<Any> results = Run(req_.op, &req_.operands);
      remote::EncodeOkReply(&out_, results.data(), results.size());  // may refuse a value
    } catch (const IoError&) {
      throw;
    } catch (const std::exception& e) {
      ok = false;
      remote::EncodeErrorReply(&out_, e);
    }
    if (ok) {
      if (out_.size() + sizeof(uint64_t) > reply_limit_) {
        std::string what = "the answer to " + std::string(remote::OpName(req_.op)) + " takes " +
                           std::to_string(out_.size()) + " bytes, over the client's limit of " +
                           std::to_string(reply_limit_) +
                           " (read large tensors with CopyFromWorker0)";
        remote::EncodeErrorReply(&out_, ValueError(detail::RankPrefix() + what));
        ok = false;
      }
    }
    if (ok && req_.op == Op::kCopyFrom) {  // the answer, then the data, first chunk glued on
      remote::SendChunks(&sock_, copy_.data(), copy_.nbytes(), ChunkLimit(),
                         options_.request_timeout_ms, &out_);
    } else {
      remote::SendPacket(&sock_, out_.data(), out_.size(), options_.request_timeout_ms);
    }
    if (trace_start >= 0) {
      const char* op = remote::OpName(req_.op);
      trace::Record(trace::Kind::kRemote, op, std::strlen(op), trace_start, trace::NowNs(),
                    static_cast<int64_t>(in_.size()),
                    static_cast<int64_t>(out_.size() +
                                         (ok && req_.op == Op::kCopyFrom ? copy_.nbytes() : 0)));
    }
    copy_ = Tensor();
    // A large request or answer does not pin its buffers for the rest of the connection.
    in_.ReleaseAbove(protocol::kKeepBufferBytes);
    out_.ReleaseAbove(protocol::kKeepBufferBytes);
  }

  // Socket failures inside a request (chunks) are not the client's mistakes to answer: they end
  // the connection.
  struct IoError : RuntimeError {
    using RuntimeError::RuntimeError;
  };

  std::vector<Any> Run(Op op, std::vector<Any>* operands) {
    std::vector<Any>& a = *operands;
    auto expect = [&](size_t n) {
      const bool variadic = op == Op::kCall || op == Op::kReplayGraph || op == Op::kFreeGraph;
      DISCO_CHECK(a.size() == n || (variadic && a.size() >= n), ProtocolError)
          << remote::OpName(op) << " takes " << n << " operands, got " << a.size();
    };
    switch (op) {
      case Op::kInfo: {
        expect(2);
        int64_t reply_limit = a[0].cast<int64_t>(), chunk = a[1].cast<int64_t>();
        DISCO_CHECK(reply_limit > 0 && chunk > static_cast<int64_t>(remote::ChunkOverheadBytes()),
                    ValueError)
            << "Info: a reply limit of " << reply_limit << " bytes and chunks of " << chunk
            << " bytes leave no room for data";
        reply_limit_ = static_cast<size_t>(reply_limit);
        chunk_limit_ = std::min(static_cast<size_t>(chunk), options_.max_packet_bytes);
        return {Any(session_->num_workers()), Any(session_->num_groups()),
                Any(static_cast<int64_t>(options_.max_packet_bytes))};
      }
      case Op::kGetGlobalFunc:
        expect(1);
        return {Own(session_->GetGlobalFunc(a[0].cast<std::string>()))};
      case Op::kCall: {
        expect(1);
        // Inside a capture, an argument may be one of its placeholders (the session checks it).
        Resolve(&a[0], "CallPacked", /*placeholder_ok=*/false);
        for (size_t i = 1; i < a.size(); ++i) Resolve(&a[i], "CallPacked", impl_->capturing());
        DRef func = a[0].cast<DRef>();
        return {Own(session_->CallWithMovedArgs(func, a.data() + 1, a.size() - 1))};
      }
      case Op::kCopyTo:
        expect(4);
        CopyTo(a);
        return {};
      case Op::kCopyFrom:
        expect(4);
        copy_ = CheckedTensor(a, "CopyFromWorker0");
        if (copy_.nbytes() >= kParkForCopyBytes && !impl_->capturing()) impl_->ParkWorkers();
        if (!memory::IsHost(copy_.device())) {  // stage device memory on the host
          Tensor host = Tensor::Empty(copy_.shape(), copy_.dtype());
          host.CopyFrom(copy_);
          copy_ = host;
        }
        return {};
      case Op::kSyncWorker:
        expect(1);
        session_->SyncWorker(WorkerOperand(a[0], "SyncWorker"));
        return {};
      case Op::kSyncAll:
        expect(0);
        session_->SyncAll();
        return {};
      case Op::kDebugGet: {
        expect(2);
        int64_t reg = OwnedReg(a[0], "DebugGetFromRemote");
        Any value = session_->DebugGetFromRemote(reg, WorkerOperand(a[1], "DebugGetFromRemote"));
        // Worker 0 is in process for the job, not for the client: its objects stay here too.
        DISCO_CHECK(
            value.type_code() != TypeCode::kObject && value.type_code() != TypeCode::kFunction,
            ValueError)
            << "DebugGetFromRemote: register " << reg << " on worker 0 holds a "
            << value.type_name() << ", which cannot be read remotely";
        return {std::move(value)};
      }
      case Op::kDebugSet:
        expect(3);
        Resolve(&a[2], "DebugSetRegister", /*placeholder_ok=*/false);
        session_->DebugSetRegister(OwnedReg(a[0], "DebugSetRegister"), a[2],
                                   WorkerOperand(a[1], "DebugSetRegister"));
        return {};
      case Op::kCaptureBegin: {
        expect(1);
        std::vector<Any> ids;
        const int64_t inputs = a[0].cast<int64_t>();
        DISCO_CHECK(inputs >= 0 && inputs <= protocol::kMaxGraphInputs, ValueError)
            << "Capture: " << inputs << " inputs (0 to " << protocol::kMaxGraphInputs << ")";
        for (const Any& p : impl_->BeginCapture(static_cast<int>(inputs))) {
          ids.push_back(Any(p.cast<DRef>().reg_id()));
        }
        return ids;
      }
      case Op::kCaptureEnd: {
        expect(1);
        Graph g = impl_->EndCapture(a[0].cast<bool>());
        graphs_[g.id()] = g;
        return {Any(g.id()), Any(static_cast<int64_t>(g.num_calls()))};
      }
      case Op::kReplayGraph: {
        expect(1);
        auto it = graphs_.find(a[0].cast<int64_t>());
        DISCO_CHECK(it != graphs_.end(), ValueError)
            << "Graph::Replay: graph " << a[0].ToString() << " is not held by this client";
        for (size_t i = 1; i < a.size(); ++i) Resolve(&a[i], "Graph::Replay", impl_->capturing());
        it->second.Replay(std::vector<Any>(a.begin() + 1, a.end()));
        return {};
      }
      case Op::kFreeGraph:
        for (const Any& id : a) graphs_.erase(id.cast<int64_t>());
        return {};
      case Op::kDetach:
        expect(0);
        stop_ = true;
        CleanUp();
        Release();
        return {};
      case Op::kShutdownJob: {
        expect(1);
        int64_t code = a[0].cast<int64_t>();
        DISCO_CHECK(code >= 0 && code <= 255, ValueError)
            << "shutdown: exit code " << code << " is outside 0..255";
        stop_ = true;
        end_job_ = true;
        exit_code_ = static_cast<int>(code);
        return {};
      }
    }
    DISCO_THROW(ProtocolError) << "unknown request operation " << static_cast<int>(op);
  }

  // Reads a kCopyTo's chunks straight into worker 0's tensor. A copy that cannot be honoured
  // still reads (and drops) its chunks, so the stream stays in step, then answers the error; one
  // that announces more than kMaxDrainBytes is not read for nothing: the client is dropped.
  void CopyTo(const std::vector<Any>& a) {
    size_t nbytes = 0;
    try {
      int64_t n = a[3].cast<int64_t>();
      DISCO_CHECK(n >= 0, ValueError) << "a copy of " << n << " bytes";
      nbytes = static_cast<size_t>(n);
    } catch (const std::exception& e) {  // the chunks that follow cannot be told apart: drop
      throw IoError(std::string("CopyToWorker0 of unknown size: ") + e.what());
    }
    Tensor dst;
    try {
      dst = CheckedTensor(a, "CopyToWorker0");
    } catch (const std::exception& e) {
      if (nbytes > kMaxDrainBytes) {
        throw IoError(std::string(e.what()) + "; the " + std::to_string(nbytes) +
                      " bytes announced are not read for nothing: connection closed");
      }
      Io([&] { remote::RecvChunks(&sock_, nullptr, nbytes, ChunkLimit(), Deadline()); });
      throw;
    }
    if (nbytes >= kParkForCopyBytes && !impl_->capturing()) impl_->ParkWorkers();
    if (memory::IsHost(dst.device())) {
      Io([&] { remote::RecvChunks(&sock_, dst.data(), nbytes, ChunkLimit(), Deadline()); });
    } else {  // stage on the host, then one copy to the device
      Tensor host = Tensor::Empty(dst.shape(), dst.dtype());
      Io([&] { remote::RecvChunks(&sock_, host.data(), nbytes, ChunkLimit(), Deadline()); });
      dst.CopyFrom(host);
    }
  }

  // Worker 0's tensor in the client's register a[0], checked against the dtype, shape and byte
  // count of the client's host tensor (a[1], a[2], a[3]).
  Tensor CheckedTensor(const std::vector<Any>& a, const char* what) {
    DLDataType dtype = a[1].cast<DLDataType>();
    Shape shape = a[2].cast<Shape>();
    Tensor t = impl_->Worker0Tensor(Owned(a[0], what), what);
    DISCO_CHECK(t.dtype() == dtype, ValueError)
        << what << ": dtype mismatch: remote tensor " << DataTypeToString(t.dtype())
        << ", host tensor " << DataTypeToString(dtype);
    DISCO_CHECK(t.shape() == shape, ValueError)
        << what << ": shape mismatch: remote tensor " << t.shape().ToString() << ", host tensor "
        << shape.ToString();
    DISCO_CHECK(static_cast<int64_t>(t.nbytes()) == a[3].cast<int64_t>(), ValueError)
        << what << ": the remote tensor holds " << t.nbytes() << " bytes, the host tensor "
        << a[3].cast<int64_t>();
    return t;
  }

  template <typename F>
  void Io(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw IoError(e.what());
    }
  }

  int Deadline() const { return options_.request_timeout_ms; }
  size_t ChunkLimit() const { return chunk_limit_; }

  Any Own(DRef ref) {
    int64_t reg = ref.reg_id();
    owned_[reg] = std::move(ref);
    return Any(reg);
  }

  const DRef& Owned(const Any& v, const char* what) const {
    int64_t reg = v.type_code() == TypeCode::kDRef ? v.cast<DRef>().reg_id() : v.cast<int64_t>();
    auto it = owned_.find(reg);
    DISCO_CHECK(it != owned_.end(), ValueError)
        << what << ": register " << reg << " is not held by this client";
    return it->second;
  }
  int64_t OwnedReg(const Any& v, const char* what) const { return Owned(v, what).reg_id(); }

  // A DRef operand names a register by id: it becomes the server's own DRef for it. An id the
  // client does not hold is refused at once, placeholders too unless `placeholder_ok` (a call's
  // argument inside a capture: the session checks that it is one of that capture's inputs).
  void Resolve(Any* v, const char* what, bool placeholder_ok) const {
    if (v->type_code() != TypeCode::kDRef) return;
    DRef ref = v->cast<DRef>();
    if (!ref.defined()) return;  // an empty DRef stays empty (and is refused where it matters)
    const bool placeholder = detail::PlaceholderIndex(*v) >= 0;
    if (placeholder_ok && placeholder) return;
    DISCO_CHECK(!placeholder || owned_.count(ref.reg_id()) != 0, ValueError)
        << what << ": register " << ref.reg_id() << " is not held by this client (ids from 2^62 "
        << "are placeholders of a capture: arguments of calls inside that capture only)";
    *v = Any(Owned(*v, what));
  }

  // A worker id operand, checked as the int64 it came as (a narrowing first would wrap it).
  int WorkerOperand(const Any& v, const char* what) const {
    const int64_t id = v.cast<int64_t>();
    DISCO_CHECK(id >= 0 && id < session_->num_workers(), ValueError)
        << what << ": worker id " << id << " is out of range [0, " << session_->num_workers()
        << ")";
    return static_cast<int>(id);
  }

  Session* session_;
  detail::SessionImpl* impl_;
  Socket sock_;
  std::string peer_;
  const ServeOptions& options_;
  std::function<void()> release_;
  bool cleaned_up_ = false;
  bool released_ = false;
  size_t reply_limit_ = size_t{1} << 30;
  size_t chunk_limit_ = size_t{1} << 20;
  bool stop_ = false;  // the client detached or ended the job
  bool end_job_ = false;
  int exit_code_ = 0;
  std::unordered_map<int64_t, DRef> owned_;
  std::unordered_map<int64_t, Graph> graphs_;  // the client's graphs, by id
  protocol::ByteBuffer in_, out_;
  remote::Request req_;
  Tensor copy_;
};

// ---- The generated key file on every rank ------------------------------------------------------
// Rank 0 alone cannot promise to remove it: MPICH's hydra SIGKILLs every rank once the first one
// exits on the launcher's SIGTERM or SIGINT, often before rank 0 has run its handler. So every rank
// registers the file (with its content: a rank on another node, or any rank after the job served,
// leaves alone a file that another server wrote at the same path), and the first rank the signal
// ends removes it before its exit lets the launcher kill the others.

// Registers `path` for removal on this rank's abnormal exit, while it holds `content`.
void GuardKeyFile(const std::string& path, const std::string& content) {
  if (!exit_cleanup::RegisterFile(path, content)) {
    DISCO_LOG(WARN) << "disco-serve: the key file '" << path
                    << "' cannot be registered for removal on a signal (its path is too long, "
                       "or too many files are registered): it may outlive a killed job";
  }
}

// Run by every worker: the key file of the job's current server (one at a time: Serve again
// replaces it). Worker 0 is rank 0, which guards the file itself.
constexpr char kGuardKeyFileFunction[] = "disco.serve.guard_key_file";
DISCO_REGISTER_GLOBAL(kGuardKeyFileFunction)
    .set_body_typed(
        [](std::string path, std::string content) {
          if (ThisWorker().worker_id == 0) return;
          static std::string guarded;
          if (!guarded.empty()) exit_cleanup::UnregisterFile(guarded);
          guarded = path;
          GuardKeyFile(path, content);
        },
        {"path", "content"});

// Every worker guards the key file before a client can learn of the server (the port file).
void GuardKeyFileOnEveryRank(Session& session, const std::string& path,
                             const std::string& content) {
  session.CallPacked(session.GetGlobalFunc(kGuardKeyFileFunction), path, content);
  session.SyncAll();
}

}  // namespace

int Serve(Session& session, const ServeOptions& options) {
  DISCO_CHECK(session.impl() != nullptr, ValueError)
      << "Serve needs the job's own session (rank 0 of disco::Main), not a remote one";
  DISCO_CHECK(options.max_packet_bytes > remote::ChunkOverheadBytes() + 1024, ValueError)
      << "Serve: max_packet_bytes " << options.max_packet_bytes << " is too small";
  // Never without a key: a client with the key can run any code as the job's owner (it can load
  // libraries), and loopback is shared by every user of the machine.
  std::string key = options.key;
  if (key.empty()) key = env::GetString("DISCO_SERVE_KEY");
  DISCO_CHECK(key.empty() || key.size() >= remote::kMinKeyChars, ValueError)
      << "Serve: the key has " << key.size() << " characters; use at least " << remote::kMinKeyChars
      << " (or none: a random key is generated and written to a file "
      << "only you can read)";
  Socket listener = Socket::Listen(options.host, options.port, /*backlog=*/64);
  int port = listener.port();
  std::string key_file;
  // The generated key file goes when the server ends: by this destructor, or, when the job ends
  // without running it (SIGTERM or SIGINT, a fatal error, the watchdog), by core/exit_cleanup.h
  // on whichever rank ends first (GuardKeyFileOnEveryRank).
  struct RemoveKeyFile {
    std::string path;
    ~RemoveKeyFile() {
      if (path.empty()) return;
      unlink(path.c_str());
      exit_cleanup::UnregisterFile(path);
    }
  } remove_key_file;
  if (key.empty()) {
    key = remote::GenerateKey();
    key_file = options.key_file.empty() ? remote::DefaultKeyFile(port) : options.key_file;
    remote::WriteKeyFile(key_file, key);
    remove_key_file.path = AbsolutePath(key_file);
    GuardKeyFile(remove_key_file.path, remote::KeyFileContent(key));
    GuardKeyFileOnEveryRank(session, remove_key_file.path, remote::KeyFileContent(key));
  }
  if (!options.port_file.empty()) WritePortFile(options.port_file, port);
  // A client that stalls inside a request (or stops taking its reply) holds the whole job: with
  // DISCO_TIMEOUT set, it is dropped once no byte moved for that long, if that is sooner.
  ServeOptions per_client = options;
  const int64_t timeout_s = session.impl()->config().timeout_s;
  if (timeout_s > 0 && timeout_s < INT32_MAX / 1000 &&
      (per_client.request_timeout_ms <= 0 || per_client.request_timeout_ms > timeout_s * 1000)) {
    per_client.request_timeout_ms = static_cast<int>(timeout_s * 1000);
  }
  std::printf("disco-serve: listening on %s:%d, %d workers in %d groups\n", options.host.c_str(),
              port, session.num_workers(), session.num_groups());
  if (!key_file.empty()) {
    std::printf(
        "disco-serve: no key was given: clients of this user find the generated key in %s "
        "(readable by you only; removed when the job ends)\n",
        AbsolutePath(key_file).c_str());
  }
  if (!IsLoopback(options.host)) {
    std::printf(
        "disco-serve: %s is not loopback: the data travel in clear text (an "
        "SSH tunnel to a loopback server keeps them private)\n",
        options.host.c_str());
  }
  std::fflush(stdout);

  Acceptor acceptor(&listener, key,
                    static_cast<int>(env::GetInt("DISCO_SERVE_PEER_PREFIX", 8, 32)));
  for (int served = 0; options.max_clients == 0 || served < options.max_clients; ++served) {
    int exit_code = -1;
    bool end_job;
    session.impl()->ParkWorkers();  // no client: workers sleep until one comes
    {
      ClientConnection client(&session, acceptor.Next(), per_client, [&] { acceptor.Release(); });
      end_job = client.Serve(&exit_code);
    }
    if (end_job) {
      DISCO_LOG(INFO) << "disco-serve: a client ended the job with exit code " << exit_code;
      return exit_code;
    }
  }
  return 0;
}

}  // namespace disco
