// The decode's streaming products for int8 weights (q8.h, llama.cpp's Q8_0) and the float16 kv
// cache's conversions in AVX2, in a file of
// their own compiled with -mavx2 -mfma -mf16c (kernels_avx2.cc): called only after the CPU was
// found to have those features (kernels.cc's dispatch, DISCO_CPU_KERNELS=avx2 and the fallback of
// the AVX-512 sets for what they do not cover).
#ifndef DISCO_MODELS_LLAMA_KERNELS_AVX2_H_
#define DISCO_MODELS_LLAMA_KERNELS_AVX2_H_

#include <cstdint>

namespace llama::avx2 {

/// y[m, n] = sum_k x[m, k] * w[n, k], w quantized (q8::RowBytes(k) bytes a row): 8 weights at a
/// time widened int8 -> int32 -> float32 in registers, a block's 32 products summed and then
/// scaled by its d (one row of x), or the weights scaled first (more rows: they are reused).
void StreamingQ8(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                 int64_t ldy);

/// q8::Dequantize in AVX2: n quantized rows back to n x k floats (prefill's sgemm reads them).
void DequantizeQ8(const uint8_t* w, int64_t n, int64_t k, float* out);

/// kernels.h's ToHalf and FromHalf by F16C (vcvtps2ph, to nearest even; vcvtph2ps).
bool ToHalf(const float* x, int64_t n, uint16_t* out);
void FromHalf(const uint16_t* h, int64_t n, float* out);

}  // namespace llama::avx2

#endif  // DISCO_MODELS_LLAMA_KERNELS_AVX2_H_
