// Session settings, read from the environment on rank 0 and broadcast, so that every rank agrees
// on the frame size even when environments differ.
#ifndef DISCO_SESSION_CONFIG_H_
#define DISCO_SESSION_CONFIG_H_

#include <cstddef>
#include <cstdint>

namespace disco {

/// Longest sleep between two checks of a parked worker (the wake-up latency it can add).
constexpr int kParkMaxSleepUs = 500;

struct SessionConfig {
  int64_t inline_bytes = 256;
  int64_t max_frame_bytes = INT32_MAX;
  int64_t num_groups = 1;
  /// DISCO_TIMEOUT: seconds a function may run for one command before the watchdog ends the job
  /// (0: never).
  int64_t timeout_s = 300;

  /// Reads DISCO_INLINE_BYTES, DISCO_MAX_FRAME_BYTES, DISCO_NUM_GROUPS and DISCO_TIMEOUT, checked
  /// against
  /// `num_workers`.
  static SessionConfig FromEnv(int num_workers);
  /// Largest payload a frame may carry.
  size_t max_payload() const;
};

}  // namespace disco

#endif  // DISCO_SESSION_CONFIG_H_
