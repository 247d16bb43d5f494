// The decode's streaming products (kernels.h's Linear for a few rows of x) in AVX-512, in a file of
// their own compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (kernels_avx512.cc): called
// only after the CPU was found to have those features (kernels.cc's dispatch).
#ifndef DISCO_MODELS_LLAMA_KERNELS_AVX512_H_
#define DISCO_MODELS_LLAMA_KERNELS_AVX512_H_

#include <cstdint>
#include <vector>

namespace llama::avx512 {

/// y[m, n] = sum_k x[m, k] * w[n, k], float32 weights in PackF32's panels, any m: each output one
/// chain of FMAs along k.
void PackedF32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
               int64_t ldy);

/// Rearranges n rows of k float32 weights in place for PackedF32: each panel of 64 rows (the last
/// one, nv < 64 rows, as it is) as its k steps, the panel's weights of a step side by side.
void PackF32(float* w, int64_t n, int64_t k);

/// Rows [j0, j0 + count) of the n x k matrix PackF32 rearranged, in row order into out.
void UnpackF32(const float* w, int64_t n, int64_t k, int64_t j0, int64_t count, float* out);

/// The same for bfloat16 weights and StreamingBf16Dot: panels of 64 rows whose steps are pairs
/// of a row's weights along k (an odd row's last weight alone after them).
void PackBf16(uint16_t* w, int64_t n, int64_t k);
void UnpackBf16(const uint16_t* w, int64_t n, int64_t k, int64_t j0, int64_t count, uint16_t* out);

/// The streaming product with bfloat16 weights widened exactly to float32 in registers (a 16-bit
/// shift): y[m, n] = sum_k x[m, k] * w[n, k], 16 lanes of FMA.
void StreamingBf16Widen(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                        float* y, int64_t ldy);

/// The same by the bf16 dot-product instruction (vdpbf16ps) on PackBf16's panels, any m: x is
/// first rounded to bfloat16 (to nearest even, into `scratch`), the products of pairs accumulate
/// in float32. x's rounding is the error it adds: each x[i, p] off by at most 2^-9 of itself.
void StreamingBf16Dot(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                      int64_t ldy, std::vector<float>* scratch);

/// The same with int8 weights (q8.h: q8::RowBytes(k) bytes a row, then PackQ8) by AVX512-VNNI
/// byte products: x rounded to int16 per block of 32, the products exact in int32, each block's
/// sum scaled by its d and x's.
void StreamingQ8(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                 int64_t ldy);

/// Rearranges n rows of k int8 weights (q8.h's order) in place for StreamingQ8: panels of 64 rows
/// (the last one fewer), each block's steps of 4 weights of every row side by side as w + 128,
/// then the rows' last k % 4 weights of a short last block, then the block's scales.
void PackQ8(uint8_t* w, int64_t n, int64_t k);

}  // namespace llama::avx512

#endif  // DISCO_MODELS_LLAMA_KERNELS_AVX512_H_
