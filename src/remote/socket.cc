#include "remote/socket.h"

#include <arpa/inet.h>
#include <disco/error.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace disco {
namespace remote {
namespace {

std::string Errno() { return std::strerror(errno); }

sockaddr_in Resolve(const std::string& host, int port) {
  DISCO_CHECK(port >= 0 && port <= 65535, ValueError) << "port " << port << " is out of range";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string h = host.empty() || host == "localhost" ? "127.0.0.1" : host;
  if (inet_pton(AF_INET, h.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  int rc = getaddrinfo(h.c_str(), nullptr, &hints, &res);
  DISCO_CHECK(rc == 0 && res != nullptr, ValueError)
      << "cannot resolve host '" << host << "': " << gai_strerror(rc);
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  DISCO_CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, RuntimeError)
      << "fcntl(O_NONBLOCK) failed: " << Errno();
}

int64_t NowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    ahead_ = std::move(other.ahead_);
    ahead_pos_ = other.ahead_pos_;
    ahead_len_ = other.ahead_len_;
    other.fd_ = -1;
    other.ahead_pos_ = other.ahead_len_ = 0;
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ahead_pos_ = ahead_len_ = 0;
}

std::string Socket::PeerName() const {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "(unknown peer)";
  char ip[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

int Socket::port() const {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  DISCO_CHECK(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0, RuntimeError)
      << "getsockname failed: " << Errno();
  return ntohs(addr.sin_port);
}

Socket Socket::Listen(const std::string& host, int port, int backlog) {
  sockaddr_in addr = Resolve(host, port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  DISCO_CHECK(s.valid(), RuntimeError) << "socket() failed: " << Errno();
  int one = 1;
  setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  DISCO_CHECK(::bind(s.fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, RuntimeError)
      << "cannot listen on " << host << ":" << port << ": " << Errno();
  DISCO_CHECK(::listen(s.fd_, backlog) == 0, RuntimeError) << "listen failed: " << Errno();
  SetNonBlocking(s.fd_);
  return s;
}

Socket Socket::Connect(const std::string& host, int port, int timeout_ms) {
  sockaddr_in addr = Resolve(host, port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  DISCO_CHECK(s.valid(), RuntimeError) << "socket() failed: " << Errno();
  SetNonBlocking(s.fd_);
  int rc = ::connect(s.fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc != 0) {
    DISCO_CHECK(errno == EINPROGRESS, RuntimeError)
        << "cannot connect to " << host << ":" << port << ": " << Errno();
    s.WaitFor(POLLOUT, timeout_ms, "the connection");
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    DISCO_CHECK(err == 0, RuntimeError)
        << "cannot connect to " << host << ":" << port << ": " << std::strerror(err);
  }
  int one = 1;
  setsockopt(s.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(s.fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return s;
}

Socket Socket::Accept(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  int rc = ::poll(&p, 1, timeout_ms);
  DISCO_CHECK(rc >= 0 || errno == EINTR, RuntimeError) << "poll failed: " << Errno();
  if (rc <= 0) return Socket();
  Socket c(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
  if (!c.valid()) return Socket();  // the client went away between poll and accept
  SetNonBlocking(c.fd_);
  int one = 1;
  setsockopt(c.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(c.fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return c;
}

static int64_t DeadlineAfter(int timeout_ms) { return timeout_ms < 0 ? -1 : NowMs() + timeout_ms; }

static int TimeLeftMs(int64_t deadline) {
  if (deadline < 0) return kNoTimeout;
  return static_cast<int>(std::max<int64_t>(0, deadline - NowMs()));
}

void Socket::WaitFor(short events, int timeout_ms, const char* what) {
  WaitUntil(events, DeadlineAfter(timeout_ms), timeout_ms, what);
}

void Socket::WaitUntil(short events, int64_t deadline, int timeout_ms, const char* what,
                       bool progress) {
  for (;;) {
    int64_t left = deadline < 0 ? -1 : deadline - NowMs();
    DISCO_CHECK(deadline < 0 || left > 0, RuntimeError)
        << "timed out after " << timeout_ms << " ms"
        << (progress ? " without progress (plus 1 s per MiB still to move, at most as long again)"
                     : "")
        << " waiting for " << what;
    pollfd p{fd_, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    DISCO_CHECK(rc >= 0, RuntimeError) << "poll failed: " << Errno();
    if (rc > 0) return;
  }
}

void Socket::SendAll(const void* data, size_t n, int timeout_ms) {
  iovec iov[1] = {{const_cast<void*>(data), n}};
  SendAllV(iov, 1, timeout_ms);
}

namespace {

// The deadline of a transfer with `remaining` bytes still to move, from now (-1: none).
int64_t ProgressDeadline(int timeout_ms, size_t remaining) {
  if (timeout_ms < 0) return -1;
  // The allowance for what is still to move is at most the timeout again: a peer that announced
  // a huge packet and went silent is still given up on within twice the timeout.
  const int64_t allowance = static_cast<int64_t>(remaining) * 1000 / kMinBytesPerSecond;
  return NowMs() + timeout_ms + std::min<int64_t>(allowance, timeout_ms);
}

}  // namespace

void Socket::SendAllV(iovec* iov, int count, int timeout_ms) {
  DISCO_CHECK(valid(), RuntimeError) << "send on a closed connection";
  int first = 0;
  size_t remaining = 0;
  for (int i = 0; i < count; ++i) remaining += iov[i].iov_len;
  // Counted afresh whenever bytes move: a slow peer is waited for, a silent one is not.
  int64_t deadline = ProgressDeadline(timeout_ms, remaining);
  while (first < count && iov[first].iov_len == 0) ++first;
  while (first < count) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = static_cast<size_t>(count - first);
    ssize_t k = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (k >= 0) {
      size_t done = static_cast<size_t>(k);
      remaining -= done;
      if (done > 0) deadline = ProgressDeadline(timeout_ms, remaining);
      while (first < count && done >= iov[first].iov_len) {
        done -= iov[first].iov_len;
        ++first;
      }
      if (first < count) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + done;
        iov[first].iov_len -= done;
      }
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      WaitUntil(POLLOUT, deadline, timeout_ms, "the peer to take more data", /*progress=*/true);
    } else {
      DISCO_THROW(RuntimeError) << "send failed: " << Errno();
    }
  }
}

void Socket::SendAll2(const void* head, size_t head_n, const void* body, size_t body_n,
                      int timeout_ms) {
  iovec iov[2] = {{const_cast<void*>(head), head_n}, {const_cast<void*>(body), body_n}};
  SendAllV(iov, 2, timeout_ms);
}

bool Socket::WaitReadable(int timeout_ms) {
  if (ahead_pos_ < ahead_len_) return true;
  // A signal (the watchdog samples an idle controller's stack once a second) must not restart the
  // whole wait: what is left of it is waited for.
  const int64_t deadline = DeadlineAfter(timeout_ms);
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline < 0 ? -1 : TimeLeftMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    DISCO_CHECK(rc >= 0, RuntimeError) << "poll failed: " << Errno();
    return rc > 0;
  }
}

ssize_t Socket::RecvSome(void* dst, size_t n) {
  for (;;) {
    ssize_t k = ::recv(fd_, dst, n, 0);
    if (k >= 0) return k;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
    DISCO_THROW(RuntimeError) << "receive failed: " << Errno();
  }
}

void Socket::RecvAll(void* data, size_t n, int timeout_ms, const char* what) {
  Recv(data, n, timeout_ms, /*one_deadline=*/false, what);
}

void Socket::RecvAllWithin(void* data, size_t n, int timeout_ms, const char* what) {
  Recv(data, n, timeout_ms, /*one_deadline=*/true, what);
}

void Socket::Recv(void* data, size_t n, int timeout_ms, bool one_deadline, const char* what) {
  DISCO_CHECK(valid(), RuntimeError) << "receive on a closed connection";
  // One deadline for all n bytes (a peer that drips one byte at a time cannot stretch it), or one
  // counted afresh whenever bytes come (a slow peer is waited for, a silent one is not).
  int64_t deadline = one_deadline ? DeadlineAfter(timeout_ms) : ProgressDeadline(timeout_ms, n);
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    if (ahead_pos_ < ahead_len_) {  // bytes read ahead earlier come first
      size_t k = std::min(n - got, ahead_len_ - ahead_pos_);
      std::memcpy(p + got, ahead_.get() + ahead_pos_, k);
      ahead_pos_ += k;
      got += k;
      continue;
    }
    bool direct = n - got >= kAheadBytes;
    if (!direct && !ahead_) ahead_.reset(new char[kAheadBytes]);
    ssize_t k = direct ? RecvSome(p + got, n - got) : RecvSome(ahead_.get(), kAheadBytes);
    if (k > 0) {
      if (direct) {
        got += static_cast<size_t>(k);
      } else {
        ahead_pos_ = 0;
        ahead_len_ = static_cast<size_t>(k);
      }
      if (!one_deadline) deadline = ProgressDeadline(timeout_ms, n - got);
    } else if (k == 0) {
      DISCO_THROW(RuntimeError) << "the peer closed the connection after " << got << " of " << n
                                << " bytes of " << what;
    } else {
      WaitUntil(POLLIN, deadline, timeout_ms, what, /*progress=*/!one_deadline);
    }
  }
}

bool ParseHostPort(const std::string& text, std::string* host, int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return false;
  char* end = nullptr;
  long p = std::strtol(text.c_str() + colon + 1, &end, 10);  // NOLINT(runtime/int)
  if (*end != '\0' || p <= 0 || p > 65535) return false;
  *host = text.substr(0, colon);
  *port = static_cast<int>(p);
  return true;
}

std::string AddressGroup(const std::string& ip, int ipv4_prefix) {
  in_addr v4{};
  in6_addr v6{};
  char text[INET6_ADDRSTRLEN] = {0};
  bool is_v4 = inet_pton(AF_INET, ip.c_str(), &v4) == 1;
  if (!is_v4 && inet_pton(AF_INET6, ip.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return "::1/128";
    if (!IN6_IS_ADDR_V4MAPPED(&v6)) {
      std::memset(v6.s6_addr + 8, 0, 8);
      inet_ntop(AF_INET6, &v6, text, sizeof text);
      return std::string(text) + "/64";
    }
    std::memcpy(&v4, v6.s6_addr + 12, 4);
    is_v4 = true;
  }
  if (!is_v4) return ip;
  uint32_t a = ntohl(v4.s_addr);
  if ((a >> 24) == 127) return "127.0.0.0/8";
  const int bits = std::min(32, std::max(0, ipv4_prefix));
  a &= bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  v4.s_addr = htonl(a);
  inet_ntop(AF_INET, &v4, text, sizeof text);
  return std::string(text) + "/" + std::to_string(bits);
}

void SendPacket(Socket* s, const void* body, size_t n, int timeout_ms) {
  uint64_t len = n;
  s->SendAll2(&len, sizeof len, body, n, timeout_ms);
}

void RecvPacket(Socket* s, protocol::ByteBuffer* buf, size_t max_bytes, int timeout_ms) {
  uint64_t len = 0;
  s->RecvAll(&len, sizeof len, timeout_ms, "a packet length");
  DISCO_CHECK(len <= max_bytes, ProtocolError)
      << "a packet of " << len << " bytes exceeds the limit of " << max_bytes << " bytes";
  buf->Resize(static_cast<size_t>(len));
  if (len == 0) return;
  s->RecvAll(buf->data(), static_cast<size_t>(len), timeout_ms, "a packet body");
}

const char* HandshakeCodeName(HandshakeCode code) {
  switch (code) {
    case HandshakeCode::kOk:
      return "ok";
    case HandshakeCode::kBadMagic:
      return "wrong magic number (not a disco client)";
    case HandshakeCode::kBadVersion:
      return "unsupported protocol version";
    case HandshakeCode::kBadKey:
      return "wrong key";
    case HandshakeCode::kBusy:
      return "busy: another client is connected";
  }
  return "unknown answer";
}

namespace {

constexpr char kClientLabel[] = "disco-remote-2 client";
constexpr char kServerLabel[] = "disco-remote-2 server";

}  // namespace

void EncodeHello(uint8_t* out, uint32_t magic, uint16_t version) {
  const uint16_t zero = 0;
  std::memcpy(out, &magic, 4);
  std::memcpy(out + 4, &version, 2);
  std::memcpy(out + 6, &zero, 2);
}

HandshakeCode CheckHello(const uint8_t* hello) {
  uint32_t magic;
  uint16_t version;
  std::memcpy(&magic, hello, 4);
  std::memcpy(&version, hello + 4, 2);
  if (magic != kRemoteMagic) return HandshakeCode::kBadMagic;
  if (version != kRemoteVersion) return HandshakeCode::kBadVersion;
  return HandshakeCode::kOk;
}

crypto::Digest ClientMac(const crypto::HmacSha256& key, const uint8_t* ns, const uint8_t* nc) {
  return key.Mac(kClientLabel, sizeof kClientLabel - 1, ns, kNonceBytes, nc, kNonceBytes);
}

crypto::Digest ServerMac(const crypto::HmacSha256& key, const uint8_t* nc, const uint8_t* ns) {
  return key.Mac(kServerLabel, sizeof kServerLabel - 1, nc, kNonceBytes, ns, kNonceBytes);
}

bool CheckClientProof(const crypto::HmacSha256& key, const uint8_t* ns, const uint8_t* proof) {
  crypto::Digest want = ClientMac(key, ns, proof);
  return crypto::DigestsEqual(want.data(), proof + kNonceBytes, kMacBytes);
}

HandshakeCode ClientHello(Socket* s, const std::string& key, int timeout_ms, uint32_t magic,
                          uint16_t version) {
  const int64_t deadline = DeadlineAfter(timeout_ms);  // for the whole handshake
  auto left = [&] {
    int ms = TimeLeftMs(deadline);
    DISCO_CHECK(ms != 0, RuntimeError)
        << "timed out after " << timeout_ms << " ms in the handshake with the server";
    return ms;
  };
  uint8_t hello[kHelloHeadBytes];
  EncodeHello(hello, magic, version);
  s->SendAll(hello, sizeof hello, left());
  uint8_t challenge[kChallengeBytes];
  s->RecvAllWithin(challenge, 1, left(), "the server's answer to the hello");
  DISCO_CHECK(challenge[0] <= static_cast<uint8_t>(HandshakeCode::kBusy), ProtocolError)
      << "the server answered the hello with unknown code " << static_cast<int>(challenge[0])
      << " (not a disco server?)";
  if (challenge[0] != static_cast<uint8_t>(HandshakeCode::kOk)) {
    return static_cast<HandshakeCode>(challenge[0]);
  }
  s->RecvAllWithin(challenge + 1, kNonceBytes, left(), "the server's challenge");
  const crypto::HmacSha256 mac(key);
  uint8_t proof[kClientProofBytes];
  crypto::RandomBytes(proof, kNonceBytes);
  crypto::Digest d = ClientMac(mac, challenge + 1, proof);
  std::memcpy(proof + kNonceBytes, d.data(), kMacBytes);
  s->SendAll(proof, sizeof proof, left());
  uint8_t answer[kServerProofBytes];
  s->RecvAllWithin(answer, 1, left(), "the server's answer to the key");
  DISCO_CHECK(answer[0] <= static_cast<uint8_t>(HandshakeCode::kBusy), ProtocolError)
      << "the server answered the key with unknown code " << static_cast<int>(answer[0]);
  if (answer[0] != static_cast<uint8_t>(HandshakeCode::kOk)) {
    return static_cast<HandshakeCode>(answer[0]);
  }
  s->RecvAllWithin(answer + 1, kMacBytes, left(), "the server's proof of the key");
  crypto::Digest want = ServerMac(mac, proof, challenge + 1);
  DISCO_CHECK(crypto::DigestsEqual(want.data(), answer + 1, kMacBytes), RuntimeError)
      << "the server did not prove that it holds the key (a wrong proof): it is not the disco "
         "server this key belongs to (another process may hold the port)";
  return HandshakeCode::kOk;
}

HandshakeCode ServerHello(Socket* s, const std::string& key, int timeout_ms, bool busy) {
  const int64_t deadline = DeadlineAfter(timeout_ms);  // for the whole handshake
  auto left = [&](const char* what) {
    int ms = TimeLeftMs(deadline);
    DISCO_CHECK(ms != 0, RuntimeError)
        << "timed out after " << timeout_ms << " ms waiting for " << what;
    return ms;
  };
  uint8_t hello[kHelloHeadBytes];
  s->RecvAllWithin(hello, sizeof hello, timeout_ms, "the client's handshake");
  HandshakeCode code = CheckHello(hello);
  uint8_t challenge[kChallengeBytes] = {static_cast<uint8_t>(code)};
  if (code != HandshakeCode::kOk) {
    s->SendAll(challenge, 1, std::max(1, TimeLeftMs(deadline)));
    return code;
  }
  crypto::RandomBytes(challenge + 1, kNonceBytes);
  s->SendAll(challenge, sizeof challenge, left("the client to take the challenge"));
  uint8_t proof[kClientProofBytes];
  s->RecvAllWithin(proof, sizeof proof, left("the client's proof of the key"),
                   "the client's proof of the key");
  const crypto::HmacSha256 mac(key);
  code = CheckClientProof(mac, challenge + 1, proof) ? HandshakeCode::kOk : HandshakeCode::kBadKey;
  if (code == HandshakeCode::kOk && busy) code = HandshakeCode::kBusy;
  uint8_t answer[kServerProofBytes] = {static_cast<uint8_t>(code)};
  size_t n = 1;
  if (code == HandshakeCode::kOk) {
    crypto::Digest d = ServerMac(mac, proof, challenge + 1);
    std::memcpy(answer + 1, d.data(), kMacBytes);
    n = sizeof answer;
  }
  s->SendAll(answer, n, std::max(1, TimeLeftMs(deadline)));
  return code;
}

}  // namespace remote
}  // namespace disco
