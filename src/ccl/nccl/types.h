// NCCL's names for disco's dtypes and reduction operators. Header-only and host-only (nccl.h
// declares no device code), so a unit test checks the tables on machines without a GPU.
#ifndef DISCO_CCL_NCCL_TYPES_H_
#define DISCO_CCL_NCCL_TYPES_H_

#include <disco/ccl.h>
#include <dlpack/dlpack.h>
#include <nccl.h>

#include <optional>

namespace disco {
namespace ccl {

/// The NCCL type of `t`, or nullopt (int16 and uint16, which NCCL lacks; vector lanes).
inline std::optional<ncclDataType_t> NcclTypeOf(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLInt:
      if (t.bits == 8) return ncclInt8;
      if (t.bits == 32) return ncclInt32;
      if (t.bits == 64) return ncclInt64;
      break;
    case kDLUInt:
      if (t.bits == 8) return ncclUint8;
      if (t.bits == 32) return ncclUint32;
      if (t.bits == 64) return ncclUint64;
      break;
    case kDLFloat:
      if (t.bits == 16) return ncclFloat16;
      if (t.bits == 32) return ncclFloat32;
      if (t.bits == 64) return ncclFloat64;
      break;
    case kDLBfloat:
      if (t.bits == 16) return ncclBfloat16;
      break;
  }
  return std::nullopt;
}

inline ncclRedOp_t ToNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_NCCL_TYPES_H_
