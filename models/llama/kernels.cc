#include "llama/kernels.h"

#include <cblas.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <disco/error.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "llama/expf_poly.h"
#include "llama/q8.h"

#if DISCO_LLAMA_AVX2
#include "llama/kernels_avx2.h"
#endif
#if DISCO_LLAMA_AVX512
#include "llama/attend_avx512.h"
#include "llama/kernels_avx512.h"
#endif

// Hot loops get an AVX2+FMA clone (x86-64-v3: chosen by the CPU's features, so on AMD and Intel
// alike) beside the base one (x86-64 with GCC; elsewhere one version).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LLAMA_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LLAMA_KERNEL
#endif
#define LLAMA_INLINE inline __attribute__((always_inline))

namespace llama {
namespace {

// Eight floats; GCC lowers the operations to whatever vector width the clone's target has.
typedef float V8 __attribute__((vector_size(32)));
typedef uint16_t U16x8 __attribute__((vector_size(16)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));

LLAMA_INLINE V8 Load(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
LLAMA_INLINE V8 Load(const uint16_t* p) {  // eight bfloat16 values, widened
  U16x8 h;
  std::memcpy(&h, p, sizeof h);
  U32x8 w = __builtin_convertvector(h, U32x8) << 16;
  V8 v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}
LLAMA_INLINE float Widen(float v) { return v; }
LLAMA_INLINE float Widen(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
LLAMA_INLINE float Sum(V8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// y[i, j..j+R) for MB rows of x at once: R weight rows stream through (the next R prefetched),
// R x MB accumulators. Decode is bound by the weights' memory traffic: every weight is read once,
// and prefetching a block ahead keeps enough of the stream in flight.
template <int R, int MB, typename W>
LLAMA_INLINE void Block(const float* x, int64_t k, const W* w, float* y, int64_t ldy) {
  V8 acc[MB][R];
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = V8{};
  }
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    V8 wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = Load(w + r * k + p);
      __builtin_prefetch(w + (R + r) * k + p, 0, 0);
    }
    for (int i = 0; i < MB; ++i) {
      const V8 xv = Load(x + i * k + p);
      for (int r = 0; r < R; ++r) acc[i][r] += xv * wv[r];
    }
  }
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) {
      float s = Sum(acc[i][r]);
      for (int64_t q = p; q < k; ++q) s += x[i * k + q] * Widen(w[r * k + q]);
      y[i * ldy + r] = s;
    }
  }
}

// Rows [i, m) of x against R weight rows, in blocks of up to MB rows.
template <int R, int MB, typename W>
LLAMA_INLINE void Rows(const float* x, int64_t m, int64_t k, const W* w, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + MB <= m; i += MB) Block<R, MB>(x + i * k, k, w, y + i * ldy, ldy);
  switch (m - i) {
    case 3:
      Block<R, 3>(x + i * k, k, w, y + i * ldy, ldy);
      break;
    case 2:
      Block<R, 2>(x + i * k, k, w, y + i * ldy, ldy);
      break;
    case 1:
      Block<R, 1>(x + i * k, k, w, y + i * ldy, ldy);
      break;
    default:
      break;
  }
}

// Blocks of weight rows: 8 for one row of x (more streams in flight), 4 otherwise; a tail of
// fewer rows one by one.
template <typename W>
LLAMA_INLINE void Streaming(const float* x, int64_t m, int64_t k, const W* w, int64_t n, float* y,
                            int64_t ldy) {
  int64_t j = 0;
  if (m == 1) {
    for (; j + 8 <= n; j += 8) Block<8, 1>(x, k, w + j * k, y + j, ldy);
  } else if (m == 2) {
    for (; j + 4 <= n; j += 4) Block<4, 2>(x, k, w + j * k, y + j, ldy);
  } else {
    for (; j + 4 <= n; j += 4) Rows<4, 4>(x, m, k, w + j * k, y + j, ldy);
  }
  for (; j < n; ++j) Rows<1, 4>(x, m, k, w + j * k, y + j, ldy);
}

LLAMA_KERNEL void StreamingF32(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                               float* y, int64_t ldy) {
  Streaming(x, m, k, w, n, y, ldy);
}
LLAMA_KERNEL void StreamingBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                                float* y, int64_t ldy) {
  Streaming(x, m, k, w, n, y, ldy);
}

LLAMA_KERNEL void WidenBlock(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Widen(src[i]);
}

// The kernel sets of DISCO_CPU_KERNELS (kernels.h).
enum class Isa { kBase, kAvx2, kAvx512, kAvx512Bf16 };

#if defined(__x86_64__) && defined(__GNUC__)
// F16C (the int8 kernels' float16 scales), by cpuid: clang's __builtin_cpu_supports lacks it.
bool HasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

bool CpuHas(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case Isa::kBase:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
    case Isa::kAvx512:
      return DISCO_LLAMA_AVX512 && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    case Isa::kAvx512Bf16:
      return CpuHas(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
#else
  return isa == Isa::kBase;
#endif
}

// The AVX-512 int8 kernel multiplies bytes by AVX512-VNNI (vpdpbusd): an AVX-512 CPU without it
// (Skylake-SP) runs int8 on the AVX2 kernel.
bool CpuHasVnni() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

Isa Resolve() {
  const char* env = std::getenv("DISCO_CPU_KERNELS");
  const std::string v = env != nullptr ? env : "auto";
  if (v == "auto" || v.empty()) {
    for (Isa isa : {Isa::kAvx512Bf16, Isa::kAvx512, Isa::kAvx2}) {
      if (CpuHas(isa)) return isa;
    }
    return Isa::kBase;
  }
  const Isa isa = v == "avx2" ? Isa::kAvx2 : v == "avx512" ? Isa::kAvx512 : Isa::kAvx512Bf16;
  DISCO_CHECK(v == "avx2" || v == "avx512" || v == "avx512bf16", ValueError)
      << "DISCO_CPU_KERNELS is auto, avx2, avx512 or avx512bf16, not '" << v << "'";
  DISCO_CHECK(CpuHas(isa), ValueError)
      << "DISCO_CPU_KERNELS=" << v << ": this "
      << (isa != Isa::kAvx2 && !DISCO_LLAMA_AVX512 ? "build (its compiler)" : "CPU") << " has no "
      << (isa == Isa::kAvx2     ? "AVX2, FMA and F16C"
          : isa == Isa::kAvx512 ? "AVX-512 F, BW and VL"
                                : "AVX-512 F, BW, VL and BF16")
      << " (auto chooses what it has)";
  return isa;
}

// Resolved once; a refused value throws again at every call.
Isa Kernels() {
  static const Isa isa = Resolve();
  return isa;
}

// An AVX-512 set chosen (avx512 or avx512bf16): float32 on the panel kernel (weights rearranged
// by PackF32), attention on attend_avx512.h's kernel.
bool Avx512Chosen() { return Kernels() == Isa::kAvx512 || Kernels() == Isa::kAvx512Bf16; }

// int8 on the AVX-512 kernel: an AVX-512 set chosen and VNNI there.
bool Q8OnAvx512() {
  static const bool yes = Avx512Chosen() && CpuHasVnni();
  return yes;
}

}  // namespace

std::string CpuKernels() {
  const std::string q8_avx2 =
      DISCO_LLAMA_AVX2 != 0 ? "avx2 (widened, FMA)" : "base (this build has no AVX2 int8 kernel)";
  const std::string q8 = Q8OnAvx512()
                             ? "avx512 (vpdpbusd, x rounded to int16 per block)"
                             : q8_avx2 + (Kernels() == Isa::kBase || Kernels() == Isa::kAvx2
                                              ? ""
                                              : ": this CPU has no AVX512-VNNI");
  switch (Kernels()) {
    case Isa::kBase:
      return "float32, bfloat16 and int8: x86-64 base (no AVX2)";
    case Isa::kAvx2:
      return "float32: avx2 (FMA), bfloat16: avx2 (widened by shifts, FMA), int8: " + q8;
    case Isa::kAvx512:
      return "float32: avx512 (FMA on panels of 64 rows), bfloat16: avx512 (widened by shifts, "
             "FMA), int8: " +
             q8;
    case Isa::kAvx512Bf16:
      return "float32: avx512 (FMA on panels of 64 rows), bfloat16: avx512bf16 (vdpbf16ps, x "
             "rounded to bfloat16), int8: " +
             q8;
  }
  return "";
}

namespace {

// The streaming product of a few rows of x, by the kernel set chosen.
void StreamingAny(const float* x, int64_t m, int64_t k, const void* w, WeightFormat format,
                  int64_t n, float* y, int64_t ldy, std::vector<float>* scratch) {
  const auto* wb = static_cast<const uint16_t*>(w);
  const auto* wf = static_cast<const float*>(w);
  const auto* wq = static_cast<const uint8_t*>(w);
  const Isa isa = Kernels();
#if DISCO_LLAMA_AVX512
  if (Avx512Chosen()) {
    switch (format) {
      case WeightFormat::kQ8:
        if (Q8OnAvx512()) return avx512::StreamingQ8(x, m, k, wq, n, y, ldy);
        break;
      case WeightFormat::kBf16:
        if (isa == Isa::kAvx512Bf16)
          return avx512::StreamingBf16Dot(x, m, k, wb, n, y, ldy, scratch);
        return avx512::StreamingBf16Widen(x, m, k, wb, n, y, ldy);
      case WeightFormat::kF32:
        return avx512::PackedF32(x, m, k, wf, n, y, ldy);
    }
  }
#endif
  switch (format) {
    case WeightFormat::kQ8:
#if DISCO_LLAMA_AVX2
      if (isa != Isa::kBase) return avx2::StreamingQ8(x, m, k, wq, n, y, ldy);
#endif
      return q8::StreamingRef(x, m, k, wq, n, y, ldy);
    case WeightFormat::kBf16:
      return StreamingBf16(x, m, k, wb, n, y, ldy);
    case WeightFormat::kF32:
      return StreamingF32(x, m, k, wf, n, y, ldy);
  }
}

}  // namespace

void PackQ8(uint8_t* w, int64_t n, int64_t k) {
#if DISCO_LLAMA_AVX512
  if (Q8OnAvx512()) avx512::PackQ8(w, n, k);
#else
  (void)w, (void)n, (void)k;
#endif
}

void PackF32(float* w, int64_t n, int64_t k) {
#if DISCO_LLAMA_AVX512
  if (Avx512Chosen()) avx512::PackF32(w, n, k);
#else
  (void)w, (void)n, (void)k;
#endif
}

void UnpackF32(const float* w, int64_t n, int64_t k, int64_t j0, int64_t count, float* out) {
#if DISCO_LLAMA_AVX512
  if (Avx512Chosen()) return avx512::UnpackF32(w, n, k, j0, count, out);
#else
  (void)n;
#endif
  std::memcpy(out, w + j0 * k, static_cast<size_t>(count * k) * sizeof(float));
}

void PackBf16(uint16_t* w, int64_t n, int64_t k) {
#if DISCO_LLAMA_AVX512
  if (Kernels() == Isa::kAvx512Bf16) avx512::PackBf16(w, n, k);
#else
  (void)w, (void)n, (void)k;
#endif
}

void UnpackBf16(const uint16_t* w, int64_t n, int64_t k, int64_t j0, int64_t count, uint16_t* out) {
#if DISCO_LLAMA_AVX512
  if (Kernels() == Isa::kAvx512Bf16) return avx512::UnpackBf16(w, n, k, j0, count, out);
#else
  (void)n;
#endif
  std::memcpy(out, w + j0 * k, static_cast<size_t>(count * k) * sizeof(uint16_t));
}

// float32 on AVX-512, bfloat16 weights on AVX512-BF16 and int8 on AVX512-VNNI: their panel
// kernels at any batch, as they outrun sgemm (64 rows of 768 x 3072: float32 267 against
// OpenBLAS's 114 GFLOP/s on Zen 5, whose AVX-512 it does not know; int8 386-408 at 64 rows of 768
// x 2048 there; bfloat16 99 against 63 on Zen 4; disco-llama-kernels), and prefill then forms
// each row as decode does.
int64_t OneOrderRows(WeightFormat format) {
#if DISCO_LLAMA_AVX512
  const Isa isa = Kernels();
  if ((format == WeightFormat::kF32 && Avx512Chosen()) ||
      (format == WeightFormat::kBf16 && isa == Isa::kAvx512Bf16) ||
      (format == WeightFormat::kQ8 && Q8OnAvx512())) {
    return std::numeric_limits<int64_t>::max();
  }
#else
  (void)format;
#endif
  return kStreamingRows;
}

void Linear(const float* x, int64_t m, int64_t k, const void* w, WeightFormat format, int64_t n,
            float* y, int64_t ldy, std::vector<float>* scratch) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // empty sums (sgemm refuses a leading dimension of 0)
    for (int64_t i = 0; i < m; ++i) std::fill(y + i * ldy, y + i * ldy + n, 0.0f);
    return;
  }
  if (m <= OneOrderRows(format)) {
    return StreamingAny(x, m, k, w, format, n, y, ldy, scratch);
  }
  const int M = static_cast<int>(m), K = static_cast<int>(k), LDY = static_cast<int>(ldy);
  if (format == WeightFormat::kF32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, static_cast<int>(n), K, 1.0f, x, K,
                static_cast<const float*>(w), K, 0.0f, y, LDY);
    return;
  }
  // bfloat16 or int8: blocks of weight rows widened into scratch (about 1 MiB), then sgemm on
  // each.
  const int64_t rows = std::max<int64_t>(1, (int64_t{1} << 18) / k);
  scratch->resize(static_cast<size_t>(rows * k));
  for (int64_t j = 0; j < n; j += rows) {
    const int64_t r = std::min(rows, n - j);
    if (format == WeightFormat::kBf16) {
      WidenBlock(static_cast<const uint16_t*>(w) + j * k, r * k, scratch->data());
    } else {
      const uint8_t* rows_q = static_cast<const uint8_t*>(w) + j * q8::RowBytes(k);
#if DISCO_LLAMA_AVX2
      if (Kernels() != Isa::kBase) {
        avx2::DequantizeQ8(rows_q, r, k, scratch->data());
      } else {
        q8::Dequantize(rows_q, r, k, scratch->data());
      }
#else
      q8::Dequantize(rows_q, r, k, scratch->data());
#endif
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, static_cast<int>(r), K, 1.0f, x, K,
                scratch->data(), K, 0.0f, y + j, LDY);
  }
}

LLAMA_KERNEL void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  V8 acc = V8{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 v = Load(x + i);
    acc += v * v;
  }
  float ss = Sum(acc);
  for (; i < n; ++i) ss += x[i] * x[i];
  if (std::isinf(ss)) {
    // Squares past float's range (|x| above about 1.8e19): 1 / inf would make the row zeros and
    // the step's tokens silently 0. float64 holds every finite float's square; NaN and infinite
    // inputs still give NaN (x * 0), which the head refuses.
    double dss = 0;
    for (i = 0; i < n; ++i) dss += static_cast<double>(x[i]) * x[i];
    const double dinv = 1.0 / std::sqrt(dss / static_cast<double>(n) + eps);
    for (i = 0; i < n; ++i) out[i] = w[i] * static_cast<float>(x[i] * dinv);
    return;
  }
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

LLAMA_INLINE float InlineDot(const float* a, const float* b, int64_t n) {
  V8 a0 = V8{}, a1 = V8{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 += Load(a + i) * Load(b + i);
    a1 += Load(a + i + 8) * Load(b + i + 8);
  }
  for (; i + 8 <= n; i += 8) a0 += Load(a + i) * Load(b + i);
  float s = Sum(a0 + a1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

namespace {

typedef int32_t I32x8 __attribute__((vector_size(32)));

// e^x in 8 lanes for x <= 0 (scores less their maximum): x = n ln 2 + r, e^r by Cephes' expf
// polynomial, 2^n built in the exponent bits. x below -87.3 is taken as -87.3 (e^x there is under
// float's least normal, 2^-126: a weight of 1e-38 beside the largest's 1). A NaN stays NaN (its r
// is NaN).
LLAMA_INLINE V8 Exp8(V8 x) {
  using namespace expf_poly;
  x = x < -87.33654f ? V8{} - 87.33654f : x;  // a NaN compares false: kept
  V8 fx = x * kLog2e - 0.5f;
  fx = fx >= -127.0f ? fx : V8{} - 127.0f;              // a NaN's: converted as -127, not as a NaN
  const I32x8 ni = __builtin_convertvector(fx, I32x8);  // truncated: rounded, as x <= 0
  const V8 n = __builtin_convertvector(ni, V8);
  const V8 r = (x - n * kLn2Hi) - n * kLn2Lo;
  V8 p = V8{} + kCoef[0];
  for (int i = 1; i < 6; ++i) p = p * r + kCoef[i];
  p = p * r * r + r + 1.0f;
  const I32x8 bits = (ni + 127) << 23;
  V8 two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

// Attend in portable vector code (AVX2 in the x86-64-v3 clone), in three steps a float16 cache
// runs on widened chunks of its positions: the scores (a dot product per position and head), their
// softmax (e^x by Exp8, std::exp for the last n % 8), and the values of every query head taken
// from each row of v as it is read.
// scores[j * ld + t] = q_j . k_t * scale, t < n.
LLAMA_KERNEL void ScoresBase(const float* q, int64_t rep, const float* k, int64_t n, int64_t dim,
                             float scale, float* scores, int64_t ld) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < rep; ++j)
      scores[j * ld + t] = InlineDot(q + j * dim, k + t * dim, dim) * scale;
  }
}

LLAMA_KERNEL void SoftmaxBase(float* scores, int64_t rep, int64_t n) {
  for (int64_t j = 0; j < rep; ++j) {
    float* row = scores + j * n;
    float mx = row[0];
    for (int64_t t = 1; t < n; ++t) mx = std::max(mx, row[t]);
    V8 sums = V8{};
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
      const V8 e = Exp8(Load(row + t) - mx);
      std::memcpy(row + t, &e, sizeof e);
      sums += e;
    }
    float sum = Sum(sums);
    for (; t < n; ++t) sum += (row[t] = std::exp(row[t] - mx));
    const float inv = 1.0f / sum;
    for (t = 0; t < n; ++t) row[t] *= inv;
  }
}

// out_j += sum_t p[j * ld + t] v_t, t < n.
LLAMA_KERNEL void ValuesBase(const float* p, int64_t ld, int64_t rep, const float* v, int64_t n,
                             int64_t dim, float* __restrict out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* __restrict vt = v + t * dim;
    for (int64_t j = 0; j < rep; ++j) {
      const float pj = p[j * ld + t];
      float* __restrict o = out + j * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += pj * vt[d];
    }
  }
}

void AttendBase(const float* q, int64_t rep, const float* k, const float* v, int64_t n, int64_t dim,
                float scale, float* scores, float* out) {
  ScoresBase(q, rep, k, n, dim, scale, scores, n);
  SoftmaxBase(scores, rep, n);
  std::fill(out, out + rep * dim, 0.0f);
  ValuesBase(scores, n, rep, v, n, dim, out);
}

// The same over float16 keys and values, widened 64 positions at a time.
void AttendBase(const float* q, int64_t rep, const uint16_t* k, const uint16_t* v, int64_t n,
                int64_t dim, float scale, float* scores, float* out) {
  constexpr int64_t kChunk = 64;
  thread_local std::vector<float> wide;  // a call per row and kv head: kept between them
  wide.resize(std::max(wide.size(), static_cast<size_t>(std::min(n, kChunk) * dim)));
  for (int64_t t = 0; t < n; t += kChunk) {
    const int64_t c = std::min(kChunk, n - t);
    FromHalf(k + t * dim, c * dim, wide.data());
    ScoresBase(q, rep, wide.data(), c, dim, scale, scores + t, n);
  }
  SoftmaxBase(scores, rep, n);
  std::fill(out, out + rep * dim, 0.0f);
  for (int64_t t = 0; t < n; t += kChunk) {
    const int64_t c = std::min(kChunk, n - t);
    FromHalf(v + t * dim, c * dim, wide.data());
    ValuesBase(scores + t, n, rep, wide.data(), c, dim, out);
  }
}

template <typename T>
void AttendAny(const float* q, int64_t rep, const T* k, const T* v, int64_t n, int64_t dim,
               float scale, float* scores, float* out) {
  if (n <= 0) {  // no positions: nothing to attend to (the model always has one)
    std::fill(out, out + rep * dim, 0.0f);
    return;
  }
#if DISCO_LLAMA_AVX512
  if (Avx512Chosen() && avx512::AttendFits(dim)) {
    return avx512::Attend(q, rep, k, v, n, dim, scale, scores, out);
  }
#endif
  AttendBase(q, rep, k, v, n, dim, scale, scores, out);
}

}  // namespace

void Attend(const float* q, int64_t rep, const float* k, const float* v, int64_t n, int64_t dim,
            float scale, float* scores, float* out) {
  AttendAny(q, rep, k, v, n, dim, scale, scores, out);
}

void Attend(const float* q, int64_t rep, const uint16_t* k, const uint16_t* v, int64_t n,
            int64_t dim, float scale, float* scores, float* out) {
  AttendAny(q, rep, k, v, n, dim, scale, scores, out);
}

bool ToHalf(const float* x, int64_t n, uint16_t* out) {
#if DISCO_LLAMA_AVX2
  if (Kernels() != Isa::kBase) return avx2::ToHalf(x, n, out);
#endif
  bool fits = true;
  for (int64_t i = 0; i < n; ++i) {
    fits = fits && !(std::fabs(x[i]) >= 65520.0f && std::isfinite(x[i]));
    out[i] = q8::FloatToHalf(x[i]);
  }
  return fits;
}

void FromHalf(const uint16_t* h, int64_t n, float* out) {
#if DISCO_LLAMA_AVX2
  if (Kernels() != Isa::kBase) return avx2::FromHalf(h, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = q8::HalfToFloat(h[i]);
}

LLAMA_KERNEL void Add(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void AddBias(const float* bias, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) Add(bias, y + r * n, n);
}

void SiluMul(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void Rope(float* v, int64_t heads, int64_t dim, const float* cos, const float* sin) {
  const int64_t half = dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* p = v + h * dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = p[i], b = p[i + half];
      p[i] = a * cos[i] - b * sin[i];
      p[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace llama
