// Which pairs the NCCL backend connects at InitCCL (ccl/nccl/peers.h): the builtins refuse a lone
// send or receive between other pairs, on both sides, so the verdict must be symmetric and match
// the peers InitCCL connects. A pure function: checked here for world sizes a GPU node never has.
#include <gtest/gtest.h>

#include <set>

#include "ccl/nccl/peers.h"

namespace disco {
namespace ccl {
namespace {

// The peers InitCCL connected before the verdict became a function of its own (the reference).
std::set<int> ReferencePeers(int rank, int size, int group_size) {
  std::set<int> peers;
  if (size <= 1) return peers;
  if (size <= kConnectAllMax) {
    for (int r = 0; r < size; ++r) peers.insert(r);
  } else {
    peers.insert((rank + 1) % size);
    peers.insert((rank + size - 1) % size);
    if (rank + group_size < size) peers.insert(rank + group_size);
    if (rank - group_size >= 0) peers.insert(rank - group_size);
  }
  peers.erase(rank);
  return peers;
}

TEST(NcclPeers, SmallWorldsConnectEveryPair) {
  for (int size = 1; size <= kConnectAllMax; ++size) {
    for (int a = 0; a < size; ++a) {
      for (int b = 0; b < size; ++b) {
        EXPECT_EQ(PreConnectedPair(a, b, size, size), a != b) << a << "," << b << " of " << size;
      }
    }
  }
}

TEST(NcclPeers, LargeWorldsConnectRingNeighboursAndAdjacentGroups) {
  // 12 workers in 3 groups of 4: worker 5 talks to 4 and 6 (ring) and 1 and 9 (groups).
  EXPECT_EQ(TalkingPeers(5, 12, 4), (std::set<int>{1, 4, 6, 9}));
  EXPECT_EQ(TalkingPeers(0, 12, 4), (std::set<int>{1, 4, 11}));  // the ring wraps around
  EXPECT_EQ(TalkingPeers(11, 12, 4), (std::set<int>{0, 7, 10}));
  EXPECT_FALSE(PreConnectedPair(0, 2, 12, 4));  // a gather to worker 0 from a far peer
  EXPECT_FALSE(PreConnectedPair(2, 0, 12, 4));
  EXPECT_FALSE(PreConnectedPair(0, 8, 12, 4));  // two groups apart
  EXPECT_TRUE(PreConnectedPair(0, 11, 12, 4));
  EXPECT_EQ(TalkingPeers(3, 9, 9), (std::set<int>{2, 4}));  // one group: the ring only
}

TEST(NcclPeers, MatchesTheReferenceAndIsSymmetric) {
  for (int size = 1; size <= 40; ++size) {
    for (int groups = 1; groups <= size; ++groups) {
      if (size % groups != 0) continue;
      const int group_size = size / groups;
      for (int a = 0; a < size; ++a) {
        EXPECT_EQ(TalkingPeers(a, size, group_size), ReferencePeers(a, size, group_size))
            << "rank " << a << " of " << size << ", groups of " << group_size;
        for (int b = 0; b < size; ++b) {
          EXPECT_EQ(PreConnectedPair(a, b, size, group_size),
                    PreConnectedPair(b, a, size, group_size))
              << a << "," << b << " of " << size << ", groups of " << group_size;
        }
      }
    }
  }
}

TEST(NcclPeers, NoRankIsItsOwnPeerAndOutOfRangeIsNone) {
  EXPECT_FALSE(PreConnectedPair(3, 3, 4, 4));
  EXPECT_FALSE(PreConnectedPair(3, 3, 16, 4));
  EXPECT_FALSE(PreConnectedPair(0, 4, 4, 4));
  EXPECT_FALSE(PreConnectedPair(-1, 0, 4, 4));
  EXPECT_TRUE(TalkingPeers(0, 1, 1).empty());
}

}  // namespace
}  // namespace ccl
}  // namespace disco
