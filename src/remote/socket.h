// TCP plumbing for remote sessions: an owned socket with
// deadlines on every operation, length-prefixed packets bounded before anything is allocated,
// and the connection handshake (magic, protocol version, a challenge-response proof of the key on
// both sides) with a distinct answer per fault.
#ifndef DISCO_REMOTE_SOCKET_H_
#define DISCO_REMOTE_SOCKET_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/crypto.h"
#include "protocol/frame.h"

namespace disco {
namespace remote {

/// Pass as a timeout to wait without a deadline.
constexpr int kNoTimeout = -1;
/// The slowest rate a transfer may keep without being given up: a send or receive of n bytes waits
/// for progress up to its timeout plus n / kMinBytesPerSecond (what is still to move; at most the
/// timeout again), counted afresh whenever bytes move.
constexpr int64_t kMinBytesPerSecond = int64_t{1} << 20;

/// An owned TCP socket (closed by the destructor). Every blocking call takes a time limit in
/// milliseconds (kNoTimeout: none) and raises RuntimeError naming what it waited for when it
/// passes. Sends and receives (SendAll*, RecvAll) give up only on a peer that stops moving bytes:
/// their limit is the timeout plus a second per MiB still to move (kMinBytesPerSecond; at most
/// twice the timeout in all), and starts
/// again whenever bytes move, so that a slow peer (a loaded machine) is never dropped while a
/// silent one still is. RecvAllWithin has one deadline for the whole call, however the peer paces
/// its bytes (for handshakes, whose peer is not trusted yet).
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
  /// As RecvAll, with one deadline for all n bytes however the peer paces them (handshakes: the
  /// peer is not trusted yet).
  void RecvAllWithin(void* data, size_t n, int timeout_ms, const char* what);

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
  /// As WaitFor, against an absolute deadline (-1: none); `timeout_ms` and `progress` (the
  /// deadline restarts when bytes move) are for the message.
  void WaitUntil(short events, int64_t deadline, int timeout_ms, const char* what,
                 bool progress = false);
  /// One recv into `dst` (at most `n` bytes): >0 bytes read, 0 when the peer closed, -1 when
  /// nothing is there yet; other failures raise.
  ssize_t RecvSome(void* dst, size_t n);
  /// RecvAll and RecvAllWithin.
  void Recv(void* data, size_t n, int timeout_ms, bool one_deadline, const char* what);
  int fd_ = -1;
  std::unique_ptr<char[]> ahead_;
  size_t ahead_pos_ = 0;
  size_t ahead_len_ = 0;
};

/// Splits "HOST:PORT" (the last colon separates them); false unless the port is 1..65535.
bool ParseHostPort(const std::string& text, std::string* host, int* port);

/// The network a client address counts in for refusals and back-off (disco::Serve): every
/// loopback address (127.0.0.0/8, ::1) is one, other IPv4 addresses by their first `ipv4_prefix`
/// bits ("10.1.2.0/24"), IPv6 ones by /64; IPv4-mapped IPv6 addresses as IPv4. Text that is no
/// address stands for itself.
std::string AddressGroup(const std::string& ip, int ipv4_prefix);

/// Packets: a u64 little-endian length, then the body.
void SendPacket(Socket* s, const void* body, size_t n, int timeout_ms);
/// Receives one packet into `buf` (RecvAll's limits: `timeout_ms` without progress, plus a second
/// per MiB still to come); a length over `max_bytes` raises ProtocolError before anything is
/// allocated or read.
void RecvPacket(Socket* s, protocol::ByteBuffer* buf, size_t max_bytes, int timeout_ms);

constexpr uint32_t kRemoteMagic = 0x52435344;  // "DSCR" little-endian
/// 2: challenge-response (the key never travels); 1 sent the key in clear.
constexpr uint16_t kRemoteVersion = 2;

/// The server's one-byte answers in the handshake.
enum class HandshakeCode : uint8_t {
  kOk = 0,
  kBadMagic = 1,
  kBadVersion = 2,
  kBadKey = 3,
  kBusy = 4,
};
const char* HandshakeCodeName(HandshakeCode code);

// The handshake (version 2). Neither side sends the key or anything derived from it before the
// other side has shown that it speaks the protocol, and the client proves that it holds the key
// before the server does:
//   client -> server  hello: magic (u32), version (u16), 0 (u16)                        8 bytes
//   server -> client  kOk and the server's nonce Ns (32 random bytes)                  33 bytes
//                     (or kBadMagic / kBadVersion, and the connection closes)
//   client -> server  the client's nonce Nc (32 random bytes) and
//                     HMAC-SHA256(key, "disco-remote-2 client" || Ns || Nc)             64 bytes
//   server -> client  kOk and HMAC-SHA256(key, "disco-remote-2 server" || Nc || Ns)     33 bytes
//                     (or kBadKey, after a delay that grows with the failures of that network;
//                     or kBusy while another client is attached)
// The client checks the server's MAC before it sends any request: a process that took the port
// (before a server started, or after it ended) learns the client's nonce and MAC only, from which
// the key can be recovered only by guessing it (a key of 16 characters or more, or the generated
// 256 bits, puts that out of reach; a short dictionary word would not be). A version 1 client gets
// kBadVersion ("unsupported protocol version") at once, never a hang.
constexpr size_t kHelloHeadBytes = 8;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kChallengeBytes = 1 + kNonceBytes;
constexpr size_t kClientProofBytes = kNonceBytes + kMacBytes;
constexpr size_t kServerProofBytes = 1 + kMacBytes;

/// Writes the hello (kHelloHeadBytes) with `magic` and `version` (tests send others).
void EncodeHello(uint8_t* out, uint32_t magic = kRemoteMagic, uint16_t version = kRemoteVersion);
/// The server's answer to a hello: kOk (a challenge follows), kBadMagic or kBadVersion.
HandshakeCode CheckHello(const uint8_t* hello);
/// The client's MAC over the challenge `ns` and its own nonce `nc` (kNonceBytes each).
crypto::Digest ClientMac(const crypto::HmacSha256& key, const uint8_t* ns, const uint8_t* nc);
/// The server's MAC, which the client checks.
crypto::Digest ServerMac(const crypto::HmacSha256& key, const uint8_t* nc, const uint8_t* ns);
/// Whether `proof` (kClientProofBytes: Nc, then its MAC) answers the challenge `ns` for `key`
/// (constant-time comparison).
bool CheckClientProof(const crypto::HmacSha256& key, const uint8_t* ns, const uint8_t* proof);

/// Client side: the whole handshake, within `timeout_ms` in all however the server paces its
/// bytes. Returns the server's answer; kOk only once the server has proved that it holds the key
/// (a server whose proof is wrong raises RuntimeError saying so, before anything else is sent).
HandshakeCode ClientHello(Socket* s, const std::string& key, int timeout_ms,
                          uint32_t magic = kRemoteMagic, uint16_t version = kRemoteVersion);
/// Server side, one connection at a time: runs the handshake within `timeout_ms` in all, answers
/// it and returns the code it sent (the caller closes the connection on anything but kOk). With
/// `busy`, a client that proved the key is answered kBusy. Malformed or slow hellos raise.
/// (disco::Serve runs many handshakes at once with CheckHello and CheckClientProof.)
HandshakeCode ServerHello(Socket* s, const std::string& key, int timeout_ms, bool busy = false);

}  // namespace remote
}  // namespace disco

#endif  // DISCO_REMOTE_SOCKET_H_
