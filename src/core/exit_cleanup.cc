#include "core/exit_cleanup.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

namespace disco {
namespace exit_cleanup {
namespace {

constexpr int kSlots = 8;
constexpr size_t kPathBytes = 4096;

// A slot is free (0), being written or cleared (1), or holds a path (2). Signal handlers read only
// slots in state 2, whose path is complete.
struct Slot {
  std::atomic<int> state{0};
  char path[kPathBytes];
};
Slot g_slots[kSlots];

}  // namespace

bool RegisterFile(const std::string& path) {
  if (path.empty() || path.size() >= kPathBytes) return false;
  for (Slot& s : g_slots) {
    int expected = 0;
    if (!s.state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.state.store(2);
    return true;
  }
  return false;
}

void UnregisterFile(const std::string& path) {
  for (Slot& s : g_slots) {
    int expected = 2;
    if (!s.state.compare_exchange_strong(expected, 1)) continue;
    if (path == s.path) {
      s.state.store(0);
    } else {
      s.state.store(2);
    }
  }
}

void RemoveRegisteredFiles() {
  for (Slot& s : g_slots) {
    if (s.state.load() == 2) unlink(s.path);
  }
}

}  // namespace exit_cleanup
}  // namespace disco
