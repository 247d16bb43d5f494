// Reduction kernels and the float16/bfloat16 conversions they rely on.
#include <disco/ccl.h>
#include <disco/error.h>
#include <disco/types.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ccl/reduce.h"

namespace disco {
namespace ccl {
namespace {

TEST(HalfTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << h;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << std::hex << h << " -> " << f;
  }
}

TEST(HalfTest, KnownValuesAndRounding) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);                      // largest finite
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);                      // rounds to infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // halfway to it: even (zero)
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // halfway: to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TEST(BFloat16Test, RoundTripAndRounding) {
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBFloat16(f), b) << std::hex << b;
  }
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(257.0f)), 256.0f);  // halfway: to even
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(259.0f)), 260.0f);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

template <typename T>
void ExpectReduce(const char* dtype, ReduceOp op, std::vector<T> a, std::vector<T> b,
                  std::vector<T> want) {
  std::vector<T> out(a.size());
  Reduce(out.data(), a.data(), b.data(), static_cast<int64_t>(a.size()), DataType(dtype), op);
  EXPECT_EQ(out, want) << dtype << " " << ReduceOpName(op);
}

TEST(ReduceTest, IntegerOpsWrapLikeMpi) {
  ExpectReduce<int8_t>("int8", ReduceOp::kSum, {100, -100, 3}, {100, -100, 4}, {-56, 56, 7});
  ExpectReduce<uint8_t>("uint8", ReduceOp::kProd, {16, 3}, {16, 5}, {0, 15});
  ExpectReduce<int64_t>("int64", ReduceOp::kMin, {5, -9}, {7, -10}, {5, -10});
  ExpectReduce<uint64_t>("uint64", ReduceOp::kMax, {5, ~0ull}, {7, 1}, {7, ~0ull});
  ExpectReduce<int16_t>("int16", ReduceOp::kSum, {30000}, {30000}, {-5536});
}

TEST(ReduceTest, FloatingOpsAndAverage) {
  ExpectReduce<float>("float32", ReduceOp::kSum, {1.5f, -2}, {2.5f, 2}, {4, 0});
  ExpectReduce<double>("float64", ReduceOp::kProd, {1.5, -2}, {2, 3}, {3, -6});
  std::vector<uint16_t> a = {FloatToHalf(1.5f), FloatToHalf(-3)},
                        b = {FloatToHalf(2.5f), FloatToHalf(1)};
  std::vector<uint16_t> out(2);
  Reduce(out.data(), a.data(), b.data(), 2, DataType("float16"), ReduceOp::kSum);
  EXPECT_EQ(HalfToFloat(out[0]), 4.0f);
  DivideBy(out.data(), 2, DataType("float16"), 2);
  EXPECT_EQ(HalfToFloat(out[0]), 2.0f);
  EXPECT_EQ(HalfToFloat(out[1]), -1.0f);
  std::vector<uint16_t> c = {FloatToBFloat16(3), FloatToBFloat16(-1)};
  Reduce(out.data(), c.data(), c.data(), 2, DataType("bfloat16"), ReduceOp::kMax);
  EXPECT_EQ(BFloat16ToFloat(out[0]), 3.0f);
  EXPECT_THROW(DivideBy(out.data(), 2, DataType("int32"), 2), ValueError);
}

TEST(ReduceTest, OpSupportAndParsing) {
  EXPECT_TRUE(ReduceOpSupports(ReduceOp::kAvg, DataType("bfloat16")));
  EXPECT_FALSE(ReduceOpSupports(ReduceOp::kAvg, DataType("int32")));
  EXPECT_FALSE(ReduceOpSupports(ReduceOp::kSum, DataType("float32x4")));
  EXPECT_FALSE(ReduceOpSupports(ReduceOp::kSum, DLDataType{kDLUInt, 1, 1}));
  EXPECT_EQ(ParseReduceOp("max"), ReduceOp::kMax);
  EXPECT_THROW(ParseReduceOp("mean"), ValueError);
}

}  // namespace
}  // namespace ccl
}  // namespace disco
