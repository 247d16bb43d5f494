// Element-wise reduction kernels for every dtype the collectives support, including float16 and
// bfloat16 (computed in float32 and rounded to nearest even). Used by the MPI backend's own ring
// algorithms and by its user-defined MPI_Ops.
#ifndef DISCO_CCL_REDUCE_H_
#define DISCO_CCL_REDUCE_H_

#include <disco/ccl.h>
#include <disco/half.h>
#include <dlpack/dlpack.h>

#include <cstdint>

namespace disco {
namespace ccl {

/// True for the dtypes collectives accept: int8..int64, uint8..uint64, float16, bfloat16,
/// float32, float64 (one lane).
bool IsCollectiveDType(DLDataType dtype);

/// dst[i] = a[i] op b[i] for i < n (dst may alias a or b).
void Reduce(void* dst, const void* a, const void* b, int64_t n, DLDataType dtype, ReduceOp op);
/// data[i] /= divisor (floating types only; for avg).
void DivideBy(void* data, int64_t n, DLDataType dtype, int divisor);

using disco::FloatToHalf;  // disco/half.h
using disco::HalfToFloat;
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_REDUCE_H_
