// The frame header and the wire's codes (actions, flags, reply kinds): the part of the wire format
// (protocol/frame.h describes it all) that needs nothing else of disco. bench/sim's skeleton, built
// apart from disco with mpicxx or smpicxx, includes it, so that a change here changes it too or
// fails its compile (its static_asserts), instead of drifting unnoticed.
#ifndef DISCO_PROTOCOL_FRAME_HEADER_H_
#define DISCO_PROTOCOL_FRAME_HEADER_H_

#include <cstddef>
#include <cstdint>

namespace disco {
namespace protocol {

constexpr uint32_t kMagic = 0x4F435344;
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 24;

/// Command actions. Values are part of the wire format: never renumber.
enum class Action : uint8_t {
  kShutdown = 0,
  kKillReg = 1,
  kGetGlobalFunc = 2,
  kCallPacked = 3,
  kSyncWorker = 4,
  kDebugGetFromRemote = 5,
  kDebugSetRegister = 6,
  kPark = 7,
  // Capture and replay (disco/graph.h). Install: the graph's program, once (operands: see
  // Worker::InstallGraph); replay: [graph id, inputs...]; free: [graph ids...].
  kInstallGraph = 8,
  kReplayGraph = 9,
  kFreeGraph = 10,
};
constexpr uint8_t kMaxAction = 10;

enum class ReplyKind : uint8_t { kSyncAck = 1, kDebugValue = 2, kError = 3 };
/// A kSyncAck reply: its ReplyKind byte and the u64 count of error reports (EncodeSyncAck).
constexpr size_t kSyncAckBytes = 1 + sizeof(uint64_t);

/// Frame flag: the frame after this one travels by MPI_Ibcast, which the workers post before they
/// run this command (a collective call), so that the next frame moves down the broadcast tree
/// while they wait in the collective instead of after it.
constexpr uint16_t kFlagNextFrameNonblocking = 1;
/// Frame flag: the call is of a collective (worker 0's function register holds one). A worker whose
/// own function register fails ends the job instead of leaving the others waiting in it.
constexpr uint16_t kFlagCollective = 2;
constexpr uint16_t kKnownFlags = kFlagNextFrameNonblocking | kFlagCollective;

struct FrameHeader {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  uint8_t action = 0;
  uint16_t flags = 0;
  uint64_t seq = 0;
  uint32_t payload_bytes = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(FrameHeader) == kHeaderBytes, "FrameHeader layout");

}  // namespace protocol
}  // namespace disco

#endif  // DISCO_PROTOCOL_FRAME_HEADER_H_
