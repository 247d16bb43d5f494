// host_memory.h: what a node can still hold, and the refusal of a state past it, counted for
// every worker of the node (each rank alone may fit while all of them together do not).
#include "llama/host_memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(HostMemory, ReadsWhatThisMachineHasFree) {
  const llama::HostMemory m = llama::ReadHostMemory();
  std::ifstream meminfo("/proc/meminfo");
  if (!meminfo) GTEST_SKIP() << "no /proc/meminfo";
  ASSERT_GT(m.available, 0);
  EXPECT_GE(m.swap, 0);
  EXPECT_FALSE(m.source.empty());
}

TEST(HostMemory, ANodeOfWorkersIsCountedWhole) {
  llama::HostMemory m;
  m.available = 10 * kGiB;
  m.swap = 0;
  m.source = "MemAvailable";
  const size_t six = 6 * static_cast<size_t>(kGiB);
  EXPECT_EQ(llama::NodeMemoryShortfall(six, 1, m, "the cache", "lower it"), "");
  EXPECT_EQ(llama::NodeMemoryShortfall(six, 2, m, "the cache", "lower it"),
            "the cache needs 6.00 GiB per worker, 12.00 GiB for the 2 workers on this node, more "
            "than it can hold: 10.00 GiB available (MemAvailable) and 0.00 GiB of swap; lower it");
  m.swap = 4 * kGiB;  // fits with swap (CheckNodeMemory warns)
  EXPECT_EQ(llama::NodeMemoryShortfall(six, 2, m, "the cache", "lower it"), "");
  m.available = -1;  // unknown: nothing refused
  EXPECT_EQ(llama::NodeMemoryShortfall(six, 64, m, "the cache", "lower it"), "");
}

}  // namespace
