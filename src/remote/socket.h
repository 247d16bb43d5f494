// TCP plumbing for remote sessions (issue: attach a controller over TCP): an owned socket with
// deadlines on every operation, length-prefixed packets bounded before anything is allocated,
// and the connection handshake (magic, protocol version, key) with a distinct answer per fault.
#ifndef DISCO_REMOTE_SOCKET_H_
#define DISCO_REMOTE_SOCKET_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "protocol/frame.h"

namespace disco {
namespace remote {

/// Pass as a timeout to wait without a deadline.
constexpr int kNoTimeout = -1;

/// An owned TCP socket (closed by the destructor). Every blocking call takes a time limit in
/// milliseconds (kNoTimeout: none) for the whole call, however the peer paces its bytes, and
/// raises RuntimeError naming what it waited for when it passes.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { Close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  Socket(Socket&& other) noexcept
      : fd_(other.fd_),
        ahead_(std::move(other.ahead_)),
        ahead_pos_(other.ahead_pos_),
        ahead_len_(other.ahead_len_) {
    other.fd_ = -1;
    other.ahead_pos_ = other.ahead_len_ = 0;
  }
  Socket& operator=(Socket&& other) noexcept;

  /// Listens on host:port (port 0 picks a free one; see port()).
  static Socket Listen(const std::string& host, int port, int backlog = 4);
  /// Connects to host:port within `timeout_ms`.
  static Socket Connect(const std::string& host, int port, int timeout_ms);
  /// Waits up to `timeout_ms` for a connection; returns an invalid Socket on timeout.
  Socket Accept(int timeout_ms);

  void SendAll(const void* data, size_t n, int timeout_ms);
  /// Sends `head` then `body` with one system call where the kernel takes both (no copy into a
  /// joint buffer).
  void SendAll2(const void* head, size_t head_n, const void* body, size_t body_n, int timeout_ms);
  /// Sends `count` buffers in order, with as few system calls as the kernel allows (`iov` is
  /// consumed).
  void SendAllV(iovec* iov, int count, int timeout_ms);
  /// Waits up to `timeout_ms` (kNoTimeout: forever) for data or a close; false on timeout.
  bool WaitReadable(int timeout_ms);
  /// Receives exactly n bytes; a peer that closes first raises RuntimeError ("closed after k of
  /// n"). Small reads go through a read-ahead buffer (one system call takes a whole short
  /// message); large ones land straight in `data`.
  void RecvAll(void* data, size_t n, int timeout_ms, const char* what);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  /// The local port (after Listen with port 0).
  int port() const;
  /// "ip:port" of the peer, for log lines.
  std::string PeerName() const;
  void Close();

 private:
  static constexpr size_t kAheadBytes = 64 << 10;
  void WaitFor(short events, int timeout_ms, const char* what);
  /// As WaitFor, against an absolute deadline (-1: none); `timeout_ms` is for the message.
  void WaitUntil(short events, int64_t deadline, int timeout_ms, const char* what);
  /// One recv into `dst` (at most `n` bytes): >0 bytes read, 0 when the peer closed, -1 when
  /// nothing is there yet; other failures raise.
  ssize_t RecvSome(void* dst, size_t n);
  int fd_ = -1;
  std::unique_ptr<char[]> ahead_;
  size_t ahead_pos_ = 0;
  size_t ahead_len_ = 0;
};

/// Splits "HOST:PORT" (the last colon separates them); false unless the port is 1..65535.
bool ParseHostPort(const std::string& text, std::string* host, int* port);

/// Packets: a u64 little-endian length, then the body.
void SendPacket(Socket* s, const void* body, size_t n, int timeout_ms);
/// Receives one packet into `buf` within `timeout_ms` in all; a length over `max_bytes` raises
/// ProtocolError before anything is allocated or read.
void RecvPacket(Socket* s, protocol::ByteBuffer* buf, size_t max_bytes, int timeout_ms);

constexpr uint32_t kRemoteMagic = 0x52435344;  // "DSCR" little-endian
constexpr uint16_t kRemoteVersion = 1;
constexpr size_t kMaxKeyBytes = 1024;

/// The server's one-byte answer to a client's hello.
enum class HandshakeCode : uint8_t {
  kOk = 0,
  kBadMagic = 1,
  kBadVersion = 2,
  kBadKey = 3,
  kBusy = 4,
};
const char* HandshakeCodeName(HandshakeCode code);

/// A hello is magic (u32), version (u16), key length (u16), then the key.
constexpr size_t kHelloHeadBytes = 8;
/// The bytes of the hello that starts with data[0..n), once its head is in (0 before); a claimed
/// key longer than kMaxKeyBytes counts as kMaxKeyBytes + 1 (refused, never read past).
size_t HelloBytes(const uint8_t* data, size_t n);
/// The answer to a complete hello of HelloBytes() bytes (kOk for the right key; constant-time
/// key comparison).
HandshakeCode CheckHello(const uint8_t* data, size_t n, const std::string& expected_key);

/// Client side: sends magic, version and key; returns the server's answer.
HandshakeCode ClientHello(Socket* s, const std::string& key, int timeout_ms,
                          uint32_t magic = kRemoteMagic, uint16_t version = kRemoteVersion);
/// Server side, one connection at a time: reads a hello within `timeout_ms` in all, answers it
/// and returns the code it sent (the caller closes the connection on anything but kOk). With
/// `busy`, a hello that passes every check is answered kBusy. Malformed or slow hellos raise.
/// (disco::Serve runs many handshakes at once with HelloBytes and CheckHello.)
HandshakeCode ServerHello(Socket* s, const std::string& expected_key, int timeout_ms,
                          bool busy = false);

}  // namespace remote
}  // namespace disco

#endif  // DISCO_REMOTE_SOCKET_H_
