// weight_arena.h: the 2 MiB-page memory a decode step streams (the weights, the KV cache): aligned
// to a huge page, zeros until written, huge pages not asked for a small block, and a mapping that
// cannot be had refused with a message naming what it was for.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "llama/weight_arena.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::string HugePageMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
}

TEST(WeightArena, IsAlignedToAHugePageAndReadsZeros) {
  auto arena = llama::WeightArena::Make(3 * kMiB, "a test");
  EXPECT_EQ(arena->size(), 4 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena->data()) % (2 * kMiB), 0u);
  size_t nonzero = 0;
  for (size_t i = 0; i < arena->size(); ++i) nonzero += arena->data()[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  arena->data()[arena->size() - 1] = 7;  // the whole size is writable
  EXPECT_LE(arena->HugeBytes(), arena->size());
}

TEST(WeightArena, ASmallBlockGetsNoHugePage) {
  if (HugePageMode() != "madvise") {
    GTEST_SKIP() << "transparent huge pages are '" << HugePageMode()
                 << "', not 'madvise': whether a block gets them is not the arena's";
  }
  auto arena = llama::WeightArena::Make(64 * 1024, "a test");
  for (size_t i = 0; i < 64 * 1024; i += 4096) arena->data()[i] = 1;
  EXPECT_EQ(arena->HugeBytes(), 0u);
}

TEST(WeightArena, AMappingThatCannotBeHadNamesItsUse) {
  try {
    llama::WeightArena::Make(size_t{1} << 62, "the kv cache");
    FAIL() << "a 4 EiB mapping succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("bytes for the kv cache"), std::string::npos) << e.what();
  }
  try {  // rounded up to 2 MiB it would wrap to a small size
    llama::WeightArena::Make(SIZE_MAX - 5, "the kv cache");
    FAIL() << "a mapping of SIZE_MAX - 5 bytes succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("asked for the kv cache"), std::string::npos) << e.what();
  }
}

}  // namespace
