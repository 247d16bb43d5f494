// kernels.h's streaming products form each row of y the same, bit for bit, whatever the other
// rows of x are: disco-llm-server's passes put a request's rows beside others', and its greedy
// tokens must be those of the request alone. Every row count up to OneOrderRows (35 at most,
// past two turns of kStreamingRows where it has no limit) against each row alone, for float32,
// bfloat16 and int8 weights, row lengths that reach every tail of the kernels, under the set
// DISCO_CPU_KERNELS chooses (CTest runs this binary once per set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels_test.h"
#include "llama/kernels.h"
#include "llama/q8.h"

namespace {

using llama::WeightFormat;

struct Weights {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> q8;
  const void* Of(WeightFormat f) const {
    return f == WeightFormat::kF32    ? static_cast<const void*>(f32.data())
           : f == WeightFormat::kBf16 ? static_cast<const void*>(bf16.data())
                                      : static_cast<const void*>(q8.data());
  }
};

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

Weights Random(int64_t n, int64_t k, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Weights w;
  w.f32.resize(static_cast<size_t>(n * k));
  for (float& v : w.f32) v = u(*rng);
  for (float v : w.f32) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    w.bf16.push_back(static_cast<uint16_t>(bits >> 16));
  }
  w.q8.resize(static_cast<size_t>(n * llama::q8::RowBytes(k)));
  llama::q8::Quantize(w.f32.data(), n, k, w.q8.data(), "test");
  llama::PackQ8(w.q8.data(), n, k);
  llama::PackF32(w.f32.data(), n, k);
  llama::PackBf16(w.bf16.data(), n, k);
  return w;
}

TEST_F(CpuKernels, EachRowIsTheSameWhateverTheBatch) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> scratch;
  const int64_t n = 75, most = 2 * llama::kStreamingRows + 3;  // a panel of 64 rows and 11
  for (const int64_t k : {16, 40, 96, 200, 768, 1000, 2096, 4160}) {
    const Weights w = Random(n, k, &rng);
    std::vector<float> x(static_cast<size_t>(most * k));
    for (float& v : x) v = u(rng);
    for (const WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kQ8}) {
      // Past kStreamingRows where the streaming kernel serves every batch (in turns).
      const int64_t rows = std::min(most, llama::OneOrderRows(f));
      std::vector<float> alone(static_cast<size_t>(rows * n));
      for (int64_t i = 0; i < rows; ++i) {
        llama::Linear(x.data() + i * k, 1, k, w.Of(f), f, n, alone.data() + i * n, n, &scratch);
      }
      for (int64_t m = 2; m <= rows; ++m) {
        std::vector<float> y(static_cast<size_t>(m * n));
        llama::Linear(x.data(), m, k, w.Of(f), f, n, y.data(), n, &scratch);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_EQ(Bits(y[i * n + j]), Bits(alone[i * n + j]))
                << "format " << static_cast<int>(f) << ", k " << k << ": row " << i << " of " << m
                << ", column " << j << ": " << y[i * n + j] << " in the batch, " << alone[i * n + j]
                << " alone";
          }
        }
      }
    }
  }
}

// A NaN or an infinity in a row of x makes that row's outputs non-finite under every kernel set
// and dtype (the AVX-512 int8 kernel rounds x to int16, where a NaN once became -32768 and the
// row stayed finite), and leaves the other rows of the batch as they were.
TEST_F(CpuKernels, ANonFiniteInputIsNotHidden) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> scratch;
  const int64_t n = 5, k = 200;
  const Weights w = Random(n, k, &rng);
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    for (const int64_t m : {int64_t{1}, int64_t{3}, llama::kStreamingRows, int64_t{17}}) {
      std::vector<float> x(static_cast<size_t>(m * k));
      for (float& v : x) v = u(rng);
      x[static_cast<size_t>((m - 1) * k + 70)] = bad;  // in the last row, in its third block
      for (const WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kQ8}) {
        std::vector<float> y(static_cast<size_t>(m * n));
        llama::Linear(x.data(), m, k, w.Of(f), f, n, y.data(), n, &scratch);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            EXPECT_EQ(std::isfinite(y[i * n + j]), i != m - 1)
                << "format " << static_cast<int>(f) << ", " << bad << " in row " << m - 1 << " of "
                << m << ": output (" << i << ", " << j << ") is " << y[i * n + j];
          }
        }
      }
    }
  }
}

// RmsNorm of rows whose squares pass float's range (a checkpoint with huge but finite values):
// the normalized row, as a float64 reference gives it, not the zeros that 1 / inf makes; in place
// too (q_norm and k_norm write over their input); an infinite or NaN value still shows as NaN.
TEST(RmsNorm, RowsPastFloatsSquaresAreNormalizedNotZeroed) {
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int64_t n : {1, 7, 64, 768}) {
    for (const float size : {1.0f, 1e18f, 1e20f, 1e30f, 3e38f}) {
      std::vector<float> x(static_cast<size_t>(n)), w(x.size()), out(x.size());
      for (float& v : x) v = u(rng) * size;
      for (float& v : w) v = u(rng);
      double ss = 0;
      for (const float v : x) ss += double{v} * v;
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-5);
      llama::RmsNorm(x.data(), w.data(), n, 1e-5f, out.data());
      std::vector<float> in_place = x;
      llama::RmsNorm(in_place.data(), w.data(), n, 1e-5f, in_place.data());
      for (int64_t i = 0; i < n; ++i) {
        const double ref = w[i] * (x[i] * inv);
        ASSERT_NEAR(out[i], ref, 1e-5 * std::max(1.0, std::abs(ref)))
            << "n " << n << ", values of " << size << ": element " << i;
        ASSERT_EQ(Bits(in_place[i]), Bits(out[i])) << "in place, n " << n << ", element " << i;
      }
      x[static_cast<size_t>(n / 2)] = INFINITY;
      llama::RmsNorm(x.data(), w.data(), n, 1e-5f, out.data());
      EXPECT_TRUE(std::isnan(out[static_cast<size_t>(n / 2)])) << "n " << n << ", " << size;
    }
  }
}

// float32 and bfloat16 weights as PackF32 and PackBf16 left them (the AVX-512 kernels' panels of
// 64 rows, a last panel of fewer rows, an odd row's last bfloat16 weight alone) give back every
// row as given (UnpackF32, UnpackBf16), and Linear's products against a double reference, at
// batches that take every tile height and past the panels' span (prefill).
template <typename T>
void CheckPanels(WeightFormat f, void (*pack)(T*, int64_t, int64_t),
                 void (*unpack)(const T*, int64_t, int64_t, int64_t, int64_t, T*)) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> scratch;
  for (const int64_t n : {1, 11, 64, 75, 200}) {
    for (const int64_t k : {1, 17, 300}) {
      std::vector<T> given(static_cast<size_t>(n * k));
      std::vector<float> wf(given.size());  // the weights' values
      for (size_t i = 0; i < given.size(); ++i) {
        const float v = u(rng);
        if constexpr (sizeof(T) == 2) {
          uint32_t bits = Bits(v) & 0xffff0000u;
          given[i] = static_cast<T>(bits >> 16);
          std::memcpy(&wf[i], &bits, 4);
        } else {
          given[i] = wf[i] = v;
        }
      }
      std::vector<T> w = given, back(given.size());
      pack(w.data(), n, k);
      unpack(w.data(), n, k, 0, n, back.data());
      ASSERT_EQ(back, given) << n << " x " << k;
      const int64_t j0 = n / 3, count = n - j0;
      unpack(w.data(), n, k, j0, count, back.data());
      ASSERT_TRUE(std::equal(back.begin(), back.begin() + count * k, given.begin() + j0 * k))
          << n << " x " << k << ", rows " << j0 << " on";
      for (const int64_t m : {1, 5, 6, 7, 13, 40}) {
        std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * (n + 3)));
        for (float& v : x) v = u(rng);
        llama::Linear(x.data(), m, k, w.data(), f, n, y.data(), n + 3, &scratch);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, size = 0;
            for (int64_t p = 0; p < k; ++p) {
              ref += double{x[i * k + p]} * wf[j * k + p];
              size += std::abs(double{x[i * k + p]} * wf[j * k + p]);
            }
            // x rounded to bfloat16 where the kernel takes it so (2^-9 of each); k float32 sums.
            const double bound =
                size * ((sizeof(T) == 2 ? 0x1p-8 : 0.0) + static_cast<double>(k) * 0x1p-23) + 1e-30;
            ASSERT_NEAR(y[i * (n + 3) + j], ref, bound)
                << "format " << static_cast<int>(f) << ", " << n << " x " << k << ", batch " << m
                << ": output (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

TEST_F(CpuKernels, PanelsKeepEveryRow) {
  CheckPanels<float>(WeightFormat::kF32, llama::PackF32, llama::UnpackF32);
  CheckPanels<uint16_t>(WeightFormat::kBf16, llama::PackBf16, llama::UnpackBf16);
}

}  // namespace
