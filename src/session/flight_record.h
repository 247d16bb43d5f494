// One entry of a rank's flight recorder (session/flight_recorder.h): the thread running commands
// writes it on every command's path, the watchdog's thread and signal handlers read it. A seqlock
// made of atomics, so that both sides are defined at the cost of plain stores and loads on x86: the
// writer makes the version odd, stores every field (release: none overtakes the odd version), and
// makes it even again; a reader copies the fields between two reads of the version and tries again
// when they differ or are odd. A reader that cannot wait for the writer (a signal handler
// interrupting it) gets, after a few tries, the fields as they were, marked torn. Lock-free,
// allocation-free: async-signal-safe.
#ifndef DISCO_SESSION_FLIGHT_RECORD_H_
#define DISCO_SESSION_FLIGHT_RECORD_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace disco {
namespace watchdog {

/// A reader's copy of one command the rank ran.
struct CommandRecord {
  uint64_t seq = 0;
  char action[16] = {0};
  char function[64] = {0};  // "" when the command runs no function
  int64_t start_ns = 0;
  int64_t duration_ns = -1;  // -1: still running
  bool torn = false;         // being written at every try: the fields may mix two commands
};

class FlightRecord {
 public:
  static constexpr int kReadTries = 64;

  /// The writer (one thread) records command #`seq`: `action`, `function` (cut to the size of
  /// CommandRecord's arrays; a cut function ends in "..."), started at `start_ns`, running.
  void Write(uint64_t seq, const char* action, size_t action_len, const char* function,
             size_t function_len, int64_t start_ns) {
    char text[sizeof CommandRecord::function];
    Open();
    seq_.store(seq, std::memory_order_release);
    start_ns_.store(start_ns, std::memory_order_release);
    duration_ns_.store(-1, std::memory_order_release);
    StoreText(action_, text, Cut(text, sizeof CommandRecord::action, action, action_len));
    StoreText(function_, text, Cut(text, sizeof CommandRecord::function, function, function_len));
    Close();
  }
  /// The writer: the command ended after `duration_ns`.
  void SetDuration(int64_t duration_ns) {
    Open();
    duration_ns_.store(duration_ns, std::memory_order_release);
    Close();
  }
  /// The writer's own read of the start it stored.
  int64_t start_ns() const { return start_ns_.load(std::memory_order_relaxed); }

  /// Any thread, or a signal handler: a consistent copy, or after `tries` the last one, torn.
  CommandRecord Read(int tries = kReadTries) const {
    CommandRecord r;
    for (int t = 0; t < std::max(tries, 1); ++t) {
      const uint64_t before = version_.load(std::memory_order_acquire);
      r.seq = seq_.load(std::memory_order_acquire);
      r.start_ns = start_ns_.load(std::memory_order_acquire);
      r.duration_ns = duration_ns_.load(std::memory_order_acquire);
      LoadText(action_, r.action);
      LoadText(function_, r.function);
      // The acquire loads above: a field of a later write makes this read see its odd version.
      if ((before & 1) == 0 && version_.load(std::memory_order_relaxed) == before) return r;
    }
    r.torn = true;
    return r;
  }

 private:
  static constexpr size_t kActionWords = sizeof CommandRecord::action / 8;
  static constexpr size_t kFunctionWords = sizeof CommandRecord::function / 8;

  void Open() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void Close() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // `src` cut to `cap` - 1 bytes into `text`, NUL-padded to a whole word; returns the words
  // used (the bytes past the NUL in the words after them are never read).
  static size_t Cut(char* text, size_t cap, const char* src, size_t len) {
    const size_t n = std::min(cap - 1, len);
    const size_t words = n / 8 + 1;
    std::memcpy(text, src, n);
    std::memset(text + n, 0, 8 * words - n);
    if (len > cap - 1 && cap > 4) std::memcpy(text + cap - 4, "...", 3);  // cut: said so
    return words;
  }
  template <size_t N>
  static void StoreText(std::atomic<uint64_t> (&words)[N], const char* text, size_t used) {
    for (size_t i = 0; i < used && i < N; ++i) {
      uint64_t w;
      std::memcpy(&w, text + 8 * i, 8);
      words[i].store(w, std::memory_order_release);
    }
  }
  template <size_t N>
  static void LoadText(const std::atomic<uint64_t> (&words)[N], char* text) {
    for (size_t i = 0; i < N; ++i) {
      const uint64_t w = words[i].load(std::memory_order_acquire);
      std::memcpy(text + 8 * i, &w, 8);
    }
    text[8 * N - 1] = '\0';
  }

  std::atomic<uint64_t> version_{0};  // odd while the writer writes
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> start_ns_{0};
  std::atomic<int64_t> duration_ns_{-1};
  std::atomic<uint64_t> action_[kActionWords] = {};
  std::atomic<uint64_t> function_[kFunctionWords] = {};
};

}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_FLIGHT_RECORD_H_
