// The datagrams of the watchdog's liveness pings (session/watchdog.h), authenticated with the job's
// secret. Rank 0 draws the secret (32 random bytes) and a public job id at start-up and broadcasts
// them over MPI; they never travel on the network otherwise. Every datagram starts with 48 bytes:
//
//   0  magic "DWD2"         4  kind (1 ping, 2 pong, 3 state request, 4 state, 5 fired), 3 zero
//                              bytes
//   8  sender rank (u32)   12  receiver rank (u32)
//  16  job id (u64)        24  nonce (u64): a ping's is its sender's counter, which grows with
//  every
//                              ping it sends; a pong echoes the nonce of the ping it answers
//  32  MAC: the first 16 bytes of HMAC-SHA256(secret, bytes 0..31)
//
// (integers little-endian). A state (the answer to a state request: what the rank is doing, for
// the watchdog's hang verdict) carries kStateBytes more (RankState below), and its MAC covers
// them too: HMAC-SHA256(secret, bytes 0..31 + bytes 48..). A fired notice tells rank 0 that the
// sender's watchdog fired (rank 0 then gathers every rank's state and names the culprit).
//
// A receiver checks the size (for the kind), the magic, the kind, that it is the receiver, the
// job id, the sender's address and port, then the MAC; a ping, a state request and a fired notice
// must also carry a counter above every earlier one of its sender, and a pong or a state the nonce
// of a ping or request that is still waiting for its answer from that rank. Anything else is
// dropped, and never counts as an answer.
#ifndef DISCO_SESSION_LIVENESS_H_
#define DISCO_SESSION_LIVENESS_H_

#include <cstddef>
#include <cstdint>

#include "core/crypto.h"

namespace disco {
namespace liveness {

constexpr size_t kPacketBytes = 48;
constexpr size_t kMacOffset = 32;
constexpr size_t kMacBytes = 16;
constexpr uint8_t kPing = 1;
constexpr uint8_t kPong = 2;
constexpr uint8_t kStateRequest = 3;
constexpr uint8_t kState = 4;
constexpr uint8_t kFired = 5;
constexpr size_t kStateBytes = 256;
constexpr size_t kStatePacketBytes = kPacketBytes + kStateBytes;

/// What a rank is doing, as its watchdog tells it (a state datagram's payload). Strings are
/// NUL-terminated (DecodeState makes them so, and printable).
struct RankState {
  static constexpr uint32_t kBusy = 1;           // running command `seq`
  static constexpr uint32_t kCollective = 2;     // ... a collective (or a command all ranks join)
  static constexpr uint32_t kController = 4;     // rank 0: its controller program is running
  static constexpr uint32_t kRanCommand = 8;     // `seq` names a command (run now or last)
  static constexpr uint32_t kInCollective = 16;  // inside a collective builtin (disco.allreduce)
  static constexpr uint32_t kInMpi = 32;  // its command thread was inside an MPI call (sampled)
  uint64_t seq = 0;                       // the command running (kBusy) or run last
  uint64_t elapsed_ms = 0;                // in it (kBusy), or since it ended
  uint32_t flags = 0;
  int32_t peer = -1;              // the rank a collective waits for, when the transport knows it
  char action[16] = {0};          // "call_packed", "replay_graph", ...
  char function[64] = {0};        // its function, or the call a replay is at
  char activity[80] = {0};        // what the rank does inside it ("HDF5 read of ..."), or ""
  char foreign_call[32] = {0};    // an MPI entry point its command thread is inside, called from
  char foreign_caller[40] = {0};  // outside disco (by this library, basename), or ""
};
static_assert(8 + 8 + 4 + 4 + 16 + 64 + 80 + 32 + 40 == kStateBytes, "RankState layout");

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

/// Writes `p` (any kind but kState) with its MAC into `out` (kPacketBytes).
void Encode(const Packet& p, const crypto::HmacSha256& mac, uint8_t* out);
/// Writes `p` (kind kState) and `state` with its MAC into `out` (kStatePacketBytes).
void EncodeState(const Packet& p, const RankState& state, const crypto::HmacSha256& mac,
                 uint8_t* out);
/// The state of a datagram that Decode accepted as kState (kStatePacketBytes); every string ends
/// in NUL, and a byte that is not printable ASCII or UTF-8 reads '?'.
RankState DecodeState(const uint8_t* data);
/// Ends every string of `state` in NUL and makes it printable ('?' for any byte that is not
/// printable ASCII or part of a well-formed UTF-8 character: text::SignalSafePrintableUtf8).
void MakePrintable(RankState* state);
/// The cheap checks of the `n` bytes of `data` for rank `self` of a job of `world` ranks with id
/// `job_id` (everything but the MAC); fills `*out` when it returns kAccepted.
Verdict Parse(const uint8_t* data, size_t n, int self, int world, uint64_t job_id, Packet* out);
/// Whether the MAC of a datagram of `n` bytes that Parse accepted is right (constant-time).
bool MacValid(const uint8_t* data, size_t n, const crypto::HmacSha256& mac);
/// Parse, then MacValid (kBadMac). Freshness (counters, outstanding nonces) and the source address
/// are the caller's to check.
Verdict Decode(const uint8_t* data, size_t n, int self, int world, uint64_t job_id,
               const crypto::HmacSha256& mac, Packet* out);

}  // namespace liveness
}  // namespace disco

#endif  // DISCO_SESSION_LIVENESS_H_
