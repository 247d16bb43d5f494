#include "llama/attend_avx512.h"

#include "llama/avx512_common.h"

#include <algorithm>
#include <cmath>

#include "llama/expf_poly.h"

namespace llama::avx512 {
namespace {

// e^x in 16 lanes (x <= 0 here: scores less their maximum): x = n ln 2 + r, |r| <= ln 2 / 2,
// e^r by Cephes' expf polynomial, times 2^n by scalef (which also gives e^x's subnormals and
// zeros below). A NaN stays NaN: max takes its second operand when either is one.
LLAMA_INLINE __m512 Exp(__m512 x) {
  using namespace expf_poly;
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kCoef[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kCoef[i]));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// The 128-bit lanes of 4 vectors folded: lane L of the result holds 4 partial sums of input L.
LLAMA_INLINE __m512 Fold4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab =
      _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd =
      _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
}

// Lane i = the sum of p[i]'s 16 lanes, for 16 vectors at once (45 instructions, not 16 sums of 8).
LLAMA_INLINE __m512 Sum16(const __m512 (&p)[16]) {
  const __m512 g0 = Fold4(p[0], p[4], p[8], p[12]), g1 = Fold4(p[1], p[5], p[9], p[13]);
  const __m512 g2 = Fold4(p[2], p[6], p[10], p[14]), g3 = Fold4(p[3], p[7], p[11], p[15]);
  const __m512 s1 = _mm512_add_ps(_mm512_unpacklo_ps(g0, g1), _mm512_unpackhi_ps(g0, g1));
  const __m512 s2 = _mm512_add_ps(_mm512_unpacklo_ps(g2, g3), _mm512_unpackhi_ps(g2, g3));
  const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(s1), _mm512_castps_pd(s2));
  const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(s1), _mm512_castps_pd(s2));
  return _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
}

// Keys and values are asked for this many positions ahead: each head's are a short stream (1000
// positions of 64 floats: 256 KiB). 288 heads' worth from memory (152 MB, 3 query heads each; one
// core reads 44 GB/s): 21-22 GB/s by the hardware's prefetcher alone, 41-42 with these; 48 heads'
// (25 MB, partly in L3): 31-40 -> 55-58.
constexpr int64_t kAhead = 32;

// The `lines` cache lines from p (prefetches past the end are harmless: they do not fault).
template <int lines>
LLAMA_INLINE void Prefetch(const void* p) {
  for (int l = 0; l < lines; ++l) _mm_prefetch(static_cast<const char*>(p) + 64 * l, _MM_HINT_T0);
}
// The cache lines of 16 c elements of T (at least one).
template <typename T>
constexpr int Lines(int c) {
  return (16 * c * static_cast<int>(sizeof(T)) + 63) / 64;
}

// 16 keys' or values' elements as floats: float32, or float16 (a float16 kv cache) widened
// exactly.
LLAMA_INLINE __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
LLAMA_INLINE __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// q . k_t for the 16 positions from k (heads of 16 DC elements).
template <int DC, typename T>
LLAMA_INLINE __m512 Dots16(const float* q, const T* k) {
  __m512 qv[DC];
  for (int c = 0; c < DC; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  __m512 p[16];
  for (int t = 0; t < 16; ++t) {
    const T* kt = k + t * 16 * DC;
    p[t] = _mm512_mul_ps(qv[0], Load16(kt));
    for (int c = 1; c < DC; ++c) p[t] = _mm512_fmadd_ps(qv[c], Load16(kt + 16 * c), p[t]);
  }
  return Sum16(p);
}

template <int DC, typename T>
LLAMA_INLINE float Dot(const float* q, const T* k) {
  __m512 p = _mm512_mul_ps(_mm512_loadu_ps(q), Load16(k));
  for (int c = 1; c < DC; ++c)
    p = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), Load16(k + 16 * c), p);
  return _mm512_reduce_add_ps(p);
}

// row (n floats) = softmax(row), in place: e^(s - max) over their sum.
void Softmax(float* row, int64_t n) {
  const __mmask16 tail = Mask16(n % 16);
  const int64_t whole = n / 16 * 16;
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < whole; i += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(row + i));
  if (tail != 0) mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, row + whole));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < whole; i += 16) {
    const __m512 e = Exp(_mm512_sub_ps(_mm512_loadu_ps(row + i), m));
    _mm512_storeu_ps(row + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail != 0) {
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + whole), m));
    _mm512_mask_storeu_ps(row + whole, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t i = 0; i < whole; i += 16) {
    _mm512_storeu_ps(row + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), inv));
  }
  if (tail != 0) {
    _mm512_mask_storeu_ps(row + whole, tail,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + whole), inv));
  }
}

// out (jn heads of 16 DC floats) = sum_t p_j[t] v_t, for jn <= J heads whose weights are rows of
// p (ldp apart): every v_t read once for all of them.
template <int DC, int J, typename T>
LLAMA_INLINE void Values(const float* p, int64_t ldp, int jn, const T* v, int64_t n, float* out) {
  __m512 acc[J][DC];
  for (int j = 0; j < J; ++j) {
    for (int c = 0; c < DC; ++c) acc[j][c] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < n; ++t) {
    Prefetch<Lines<T>(DC)>(v + (t + kAhead) * 16 * DC);
    __m512 vt[DC];
    for (int c = 0; c < DC; ++c) vt[c] = Load16(v + t * 16 * DC + 16 * c);
    for (int j = 0; j < J && j < jn; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j * ldp + t]);
      for (int c = 0; c < DC; ++c) acc[j][c] = _mm512_fmadd_ps(pj, vt[c], acc[j][c]);
    }
  }
  for (int j = 0; j < J && j < jn; ++j) {
    for (int c = 0; c < DC; ++c) _mm512_storeu_ps(out + j * 16 * DC + 16 * c, acc[j][c]);
  }
}

template <int DC, typename T>
void AttendHeads(const float* q, int64_t rep, const T* k, const T* v, int64_t n, float scale,
                 float* scores, float* out) {
  constexpr int64_t dim = 16 * DC;
  const __m512 s = _mm512_set1_ps(scale);
  int64_t t = 0;
  for (; t + 16 <= n; t += 16) {  // a tile of k (16 positions) read from L1 by each head
    Prefetch<Lines<T>(16 * DC)>(k + (t + kAhead) * dim);
    for (int64_t j = 0; j < rep; ++j) {
      _mm512_storeu_ps(scores + j * n + t, _mm512_mul_ps(Dots16<DC>(q + j * dim, k + t * dim), s));
    }
  }
  for (; t < n; ++t) {
    for (int64_t j = 0; j < rep; ++j) scores[j * n + t] = Dot<DC>(q + j * dim, k + t * dim) * scale;
  }
  for (int64_t j = 0; j < rep; ++j) Softmax(scores + j * n, n);
  constexpr int kHeads = DC >= 16 ? 1 : 16 / DC;  // accumulators: 16 of the 32 registers
  for (int64_t j = 0; j < rep; j += kHeads) {
    const int jn = static_cast<int>(std::min<int64_t>(kHeads, rep - j));
    Values<DC, kHeads, T>(scores + j * n, n, jn, v, n, out + j * dim);
  }
}

}  // namespace

bool AttendFits(int64_t dim) {
  return dim == 16 || dim == 32 || dim == 64 || dim == 128 || dim == 256;
}

template <typename T>
void Attend(const float* q, int64_t rep, const T* k, const T* v, int64_t n, int64_t dim,
            float scale, float* scores, float* out) {
  switch (dim) {
    case 16:
      return AttendHeads<1>(q, rep, k, v, n, scale, scores, out);
    case 32:
      return AttendHeads<2>(q, rep, k, v, n, scale, scores, out);
    case 64:
      return AttendHeads<4>(q, rep, k, v, n, scale, scores, out);
    case 128:
      return AttendHeads<8>(q, rep, k, v, n, scale, scores, out);
    case 256:
      return AttendHeads<16>(q, rep, k, v, n, scale, scores, out);
    default:
      return;
  }
}

template void Attend(const float*, int64_t, const float*, const float*, int64_t, int64_t, float,
                     float*, float*);
template void Attend(const float*, int64_t, const uint16_t*, const uint16_t*, int64_t, int64_t,
                     float, float*, float*);

}  // namespace llama::avx512
