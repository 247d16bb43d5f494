// host_memory.h: what the workers can still take, and the refusal of buffers past it, each limit
// weighed against the needs of all the workers it binds (a host's memory binds all its ranks,
// a cgroup only those under it).
#include "llama/host_memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

llama::MemoryLimit Limit(uint64_t id, int64_t room, const std::string& what) {
  llama::MemoryLimit l;
  l.id = id;
  l.room = room;
  l.what = what;
  return l;
}

TEST(HostMemory, ReadsThisHostsLimitFirst) {
  std::ifstream meminfo("/proc/meminfo");
  if (!meminfo) GTEST_SKIP() << "no /proc/meminfo";
  const std::vector<llama::MemoryLimit> limits = llama::ReadMemoryLimits();
  ASSERT_FALSE(limits.empty());
  EXPECT_GT(limits[0].room, 0);
  EXPECT_NE(limits[0].what.find("MemAvailable"), std::string::npos) << limits[0].what;
  EXPECT_LE(limits.size(), static_cast<size_t>(llama::kMaxMemoryLimits));
}

TEST(HostMemory, AHostsRanksAreCountedTogether) {
  const auto host = Limit(7, 10 * kGiB, "host vm");
  const std::vector<std::vector<llama::MemoryLimit>> limits = {{host}, {host}};
  EXPECT_EQ(llama::MemoryShortfall({4 * kGiB, 4 * kGiB}, limits, 0, "the state", "lower it"), "");
  EXPECT_EQ(llama::MemoryShortfall({6 * kGiB, 6 * kGiB}, limits, 1, "the state", "lower it"),
            "the state needs 6.00 GiB per worker, 12.00 GiB for the 2 workers bound by host vm, "
            "more than the 10.00 GiB it can give (90% of its free memory, and swap); lower it");
}

TEST(HostMemory, ACgroupBindsOnlyTheRanksUnderIt) {
  const auto host = Limit(7, 20 * kGiB, "host vm");
  // Each rank in a cgroup of its own: 0.6 GiB each fits 1 GiB each.
  std::vector<std::vector<llama::MemoryLimit>> own = {{host, Limit(1, kGiB, "cgroup a")},
                                                      {host, Limit(2, kGiB, "cgroup b")}};
  EXPECT_EQ(llama::MemoryShortfall({kGiB * 6 / 10, kGiB * 6 / 10}, own, 0, "s", "x"), "");
  // Both in one: 1.2 GiB does not.
  std::vector<std::vector<llama::MemoryLimit>> shared = {{host, Limit(1, kGiB, "cgroup a")},
                                                         {host, Limit(1, kGiB, "cgroup a")}};
  EXPECT_NE(llama::MemoryShortfall({kGiB * 6 / 10, kGiB * 6 / 10}, shared, 0, "s", "x")
                .find("for the 2 workers bound by cgroup a"),
            std::string::npos);
  // Only worker 1 limited, past it: worker 0 names worker 1's limit, worker 1 its own.
  std::vector<std::vector<llama::MemoryLimit>> one = {{host}, {host, Limit(3, kGiB / 2, "c")}};
  EXPECT_NE(llama::MemoryShortfall({kGiB, kGiB}, one, 0, "s", "x")
                .find("for the 1 worker bound by worker 1's memory limit"),
            std::string::npos);
  EXPECT_NE(llama::MemoryShortfall({kGiB, kGiB}, one, 1, "s", "x").find("bound by c, more"),
            std::string::npos);
  // No limits known (no /proc/meminfo): nothing refused.
  EXPECT_EQ(llama::MemoryShortfall({64 * kGiB}, {{}}, 0, "s", "x"), "");
}

}  // namespace
