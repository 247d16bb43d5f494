// The server's side of one client's handshake (the messages: socket.h), read without blocking as
// its bytes arrive, so that the acceptor (acceptor.h) runs many at once: the hello, answered at
// once with a challenge (a fresh nonce), then the client's proof of the key, answered with the
// server's own proof or a refusal. The deadlines, the back-off after wrong keys and whether a
// client is already attached are the acceptor's.
#ifndef DISCO_REMOTE_HANDSHAKE_H_
#define DISCO_REMOTE_HANDSHAKE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/crypto.h"
#include "remote/socket.h"

namespace disco {
namespace remote {

class ServerHandshake {
 public:
  /// What Read() got to.
  enum class Step {
    kWaiting,     // the peer has sent nothing more yet
    kGone,        // closed or failed before its hello or proof was complete (or took no answer)
    kBadHello,    // a foreign protocol or another version: refuse it with hello_code()
    kChallenged,  // the hello was answered with a challenge; the proof comes next
    kProof,       // the proof is complete: ProofValid, then Accept or Refuse
  };

  explicit ServerHandshake(Socket sock) : sock_(std::move(sock)) {}

  /// Reads what the peer has sent, up to the end of the current message (the hello, then the
  /// proof), and answers a good hello with a challenge at once.
  Step Read();
  /// The answer to a hello that is no disco one (after kBadHello).
  HandshakeCode hello_code() const { return hello_code_; }
  /// Whether the complete proof answers the challenge for `mac` (the server's key).
  bool ProofValid(const crypto::HmacSha256& mac) const;
  /// Answers a valid proof: kOk and the server's MAC. False if the peer is gone.
  bool Accept(const crypto::HmacSha256& mac);
  /// A refusal: its code, and whatever the peer sent beyond what was read is dropped, so that the
  /// close does not reset the connection before the peer reads the code.
  void Refuse(HandshakeCode code);

  int fd() const { return sock_.fd(); }
  /// The connection, once accepted.
  Socket TakeSocket() { return std::move(sock_); }

 private:
  // Sends `n` bytes of an answer (they fit in the socket's empty send buffer); false if the peer
  // is gone.
  bool Send(const uint8_t* data, size_t n);

  Socket sock_;
  bool challenged_ = false;  // the hello was answered with a challenge; the proof comes next
  std::vector<uint8_t> in_;  // the bytes of the hello, then of the proof
  uint8_t challenge_[kNonceBytes] = {0};
  HandshakeCode hello_code_ = HandshakeCode::kOk;
};

}  // namespace remote
}  // namespace disco

#endif  // DISCO_REMOTE_HANDSHAKE_H_
