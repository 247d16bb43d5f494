// The datagrams of the watchdog's liveness pings (session/watchdog.h), authenticated with the job's
// secret. Rank 0 draws the secret (32 random bytes) and a public job id at start-up and broadcasts
// them over MPI; they never travel on the network otherwise. Every datagram is 48 bytes:
//
//   0  magic "DWD2"         4  kind (1 ping, 2 pong), 3 zero bytes
//   8  sender rank (u32)   12  receiver rank (u32)
//  16  job id (u64)        24  nonce (u64): a ping's is its sender's counter, which grows with
//  every
//                              ping it sends; a pong echoes the nonce of the ping it answers
//  32  MAC: the first 16 bytes of HMAC-SHA256(secret, bytes 0..31)
//
// (integers little-endian). A receiver checks the size, the magic, the kind, that it is the
// receiver, the job id, the sender's address and port, then the MAC; a ping must also carry a
// counter above every earlier one of its sender, and a pong the nonce of a ping that is still
// waiting for its answer from that rank. Anything else is dropped, and never counts as an answer.
#ifndef DISCO_SESSION_LIVENESS_H_
#define DISCO_SESSION_LIVENESS_H_

#include <cstddef>
#include <cstdint>

#include "core/sha256.h"

namespace disco {
namespace liveness {

constexpr size_t kPacketBytes = 48;
constexpr size_t kMacOffset = 32;
constexpr size_t kMacBytes = 16;
constexpr uint8_t kPing = 1;
constexpr uint8_t kPong = 2;

/// The job's shared secret and its public id (what rank 0 broadcasts).
struct JobSecret {
  uint8_t secret[32] = {0};
  uint64_t job_id = 0;
};
/// A fresh secret and job id from the kernel's random source.
JobSecret NewJobSecret();

struct Packet {
  uint8_t kind = 0;
  uint32_t sender = 0;
  uint32_t receiver = 0;
  uint64_t job_id = 0;
  uint64_t nonce = 0;
};

/// What a receiver makes of a datagram.
enum class Verdict {
  kAccepted,
  kMalformed,  // wrong size, magic or kind, another receiver, a rank outside the job
  kOtherJob,   // another job id
  kBadMac,     // the MAC does not match: forged, or altered on the way
};

/// Writes `p` with its MAC into `out` (kPacketBytes).
void Encode(const Packet& p, const crypto::HmacSha256& mac, uint8_t* out);
/// The cheap checks of the `n` bytes of `data` for rank `self` of a job of `world` ranks with id
/// `job_id` (everything but the MAC); fills `*out` when it returns kAccepted.
Verdict Parse(const uint8_t* data, size_t n, int self, int world, uint64_t job_id, Packet* out);
/// Whether the MAC of a datagram that Parse accepted is right (constant-time comparison).
bool MacValid(const uint8_t* data, const crypto::HmacSha256& mac);
/// Parse, then MacValid (kBadMac). Freshness (counters, outstanding nonces) and the source address
/// are the caller's to check.
Verdict Decode(const uint8_t* data, size_t n, int self, int world, uint64_t job_id,
               const crypto::HmacSha256& mac, Packet* out);

}  // namespace liveness
}  // namespace disco

#endif  // DISCO_SESSION_LIVENESS_H_
