// NCCL's names for disco's dtypes and reduction operators (ccl/nccl/types.h), checked against
// nccl.h on any machine: a wrong mapping (sum for max, say) cannot show on a one-GPU node, where
// every collective is a copy.
#include <gtest/gtest.h>

#include "ccl/nccl/types.h"

namespace disco {
namespace ccl {
namespace {

TEST(NcclTypes, EveryCollectiveDTypeHasItsNcclType) {
  struct Case {
    DLDataType dtype;
    ncclDataType_t nccl;
  } cases[] = {{{kDLInt, 8, 1}, ncclInt8},       {{kDLInt, 32, 1}, ncclInt32},
               {{kDLInt, 64, 1}, ncclInt64},     {{kDLUInt, 8, 1}, ncclUint8},
               {{kDLUInt, 32, 1}, ncclUint32},   {{kDLUInt, 64, 1}, ncclUint64},
               {{kDLFloat, 16, 1}, ncclFloat16}, {{kDLFloat, 32, 1}, ncclFloat32},
               {{kDLFloat, 64, 1}, ncclFloat64}, {{kDLBfloat, 16, 1}, ncclBfloat16}};
  for (const Case& c : cases) {
    std::optional<ncclDataType_t> t = NcclTypeOf(c.dtype);
    ASSERT_TRUE(t.has_value()) << int(c.dtype.code) << "/" << int(c.dtype.bits);
    EXPECT_EQ(*t, c.nccl) << int(c.dtype.code) << "/" << int(c.dtype.bits);
  }
}

TEST(NcclTypes, TypesNcclLacksHaveNone) {
  for (DLDataType t :
       {DLDataType{kDLInt, 16, 1}, DLDataType{kDLUInt, 16, 1}, DLDataType{kDLFloat, 32, 4},
        DLDataType{kDLBfloat, 32, 1}, DLDataType{kDLFloat, 8, 1}}) {
    EXPECT_FALSE(NcclTypeOf(t).has_value()) << int(t.code) << "/" << int(t.bits);
  }
}

TEST(NcclTypes, ReduceOpsMapOneToOne) {
  EXPECT_EQ(ToNcclOp(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(ToNcclOp(ReduceOp::kProd), ncclProd);
  EXPECT_EQ(ToNcclOp(ReduceOp::kMin), ncclMin);
  EXPECT_EQ(ToNcclOp(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(ToNcclOp(ReduceOp::kAvg), ncclAvg);
}

}  // namespace
}  // namespace ccl
}  // namespace disco
