// Which pairs of ranks the NCCL backend connects point to point at InitCCL. NCCL connects a pair
// at its first operation; a lone ncclSend (or ncclRecv) to a peer not yet connected blocks the host
// until that peer posts its side, which stalls disco's control plane when the peer's call comes in
// a later command (or never). So InitCCL connects, while every rank is there, the pairs that
// disco's point-to-point builtins use, and the builtins refuse a lone send or receive between any
// other pair. No NCCL here: the builtins and the unit tests use it on any build.
#ifndef DISCO_CCL_NCCL_PEERS_H_
#define DISCO_CCL_NCCL_PEERS_H_

#include <set>

namespace disco {
namespace ccl {

/// Worlds of at most this many ranks connect every pair at InitCCL. Larger ones connect only ring
/// neighbours and the same position in the next and previous group: p2p buffers are allocated per
/// peer and channel, so every pair would cost memory quadratic in the world size.
constexpr int kConnectAllMax = 8;

/// Whether ranks `a` and `b` of a world of `size` ranks, in groups of `group_size` contiguous
/// ranks, are connected point to point at InitCCL: every pair in worlds of at most kConnectAllMax
/// ranks; beyond, ring neighbours (a ± 1 modulo size) and a ± group_size. Computed from its
/// arguments alone and symmetric in `a` and `b`, so the two peers of a send and its receive reach
/// the same verdict without talking. False for a == b and for ranks out of range.
inline bool PreConnectedPair(int a, int b, int size, int group_size) {
  if (a == b || a < 0 || b < 0 || a >= size || b >= size) return false;
  if (size <= kConnectAllMax) return true;
  const int distance = a > b ? a - b : b - a;
  return distance == 1 || distance == size - 1 || distance == group_size;
}

/// The peers `rank` connects with at InitCCL: every `peer` with PreConnectedPair(rank, peer, ...).
inline std::set<int> TalkingPeers(int rank, int size, int group_size) {
  std::set<int> peers;
  for (int peer = 0; peer < size; ++peer) {
    if (PreConnectedPair(rank, peer, size, group_size)) peers.insert(peer);
  }
  return peers;
}

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_NCCL_PEERS_H_
