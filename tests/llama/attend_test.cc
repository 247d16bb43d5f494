// kernels.h's Attend against a double-precision softmax(q k^T scale) v: every head size the
// AVX-512 kernel takes (16 to 256) and two it leaves to the portable code (48, 96), groups of 1 to
// 8 query heads, position counts on either side of its tiles of 16; scores far apart (e^x down to
// zero); no positions giving zeros; a NaN in one key reaching every output, not hidden. Under each
// kernel set (CTest runs this binary once per set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu_kernels_test.h"
#include "llama/kernels.h"

namespace {

struct Case {
  int64_t rep, n, dim;
  std::vector<float> q, k, v;
};

Case Random(int64_t rep, int64_t n, int64_t dim, float q_size, std::mt19937* rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  Case c{rep, n, dim, {}, {}, {}};
  c.q.resize(static_cast<size_t>(rep * dim));
  c.k.resize(static_cast<size_t>(n * dim));
  c.v.resize(c.k.size());
  for (float& x : c.q) x = q_size * g(*rng);
  for (float& x : c.k) x = g(*rng);
  for (float& x : c.v) x = g(*rng);
  return c;
}

std::vector<float> AttendOf(const Case& c, float scale) {
  // Every output starts as 5: one the kernel does not write is seen.
  std::vector<float> scores(static_cast<size_t>(c.rep * c.n) + 1, -7.0f), out(c.q.size() + 1, 5.0f);
  llama::Attend(c.q.data(), c.rep, c.k.data(), c.v.data(), c.n, c.dim, scale, scores.data(),
                out.data());
  EXPECT_EQ(scores.back(), -7.0f) << "scores written past rep x n";
  EXPECT_EQ(out.back(), 5.0f) << "out written past rep x dim";
  out.pop_back();
  return out;
}

std::vector<double> Reference(const Case& c, float scale) {
  std::vector<double> out(c.q.size());
  for (int64_t j = 0; j < c.rep; ++j) {
    std::vector<double> s(static_cast<size_t>(c.n));
    double mx = -INFINITY, sum = 0;
    for (int64_t t = 0; t < c.n; ++t) {
      double a = 0;
      for (int64_t d = 0; d < c.dim; ++d) a += double{c.q[j * c.dim + d]} * c.k[t * c.dim + d];
      s[t] = a * scale;
      mx = std::max(mx, s[t]);
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int64_t d = 0; d < c.dim; ++d) {
      double o = 0;
      for (int64_t t = 0; t < c.n; ++t) o += s[t] / sum * c.v[t * c.dim + d];
      out[j * c.dim + d] = o;
    }
  }
  return out;
}

TEST_F(CpuKernels, AttendMatchesADoubleSoftmax) {
  std::mt19937 rng(21);
  for (const int64_t dim : {16, 32, 48, 64, 96, 128, 256}) {
    for (const int64_t rep : {1, 2, 3, 4, 5, 8}) {
      for (const int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 257}) {
        // q's size 1: scores of a few units; 30: hundreds apart, most weights e^x = 0.
        for (const float q_size : {1.0f, 30.0f}) {
          const Case c = Random(rep, n, dim, q_size, &rng);
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          const std::vector<float> out = AttendOf(c, scale);
          const std::vector<double> ref = Reference(c, scale);
          for (size_t i = 0; i < out.size(); ++i) {
            // Scores off by float32's rounding of dim products (times q's size), then e^x's.
            ASSERT_NEAR(out[i], ref[i], 4e-6 * q_size * std::sqrt(static_cast<double>(dim)) + 4e-6)
                << "dim " << dim << ", rep " << rep << ", n " << n << ", q size " << q_size
                << ": output " << i;
          }
        }
      }
    }
  }
}

TEST_F(CpuKernels, AttendOverNoPositionsGivesZeros) {
  std::mt19937 rng(23);
  for (const int64_t dim : {48, 64}) {  // the portable code and the AVX-512 kernel
    const Case c = Random(3, 0, dim, 1.0f, &rng);
    EXPECT_EQ(AttendOf(c, 0.125f), std::vector<float>(static_cast<size_t>(3 * dim), 0.0f))
        << "dim " << dim;
  }
}

TEST_F(CpuKernels, AttendPassesANaNKeyOn) {
  std::mt19937 rng(22);
  for (const int64_t dim : {48, 64}) {
    for (const int64_t n : {1, 16, 40}) {
      Case c = Random(3, n, dim, 1.0f, &rng);
      c.k[static_cast<size_t>((n - 1) * dim + 5)] = NAN;  // the last position's key
      const std::vector<float> out = AttendOf(c, 0.125f);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(std::isnan(out[i]))
            << "dim " << dim << ", n " << n << ", NaN in a key: output " << i << " is " << out[i];
      }
    }
  }
}

}  // namespace
