// int8 weights (models/llama/q8.h, llama.cpp's Q8_0): float16 conversions, quantization of known
// blocks (zeros, a max exactly representable, a short last block), refusals, and kernels.h's
// Linear on int8 weights against q8::StreamingRef under the kernel set DISCO_CPU_KERNELS chooses
// (CTest runs this binary once with avx2 and once with avx512).
#include <disco/error.h>
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

using llama::q8::Blocks;
using llama::q8::FloatToHalf;
using llama::q8::HalfToFloat;
using llama::q8::RowBytes;

uint16_t ScaleBits(const std::vector<uint8_t>& row, int64_t k, int64_t b) {
  uint16_t h;
  std::memcpy(&h, row.data() + k + 2 * b, 2);
  return h;
}

TEST(Q8, HalfConversions) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);          // rounds past the largest: infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 1);  // the smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0);  // below half of it: zero
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // a tie: to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Every finite float16 back and forth.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

TEST(Q8, KnownBlocks) {
  // Block 0: zeros (d = 0, q = 0: no NaN). Block 1: -127..127 stepping by 8 and 127 itself
  // (d = 1, exact: q = w). Block 2 (short, 8 weights): its own scale, max 0.5 -> d = 0.5/127.
  const int64_t k = 72;
  std::vector<float> w(k, 0.0f);
  for (int i = 0; i < 32; ++i) w[32 + i] = static_cast<float>(-127 + 8 * i);
  w[63] = 127.0f;
  for (int i = 0; i < 8; ++i) w[64 + i] = 0.5f * static_cast<float>(i - 4) / 4.0f;
  std::vector<uint8_t> q(RowBytes(k));
  ASSERT_EQ(Blocks(k), 3);
  ASSERT_EQ(RowBytes(k), 72 + 6);
  llama::q8::Quantize(w.data(), 1, k, q.data(), "test");
  EXPECT_EQ(ScaleBits(q, k, 0), 0);
  EXPECT_EQ(ScaleBits(q, k, 1), 0x3c00);  // 1.0
  EXPECT_EQ(HalfToFloat(ScaleBits(q, k, 2)), HalfToFloat(FloatToHalf(0.5f / 127.0f)));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(static_cast<int8_t>(q[i]), 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(static_cast<int8_t>(q[32 + i]), w[32 + i]);
  EXPECT_EQ(static_cast<int8_t>(q[64]), -127);  // -0.5 is the block's max |w|
  std::vector<float> back(k);
  llama::q8::Dequantize(q.data(), 1, k, back.data());
  for (int64_t p = 0; p < 64; ++p) EXPECT_EQ(back[p], w[p]) << p;  // zeros and exact integers
  const float d = 0.5f / 127.0f;
  for (int64_t p = 64; p < k; ++p) EXPECT_LE(std::fabs(back[p] - w[p]), 0.57f * d) << p;
}

// Blocks whose scale is a subnormal float16 (max |w| under 127 x 2^-14): q against the scale as
// stored, so each weight is off by at most half of it; llama.cpp's way (q against the float32
// scale) left the block of max 6.25e-6 off by 22%. Under 2^-25 x 127 the least step is stored.
TEST(Q8, TinyBlocksAgainstTheStoredScale) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t k = 128;
  const float maxes[4] = {5e-3f, 6.25e-6f, 4e-7f, 1e-9f};
  std::vector<float> w(k);
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t p = 0; p < 32; ++p) w[b * 32 + p] = u(rng) * maxes[b];
    w[b * 32] = maxes[b];
  }
  std::vector<uint8_t> q(RowBytes(k));
  llama::q8::Quantize(w.data(), 1, k, q.data(), "test");
  std::vector<float> back(k);
  llama::q8::Dequantize(q.data(), 1, k, back.data());
  for (int64_t b = 0; b < 4; ++b) {
    const float d = HalfToFloat(ScaleBits(q, k, b));
    EXPECT_GT(d, 0.0f) << "block " << b;
    for (int64_t p = b * 32; p < b * 32 + 32; ++p) {
      EXPECT_LE(std::fabs(back[p] - w[p]), 0.5f * d * (1.0f + 1e-6f)) << "block " << b << ", " << p;
    }
  }
  // Relative to the block's largest: the first two within 1%.
  for (int64_t p = 0; p < 64; ++p) {
    EXPECT_LE(std::fabs(back[p] - w[p]), 0.01f * maxes[p / 32]) << p;
  }
}

TEST(Q8, RandomRoundTripWithinBound) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const int64_t n = 7, k = 100;
  std::vector<float> w(n * k), back(n * k);
  for (float& v : w) v = nd(rng);
  std::vector<uint8_t> q(n * RowBytes(k));
  llama::q8::Quantize(w.data(), n, k, q.data(), "test");
  llama::q8::Dequantize(q.data(), n, k, back.data());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) {
      const int64_t b0 = p / 32 * 32, b1 = std::min(k, b0 + 32);
      float amax = 0.0f;
      for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(w[j * k + i]));
      // d/2 for q's rounding, 127 d 2^-11 for d's float16 rounding.
      ASSERT_LE(std::fabs(back[j * k + p] - w[j * k + p]), 0.5625f * amax / 127.0f) << j << p;
    }
  }
}

TEST(Q8, RefusesNonFiniteAndOverflow) {
  std::vector<float> w(32, 1.0f);
  std::vector<uint8_t> q(RowBytes(32));
  w[5] = std::nanf("");
  try {
    llama::q8::Quantize(w.data(), 1, 32, q.data(), "weight 'x.weight'");
    FAIL() << "no error";
  } catch (const disco::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'x.weight': row 0, column 5 is nan"),
              std::string::npos)
        << e.what();
  }
  w[5] = 127.0f * 70000.0f;
  try {
    llama::q8::Quantize(w.data(), 1, 32, q.data(), "weight 'y.weight'");
    FAIL() << "no error";
  } catch (const disco::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("overflows float16"), std::string::npos) << e.what();
  }
}

// Linear on int8 weights (PackQ8's order) by the kernel set chosen, against the reference on
// q8.h's order (within float32's rounding and, on AVX-512, x's int16 rounding): m rows of x from 1
// to 5 and 17 (sgemm on dequantized blocks, or on AVX-512 the panels in tiles of 2 rows, and past
// one tile in spans of panels), k with and without a short last block (its last step of 1, 2, 3
// or 4 weights: 37, 1030, 63, 200), rows under and over 4 KiB, n in a panel of 64 rows, under and
// over it (130 rows of 4100: three spans).
// n x k random weights in (-1, 1), quantized (q8.h's order), packed for Linear (PackQ8) and read
// back.
struct Q8Weights {
  std::vector<uint8_t> q, packed;
  std::vector<float> deq;
};
Q8Weights RandomQ8(int64_t n, int64_t k, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(n * k);
  for (float& v : w) v = u(*rng);
  Q8Weights r{std::vector<uint8_t>(n * RowBytes(k)), {}, std::vector<float>(n * k)};
  llama::q8::Quantize(w.data(), n, k, r.q.data(), "test");
  r.packed = r.q;
  llama::PackQ8(r.packed.data(), n, k);
  llama::q8::Dequantize(r.q.data(), n, k, r.deq.data());
  return r;
}

TEST_F(CpuKernels, Q8MatchesTheReference) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> scratch;
  for (const int64_t k : {32, 37, 63, 64, 200, 768, 1030, 4100}) {  // 4100: rows over 4 KiB
    for (const int64_t n : {1, 5, 13, 64, 130}) {
      const Q8Weights wq = RandomQ8(n, k, &rng);
      const std::vector<float>& deq = wq.deq;
      for (const int64_t m : {1, 2, 3, 4, 5, 17}) {
        std::vector<float> x(m * k), y(m * n, NAN), ref(m * n);
        for (float& v : x) v = u(rng);
        llama::Linear(x.data(), m, k, wq.packed.data(), llama::WeightFormat::kQ8, n, y.data(), n,
                      &scratch);
        llama::q8::StreamingRef(x.data(), m, k, wq.q.data(), n, ref.data(), n);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            // Float32 rounding, and the AVX-512 kernel's int16 x: each x off by at most half its
            // block's max |x| / 32639.
            float mag = 0.0f, xq = 0.0f;
            for (int64_t p = 0; p < k; ++p) mag += std::fabs(x[i * k + p] * deq[j * k + p]);
            for (int64_t b = 0; b < k; b += 32) {
              float amax = 0.0f, wsum = 0.0f;
              for (int64_t p = b; p < std::min<int64_t>(k, b + 32); ++p) {
                amax = std::max(amax, std::fabs(x[i * k + p]));
                wsum += std::fabs(deq[j * k + p]);
              }
              xq += wsum * amax / 32639.0f / 2.0f;
            }
            ASSERT_NEAR(y[i * n + j], ref[i * n + j], 1e-5f * mag + xq)
                << "m " << m << " k " << k << " n " << n << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// Rows of tiny activations (a norm weight of 1e-36 makes them) keep their precision: the AVX-512
// kernel's block scales (max |x| / 32639) and their products with the weights' underflowed, which
// left such rows' outputs wrong by more than their own size. Also a row whose first block is
// 2^-120 of the rest (that block may count as zeros: its part is below float32's precision).
TEST_F(CpuKernels, Q8TinyRowsKeepTheirPrecision) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> scratch;
  const int64_t k = 600, n = 7, m = 4;
  const Q8Weights wq = RandomQ8(n, k, &rng);
  const std::vector<float>& deq = wq.deq;
  const float scales[m] = {1e-30f, 1e-36f, 3e-38f, 1.0f};
  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) x[i * k + p] = u(rng) * scales[i];
  }
  for (int64_t p = 0; p < 32; ++p) x[3 * k + p] *= 0x1p-120f;
  std::vector<float> y(m * n, NAN);
  llama::Linear(x.data(), m, k, wq.packed.data(), llama::WeightFormat::kQ8, n, y.data(), n,
                &scratch);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0.0, mag = 0.0;  // in double: no underflow in the reference
      for (int64_t p = 0; p < k; ++p) {
        exact += static_cast<double>(x[i * k + p]) * deq[j * k + p];
        mag += std::fabs(static_cast<double>(x[i * k + p]) * deq[j * k + p]);
      }
      EXPECT_NEAR(y[i * n + j], exact, 1e-4 * mag)
          << "row " << i << " (x of about " << scales[i] << "), column " << j;
    }
  }
}

// Found by attacking the int8 panels (2026-12-06): x's block scale times the weights' overflowed
// where x reached 3e38 (0 x inf: NaN for a block whose integer sum was 0) or underflowed in a
// block of tiny x beside a block of ordinary ones (a row not rescaled: outputs off by up to all of
// themselves); and k = 0 above 2 rows of x divided by zero. The product is now (t dw) dx.
TEST_F(CpuKernels, Q8ScalesNeitherOverflowNorUnderflowAlone) {
  std::vector<float> scratch;
  auto product = [&](const std::vector<float>& x, const std::vector<float>& w, double* exact) {
    const int64_t k = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(RowBytes(k));
    llama::q8::Quantize(w.data(), 1, k, q.data(), "test");
    std::vector<float> deq(k);
    llama::q8::Dequantize(q.data(), 1, k, deq.data());
    *exact = 0.0;
    for (int64_t p = 0; p < k; ++p) *exact += static_cast<double>(x[p]) * deq[p];
    llama::PackQ8(q.data(), 1, k);
    float y = NAN;
    llama::Linear(x.data(), 1, k, q.data(), llama::WeightFormat::kQ8, 1, &y, 1, &scratch);
    return y;
  };
  {  // x[0] = 3e38 meets a zero weight; x[1] = 1 (lost to x's int16 rounding) meets 8e6
    std::vector<float> x(32, 0.0f), w(32, 0.0f);
    x[0] = 3e38f, x[1] = 1.0f, w[1] = 8e6f;
    double exact;
    const float y = product(x, w, &exact);
    EXPECT_TRUE(std::isfinite(y)) << y;
    EXPECT_NEAR(y, exact, 3e38 / 32639.0 / 2.0 * 8e6 * 1.01) << "x's rounding at most";
  }
  for (const float v : {1e-30f, 1e-32f, 1e-33f, 3e-34f}) {  // block 0: ones x zeros, block 1: v
    for (const float wv : {1e-3f, 1e-6f}) {
      std::vector<float> x(64, 1.0f), w(64, 0.0f);
      for (int p = 32; p < 64; ++p) x[p] = v, w[p] = wv;
      double exact;
      const float y = product(x, w, &exact);
      EXPECT_NEAR(y, exact, 1e-5 * exact + 1e-44) << "x of " << v << ", weights " << wv;
    }
  }
  for (const int64_t m : {1, 2, 3, 17}) {  // k = 0: every output 0
    std::vector<float> x(1, 1.0f), y(m * 2, NAN);
    std::vector<uint8_t> w(1);
    llama::PackQ8(w.data(), 2, 0);
    llama::Linear(x.data(), m, 0, w.data(), llama::WeightFormat::kQ8, 2, y.data(), 2, &scratch);
    for (const float v : y) EXPECT_EQ(v, 0.0f) << "m " << m;
  }
}

}  // namespace
