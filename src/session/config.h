// Session settings, read from the environment on rank 0 and broadcast, so that every rank agrees
// on the frame size even when environments differ.
#ifndef DISCO_SESSION_CONFIG_H_
#define DISCO_SESSION_CONFIG_H_

#include <cstddef>
#include <cstdint>

namespace disco {

/// Longest sleep between two checks of a parked worker (the wake-up latency it can add).
constexpr int kParkMaxSleepUs = 500;
/// DISCO_PREPOST_FRAMES=auto prepost frames above this many ranks: with up to 4, Open MPI's
/// broadcast of a frame reaches every worker from rank 0 directly, and nobody forwards anything.
constexpr int kPrepostMinRanks = 4;

struct SessionConfig {
  int64_t inline_bytes = 256;
  int64_t max_frame_bytes = INT32_MAX;
  int64_t num_groups = 1;
  /// DISCO_TIMEOUT: seconds a function may run for one command before the watchdog ends the job
  /// (0: never).
  int64_t timeout_s = 300;
  /// DISCO_PREPOST_FRAMES: 1, the frame after a collective call travels by MPI_Ibcast that the
  /// workers post before they run the collective (the frame moves down the broadcast tree while
  /// they wait in it); 0, by MPI_Bcast after it; -1 (auto), 1 above kPrepostMinRanks ranks.
  int64_t prepost_frames = -1;

  /// Reads DISCO_INLINE_BYTES, DISCO_MAX_FRAME_BYTES, DISCO_NUM_GROUPS, DISCO_TIMEOUT and
  /// DISCO_PREPOST_FRAMES, checked against `num_workers`.
  static SessionConfig FromEnv(int num_workers);
  /// Largest payload a frame may carry.
  size_t max_payload() const;
};

}  // namespace disco

#endif  // DISCO_SESSION_CONFIG_H_
