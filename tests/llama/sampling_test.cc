// The head's picks (models/llama/sampling.h): the key order of PackBest, and NucleusFloor against
// transformers' TopPLogitsWarper on known distributions and against a full sort on random ones
// (vocabularies past the first 64 sorted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "llama/sampling.h"

namespace {

// The nucleus floor by the book: every token sorted, probabilities summed until top_p.
float FullSortFloor(const std::vector<float>& l, float t, float top_p) {
  std::vector<float> s = l;
  std::sort(s.begin(), s.end(), std::greater<>());
  double z = 0;
  for (float x : s) z += std::exp((static_cast<double>(x) - s[0]) / t);
  double sum = 0;
  for (float x : s) {
    sum += std::exp((static_cast<double>(x) - s[0]) / t) / z;
    if (sum >= top_p) return x;
  }
  return s.back();
}

TEST(Sampling, PackBestOrdersByValueThenFirstIndex) {
  EXPECT_GT(llama::PackBest(2.0f, 7), llama::PackBest(1.0f, 0));
  EXPECT_GT(llama::PackBest(-1.0f, 3), llama::PackBest(-2.0f, 0));
  EXPECT_GT(llama::PackBest(1.0f, 2), llama::PackBest(1.0f, 5));  // the first maximum
  EXPECT_EQ(llama::PackBest(0.0f, 4), llama::PackBest(-0.0f, 4));
  EXPECT_GT(llama::PackBest(-1e30f, 0),
            llama::PackBest(-std::numeric_limits<float>::infinity(), 0));
  EXPECT_EQ(llama::UnpackIndex(llama::PackBest(3.5f, 31999)), 31999);
}

TEST(Sampling, NucleusFloorOfKnownDistributions) {
  // Probabilities 0.1, 0.2, 0.3, 0.4 at temperature 1.
  const std::vector<float> l = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  EXPECT_EQ(llama::NucleusFloor(l.data(), 4, 1.0f, 0.4f), l[3]);   // 0.4 alone reaches it
  EXPECT_EQ(llama::NucleusFloor(l.data(), 4, 1.0f, 0.41f), l[2]);  // 0.4 + 0.3
  EXPECT_EQ(llama::NucleusFloor(l.data(), 4, 1.0f, 0.7f), l[2]);
  EXPECT_EQ(llama::NucleusFloor(l.data(), 4, 1.0f, 0.95f), l[0]);
  EXPECT_EQ(llama::NucleusFloor(l.data(), 4, 1.0f, 1.0f), l[0]);
  // At temperature 2 the probabilities flatten (proportional to sqrt: 0.4 is 0.32 of them).
  EXPECT_EQ(llama::NucleusFloor(l.data(), 4, 2.0f, 0.4f), l[2]);
  EXPECT_EQ(llama::NucleusFloor(l.data(), 4, 1e-3f, 0.9f), l[3]);  // near greedy
}

TEST(Sampling, NucleusFloorEqualsAFullSort) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (const int64_t v : {1, 5, 64, 65, 300, 32000}) {
    std::vector<float> l(static_cast<size_t>(v));
    for (float& x : l) x = g(rng);
    for (const float t : {0.5f, 1.0f, 2.0f}) {
      for (const float p : {1e-6f, 0.3f, 0.9f, 0.999f, 1.0f}) {
        EXPECT_EQ(llama::NucleusFloor(l.data(), v, t, p), FullSortFloor(l, t, p))
            << "v " << v << " temperature " << t << " top_p " << p;
      }
    }
  }
}

TEST(Sampling, DrawsOnlyAtOrAboveTheFloor) {
  std::vector<float> l(100);
  for (size_t j = 0; j < l.size(); ++j) l[j] = static_cast<float>(j % 10);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const int64_t id =
        llama::UnpackIndex(llama::SampleBest(l.data(), 1000, 100, 5.0f, seed, 3, 8.0f));
    EXPECT_GE(l[static_cast<size_t>(id - 1000)], 8.0f) << "seed " << seed;
  }
  // No token of the slice in the nucleus: the key loses to any other rank's.
  EXPECT_LT(llama::SampleBest(l.data(), 0, 100, 1.0f, 1, 0, 100.0f), llama::PackBest(-1e30f, 0));
}

}  // namespace
