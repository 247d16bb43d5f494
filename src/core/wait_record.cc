#include "core/wait_record.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/text.h"

namespace disco {
namespace wait_record {
namespace {
std::atomic<int> g_peer{-1};
std::atomic<const char*> g_collective{nullptr};
// The command thread writes, the watchdog's reads: relaxed atomics, the first byte last (a reader
// in between sees "" rather than a mix of two texts).
std::atomic<char> g_activity[kActivityBytes];

// Or a text that outlives the scope (a literal), by its address alone: one store.
std::atomic<const char*> g_activity_literal{nullptr};

void SetActivity(const char* text, size_t n) {
  n = std::min(n, kActivityBytes - 1);
  g_activity[0].store('\0', std::memory_order_relaxed);
  for (size_t i = 1; i < n; ++i) g_activity[i].store(text[i], std::memory_order_relaxed);
  g_activity[n].store('\0', std::memory_order_relaxed);
  if (n > 0) g_activity[0].store(text[0], std::memory_order_release);
}
}  // namespace

void WaitingFor(int peer) { g_peer.store(peer, std::memory_order_relaxed); }
int Peer() { return g_peer.load(std::memory_order_relaxed); }
void InCollective(const char* op) { g_collective.store(op, std::memory_order_relaxed); }
const char* Collective() { return g_collective.load(std::memory_order_relaxed); }
void Clear() {
  g_peer.store(-1, std::memory_order_relaxed);
  g_collective.store(nullptr, std::memory_order_relaxed);
  g_activity[0].store('\0', std::memory_order_relaxed);
  g_activity_literal.store(nullptr, std::memory_order_relaxed);
}

void Activity(char* out, size_t cap) {
  if (cap == 0) return;
  if (const char* literal = g_activity_literal.load(std::memory_order_acquire)) {
    const size_t n = std::min(cap - 1, std::strlen(literal));
    std::memcpy(out, literal, n);
    out[n] = '\0';
    return;
  }
  const size_t n = std::min(cap, kActivityBytes);
  out[0] = g_activity[0].load(std::memory_order_acquire);
  for (size_t i = 1; i < n; ++i) out[i] = g_activity[i].load(std::memory_order_relaxed);
  text::SignalSafePrintableUtf8(out, n);
}

Doing::Doing(const std::string& text) { SetActivity(text.data(), text.size()); }
Doing::Doing(const char* literal) : literal_(true) {
  g_activity_literal.store(literal, std::memory_order_release);
}
Doing::~Doing() {
  if (literal_) {
    g_activity_literal.store(nullptr, std::memory_order_relaxed);
  } else {
    g_activity[0].store('\0', std::memory_order_relaxed);
  }
}

}  // namespace wait_record
}  // namespace disco
