// The server's side of a handshake, one message at a time without blocking (handshake.h).
#include "remote/handshake.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <exception>

namespace disco {
namespace remote {

ServerHandshake::Step ServerHandshake::Read() {
  const size_t need = challenged_ ? kClientProofBytes : kHelloHeadBytes;
  while (in_.size() < need) {
    uint8_t buf[kClientProofBytes];
    ssize_t k = ::recv(sock_.fd(), buf, need - in_.size(), 0);
    if (k > 0) {
      in_.insert(in_.end(), buf, buf + k);
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return Step::kWaiting;
    }
    return Step::kGone;  // closed or failed before its hello or proof was complete
  }
  if (challenged_) return Step::kProof;
  hello_code_ = CheckHello(in_.data());
  if (hello_code_ != HandshakeCode::kOk) return Step::kBadHello;
  uint8_t challenge[kChallengeBytes] = {static_cast<uint8_t>(HandshakeCode::kOk)};
  crypto::RandomBytes(challenge_, sizeof challenge_);
  std::memcpy(challenge + 1, challenge_, sizeof challenge_);
  if (!Send(challenge, sizeof challenge)) return Step::kGone;
  challenged_ = true;
  in_.clear();
  return Step::kChallenged;
}

bool ServerHandshake::ProofValid(const crypto::HmacSha256& mac) const {
  return CheckClientProof(mac, challenge_, in_.data());
}

bool ServerHandshake::Accept(const crypto::HmacSha256& mac) {
  uint8_t answer[kServerProofBytes] = {static_cast<uint8_t>(HandshakeCode::kOk)};
  crypto::Digest d = ServerMac(mac, in_.data(), challenge_);
  std::memcpy(answer + 1, d.data(), kMacBytes);
  return Send(answer, sizeof answer);
}

void ServerHandshake::Refuse(HandshakeCode code) {
  uint8_t c = static_cast<uint8_t>(code);
  Send(&c, 1);
  uint8_t sink[4096];
  for (int i = 0; i < 16 && ::recv(sock_.fd(), sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
}

bool ServerHandshake::Send(const uint8_t* data, size_t n) {
  try {
    sock_.SendAll(data, n, 100);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace remote
}  // namespace disco
