// kernels.h's Attend against a double-precision softmax(q k^T scale) v: every head size the
// AVX-512 kernel takes (16 to 256) and two it leaves to the portable code (48, 96), groups of 1 to
// 8 query heads, position counts on either side of its tiles of 16; scores far apart (e^x down to
// zero); no positions giving zeros; a NaN in one key reaching every output, not hidden. A float16
// cache (keys and values in IEEE half bits) gives exactly what float32 keys and values of the same
// numbers give; ToHalf and FromHalf against q8.h's scalar conversions. Under each kernel set (CTest
// runs this binary once per set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu_kernels_test.h"
#include "llama/kernels.h"
#include "llama/q8.h"

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

// Attend over c's q and the keys and values k, v (c's own: float32; or float16 bits).
template <typename T>
std::vector<float> AttendOf(const Case& c, float scale, const T* k, const T* v) {
  // Every output starts as 5: one the kernel does not write is seen.
  std::vector<float> scores(static_cast<size_t>(c.rep * c.n) + 1, -7.0f), out(c.q.size() + 1, 5.0f);
  llama::Attend(c.q.data(), c.rep, k, v, c.n, c.dim, scale, scores.data(), out.data());
  EXPECT_EQ(scores.back(), -7.0f) << "scores written past rep x n";
  EXPECT_EQ(out.back(), 5.0f) << "out written past rep x dim";
  out.pop_back();
  return out;
}
std::vector<float> AttendOf(const Case& c, float scale) {
  return AttendOf(c, scale, c.k.data(), c.v.data());
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

// Keys and values rounded to float16 (as a float16 cache holds them) and their bits.
struct HalfCase {
  std::vector<uint16_t> k, v;
};
HalfCase Round(Case* c) {
  HalfCase h{std::vector<uint16_t>(c->k.size()), std::vector<uint16_t>(c->v.size())};
  EXPECT_TRUE(llama::ToHalf(c->k.data(), static_cast<int64_t>(c->k.size()), h.k.data()));
  EXPECT_TRUE(llama::ToHalf(c->v.data(), static_cast<int64_t>(c->v.size()), h.v.data()));
  llama::FromHalf(h.k.data(), static_cast<int64_t>(h.k.size()), c->k.data());
  llama::FromHalf(h.v.data(), static_cast<int64_t>(h.v.size()), c->v.data());
  return h;
}

TEST_F(CpuKernels, AttendOverAFloat16CacheIsAttendOverItsValues) {
  std::mt19937 rng(24);
  for (const int64_t dim : {16, 48, 64, 128, 256}) {
    for (const int64_t rep : {1, 3, 8}) {
      for (const int64_t n : {0, 1, 15, 16, 17, 63, 64, 65, 130}) {
        Case c = Random(rep, n, dim, 4.0f, &rng);
        const HalfCase h = Round(&c);
        ASSERT_EQ(AttendOf(c, 0.125f, h.k.data(), h.v.data()), AttendOf(c, 0.125f))
            << "dim " << dim << ", rep " << rep << ", n " << n;
      }
    }
  }
}

// Every float16 bit pattern widened as q8.h's scalar code does (NaN as NaN), and floats across
// float16's range (normal, subnormal, halfway cases, past 65504) rounded alike; the limit flagged.
TEST_F(CpuKernels, HalfConversionsMatchTheScalarOnes) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  llama::FromHalf(all.data(), static_cast<int64_t>(all.size()), wide.data());
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = llama::q8::HalfToFloat(all[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(wide[i])) << "half 0x" << std::hex << i;
    } else {
      ASSERT_EQ(wide[i], want) << "half 0x" << std::hex << i;
    }
  }
  std::vector<float> x;
  std::mt19937 rng(25);
  std::uniform_real_distribution<float> mag(-27.0f, 15.99f);  // 2^-27 .. 65000
  for (int i = 0; i < 20000; ++i) {
    x.push_back((i % 2 != 0 ? -1.0f : 1.0f) * std::exp2(mag(rng)));
  }
  for (size_t i = 0; i < all.size(); ++i) {  // halfway between neighbours: to even
    if (std::isfinite(wide[i]) && (all[i] & 0x7fffu) < 0x7bffu) {
      x.push_back((wide[i] + llama::q8::HalfToFloat(static_cast<uint16_t>(all[i] + 1))) / 2);
    }
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, -65519.99f, 5.96e-8f, 2.98e-8f, 1e-30f}) {
    x.push_back(f);
  }
  std::vector<uint16_t> h(x.size());
  for (size_t n : {x.size(), size_t{7}, size_t{0}}) {  // the vector loop and its tail
    ASSERT_TRUE(llama::ToHalf(x.data(), static_cast<int64_t>(n), h.data()));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], llama::q8::FloatToHalf(x[i])) << "x = " << x[i];
    }
  }
  for (float past : {65520.0f, -70000.0f, 3e38f, -3.4e38f}) {
    for (size_t at : {size_t{0}, size_t{5}, size_t{12}}) {  // a vector's lane and the tail
      std::vector<float> y(13, 1.0f);
      y[at] = past;
      EXPECT_FALSE(llama::ToHalf(y.data(), 13, h.data())) << past << " at " << at;
    }
  }
  // Not finite already: not float16's range to blame (the row goes NaN or infinite as it would).
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    for (size_t at : {size_t{0}, size_t{12}}) {
      std::vector<float> y(13, 1.0f);
      y[at] = bad;
      EXPECT_TRUE(llama::ToHalf(y.data(), 13, h.data())) << bad << " at " << at;
      EXPECT_EQ(std::isnan(bad), std::isnan(llama::q8::HalfToFloat(h[at])));
    }
  }
}

}  // namespace
