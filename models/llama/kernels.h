// The CPU kernels of the decoder, in float32 (bfloat16 and int8 weights are widened as they are
// read).
//
// Linear layers compute y = x W^T with W stored [out, in] (Hugging Face's layout, each rank's
// shard compact). A batch of a few rows (decode) goes through a kernel of our own that streams
// every weight row once and forms its dot products with all rows of x while the row is in L1:
// decode is bound by the memory traffic of the weights, and a GEMM would first pack them (copy
// them again). Larger batches (prefill) go to OpenBLAS's cblas_sgemm, for bfloat16 weights through
// a float32 copy of a block of rows at a time, except where our kernel is faster at any batch
// (OneOrderRows: float32 on AVX-512, bfloat16 on AVX512-BF16, int8 with AVX512-VNNI). Hot loops
// are compiled for AVX2+FMA and for the base x86-64 ISA, chosen when the program starts (GCC's
// target_clones); the streaming kernel also in AVX-512 (kernels_avx512.h), bfloat16 there either
// widened or by the CPU's bf16 dot products; int8 weights (q8.h) in AVX2 (kernels_avx2.h),
// widened in registers, and AVX-512 (VNNI byte products). float32 on AVX-512, bfloat16 on
// AVX512-BF16 and int8 on AVX512-VNNI read weights rearranged at load into panels of 64 rows
// (PackF32, PackBf16, PackQ8), a register-blocked product whose outputs are each one chain of
// FMAs (or bf16 dot products, or int8 blocks' sums scaled) along k.
// Which set runs: DISCO_CPU_KERNELS=auto (the default: the widest this CPU and build have),
// avx2, avx512 or avx512bf16 (docs/performance.md).
#ifndef DISCO_MODELS_LLAMA_KERNELS_H_
#define DISCO_MODELS_LLAMA_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace llama {

/// The kernels Linear's streaming products use, per weight dtype, in one line: DISCO_CPU_KERNELS's
/// choice. Throws disco::ValueError naming the value when it is not auto, avx2, avx512 or
/// avx512bf16, or when this CPU (or build) lacks what it names.
std::string CpuKernels();

/// Rows at or below which Linear uses the streaming kernel rather than sgemm.
constexpr int64_t kStreamingRows = 16;

/// How a weight matrix is stored: float32, bfloat16 bits, or int8 in llama.cpp's Q8_0 blocks
/// (q8.h: q8::RowBytes(k) bytes a row, rearranged by PackQ8).
enum class WeightFormat { kF32, kBf16, kQ8 };

/// Rearranges n int8 rows of k weights (as q8::Quantize wrote them) in place into the order the
/// int8 kernel DISCO_CPU_KERNELS chose reads (the AVX-512 kernel's panels of 64 rows; nothing
/// elsewhere): Linear takes int8 weights only after this, once.
void PackQ8(uint8_t* w, int64_t n, int64_t k);

/// Rearranges n float32 rows of k weights in place into the order the float32 kernel
/// DISCO_CPU_KERNELS chose reads (the AVX-512 kernel's panels of 64 rows; nothing elsewhere):
/// Linear takes float32 weights only after this, once.
void PackF32(float* w, int64_t n, int64_t k);

/// Rows [j0, j0 + count) of an n x k float32 matrix PackF32 rearranged, in row order into out
/// (count x k floats): an embedding row of a tied LM head, or the weight as loaded.
void UnpackF32(const float* w, int64_t n, int64_t k, int64_t j0, int64_t count, float* out);

/// The same for bfloat16 weights (the AVX512-BF16 kernel's panels, whose steps are pairs of a
/// row's weights; nothing elsewhere).
void PackBf16(uint16_t* w, int64_t n, int64_t k);
void UnpackBf16(const uint16_t* w, int64_t n, int64_t k, int64_t j0, int64_t count, uint16_t* out);

/// The most rows of x for which Linear forms each row of y in one order whatever the other rows
/// are (our kernels; kernels_test.cc checks it bit for bit): kStreamingRows, or any number
/// (int64_t's max) where our kernel serves every batch (float32 on AVX-512, bfloat16 weights on
/// AVX512-BF16, int8 with AVX512-VNNI).
int64_t OneOrderRows(WeightFormat format);

/// y[m, n] = sum_k x[m, k] * w[n, k] (row-major, y's rows `ldy` apart), w in `format`. `scratch`
/// holds the float32 copies of bfloat16 or int8 blocks for sgemm.
void Linear(const float* x, int64_t m, int64_t k, const void* w, WeightFormat format, int64_t n,
            float* y, int64_t ldy, std::vector<float>* scratch);

/// out = x / sqrt(mean(x^2) + eps) * w, over n elements (Hugging Face's LlamaRMSNorm in float32);
/// out may be x.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out);

/// y += x.
void Add(const float* x, float* y, int64_t n);
/// Each of the `rows` rows of y (n floats each, consecutive) += bias (n floats): a Linear's bias.
void AddBias(const float* bias, float* y, int64_t rows, int64_t n);
/// out = silu(g) * u, silu(v) = v / (1 + exp(-v)).
void SiluMul(const float* g, const float* u, float* out, int64_t n);

/// Attention of `rep` query heads (q: rep x dim, consecutive) that share one kv head, over the n
/// keys and values at k and v (n x dim each, consecutive): out (rep x dim) = softmax(q k^T *
/// scale) v, in float32 (zeros where n is 0). `scores` holds rep x n floats. Where the AVX-512 set
/// is chosen and dim is 16, 32, 64, 128 or 256, attend_avx512.h's kernel, else portable code; e^x
/// by Cephes' expf polynomial in both.
void Attend(const float* q, int64_t rep, const float* k, const float* v, int64_t n, int64_t dim,
            float scale, float* scores, float* out);
/// The same over float16 keys and values (IEEE half bits: a float16 kv cache), each widened
/// exactly to float32 as it is read: the result of Attend over their float32 values.
void Attend(const float* q, int64_t rep, const uint16_t* k, const uint16_t* v, int64_t n,
            int64_t dim, float scale, float* scores, float* out);
/// out = x in float16 (IEEE half bits, to nearest even; F16C where the kernel set has AVX2);
/// false when some finite x[i] has |x[i]| >= 65520, which float16 holds as infinity (an infinity
/// or NaN in x was not float16's doing: it stays what it is, and true).
bool ToHalf(const float* x, int64_t n, uint16_t* out);
/// out = h widened to float32 (exact).
void FromHalf(const uint16_t* h, int64_t n, float* out);

/// Rotary embedding of `heads` vectors of `dim` at v (consecutive), Hugging Face's rotate_half
/// convention: for i < dim/2, (v[i], v[i + dim/2]) rotated by the angle whose cos and sin are
/// cos[i], sin[i].
void Rope(float* v, int64_t heads, int64_t dim, const float* cos, const float* sin);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_KERNELS_H_
