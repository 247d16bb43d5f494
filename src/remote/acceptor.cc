// The acceptor thread of disco::Serve (acceptor.h): the listening socket's accept loop, the
// pending handshakes with their deadlines and limits, the back-off after wrong keys, the
// refusals' log lines, and the hand-over of an attached client.
#include "remote/acceptor.h"

#include <disco/log.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

namespace disco {
namespace remote {
namespace {

// Each step of a handshake (the hello, then the proof) is complete within this, or closed.
constexpr int kHandshakeTimeoutMs = 5000;

int64_t NowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}
std::string AddressOf(const std::string& peer) { return peer.substr(0, peer.rfind(':')); }
int64_t BackoffMs(int failures) {
  return std::min<int64_t>(int64_t{Acceptor::kFirstBackoffMs} << (std::max(failures, 1) - 1),
                           Acceptor::kMaxBackoffMs);
}

}  // namespace

Acceptor::Acceptor(Socket* listener, const std::string& key, int ipv4_prefix)
    : listener_(listener), mac_(key), ipv4_prefix_(ipv4_prefix) {
  thread_ = std::thread([this] { Run(); });
}

Acceptor::~Acceptor() {
  stop_ = true;
  thread_.join();
  FlushRefusals(/*now_or_never=*/true);  // the count since the last line, once at the end
}

Socket Acceptor::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return next_.valid(); });
  return std::move(next_);
}

void Acceptor::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  attached_ = false;
}

// The first refusal after a quiet kLogEveryMs is logged as it comes; the rest are counted (per
// network and reason) for FlushRefusals.
void Acceptor::LogRefusal(const Pending& p, const std::string& why, const char* reason) {
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
void Acceptor::FlushRefusals(bool now_or_never) {
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

// The proof of `p` is complete: answer it (or schedule the answer); true when `p` is done.
bool Acceptor::Decide(Pending* p) {
  if (p->handshake.ProofValid(mac_)) return Admit(p);
  return DelayWrongKey(p);
}

// The right key: the client is attached and handed to the serving thread, unless another one is
// (busy). True: `p` is done.
bool Acceptor::Admit(Pending* p) {
  bool busy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy = attached_;
    if (!busy) attached_ = true;
  }
  if (busy) {
    p->handshake.Refuse(HandshakeCode::kBusy);
    LogRefusal(*p, HandshakeCodeName(HandshakeCode::kBusy), "busy");
    return true;
  }
  if (!p->handshake.Accept(mac_)) {
    std::lock_guard<std::mutex> lock(mu_);
    attached_ = false;
    return true;
  }
  DISCO_LOG(INFO) << "disco-serve: client " << p->peer << " attached";
  std::lock_guard<std::mutex> lock(mu_);
  next_ = p->handshake.TakeSocket();
  cv_.notify_all();
  return true;
}

// A wrong key: answered late, later with each failure from this network. True when `p` is done
// (closed unanswered), false while its answer waits.
bool Acceptor::DelayWrongKey(Pending* p) {
  PeerRecord& r = peers_[p->group];
  const int64_t now = NowMs();
  if (now - r.last_failure_ms > kForgetMs) r.failures = 0;
  r.failures = std::min(r.failures + 1, 30);
  r.last_failure_ms = now;
  size_t delayed = 0;
  for (const Pending& q : pending_) delayed += q.group == p->group && q.answer_at_ms >= 0;
  if (delayed >= kMaxDelayedPerPeer) {
    LogRefusal(*p, "wrong key (closed unanswered: too many guesses at once from " + p->group + ")",
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
bool Acceptor::ReadHello(Pending* p) {
  for (;;) {
    switch (p->handshake.Read()) {
      case ServerHandshake::Step::kWaiting:
        return false;
      case ServerHandshake::Step::kGone:
        return true;
      case ServerHandshake::Step::kBadHello: {  // a foreign protocol or another version
        const HandshakeCode code = p->handshake.hello_code();
        p->handshake.Refuse(code);
        LogRefusal(*p, HandshakeCodeName(code),
                   code == HandshakeCode::kBadMagic ? "not disco" : "other versions");
        return true;
      }
      case ServerHandshake::Step::kChallenged:
        p->deadline_ms = NowMs() + kHandshakeTimeoutMs;  // a new step: the proof
        continue;
      case ServerHandshake::Step::kProof:
        return Decide(p);
    }
  }
}

void Acceptor::Run() {
  while (!stop_) {
    FlushRefusals();
    const int64_t now = NowMs();
    ExpireDue(now);
    std::vector<pollfd> fds;
    fds.push_back(pollfd{listener_->fd(), POLLIN, 0});
    int64_t wake = now + 200;
    for (const Pending& p : pending_) {
      // A wrong key waiting for its delayed answer is watched for the peer leaving (its slot
      // among the network's delayed answers is free again at once).
      fds.push_back(
          pollfd{p.handshake.fd(), static_cast<short>(p.answer_at_ms < 0 ? POLLIN : POLLRDHUP), 0});
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

// Answers that are due, and handshakes past their deadline.
void Acceptor::ExpireDue(int64_t now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->answer_at_ms >= 0 && it->answer_at_ms <= now) {
      it->handshake.Refuse(HandshakeCode::kBadKey);
      it = pending_.erase(it);
    } else if (it->answer_at_ms < 0 && it->deadline_ms <= now) {
      LogRefusal(*it, "no complete handshake within " + std::to_string(kHandshakeTimeoutMs) + " ms",
                 "handshakes too slow");
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

// Addresses whose last failure is long past are forgotten (the table stays small).
void Acceptor::ForgetQuietPeers() {
  const int64_t now = NowMs();
  for (auto it = peers_.begin(); it != peers_.end();) {
    it = now - it->second.last_failure_ms > kForgetMs ? peers_.erase(it) : std::next(it);
  }
}

void Acceptor::AcceptNew() {
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
    const std::string peer = c.PeerName();
    pending_.emplace_back(std::move(c));
    Pending& p = pending_.back();
    p.peer = peer;
    p.group = AddressGroup(AddressOf(p.peer), ipv4_prefix_);
    p.deadline_ms = NowMs() + kHandshakeTimeoutMs;
    if (ReadHello(&p)) pending_.pop_back();  // an honest hello is there already
  }
}

}  // namespace remote
}  // namespace disco
