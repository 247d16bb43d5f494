#include "core/wait_record.h"

#include <atomic>

namespace disco {
namespace wait_record {
namespace {
std::atomic<int> g_peer{-1};
}

void WaitingFor(int peer) { g_peer.store(peer, std::memory_order_relaxed); }
int Peer() { return g_peer.load(std::memory_order_relaxed); }
void Clear() { g_peer.store(-1, std::memory_order_relaxed); }

}  // namespace wait_record
}  // namespace disco
