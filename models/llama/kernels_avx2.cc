#include "llama/kernels_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "llama/q8.h"

#define LLAMA_INLINE inline __attribute__((always_inline))

namespace llama::avx2 {
namespace {

LLAMA_INLINE float Sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Eight int8 weights at q as eight floats.
LLAMA_INLINE __m256 Widen8(const int8_t* q) {
  __m128i b;
  std::memcpy(&b, q, 8);
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

LLAMA_INLINE float Scale(const uint8_t* row, int64_t k, int64_t b) {
  uint16_t h;
  std::memcpy(&h, row + k + 2 * b, 2);
  return _cvtsh_ss(h);
}

// Blocks whose float16 scales are widened at once, 8 by an instruction, into a buffer the block
// loop broadcasts from (a load; widening each scale alone took the shuffle port the int8 -> int32
// widening needs).
constexpr int64_t kScaleChunk = 64;
LLAMA_INLINE void Scales(const uint8_t* src, int64_t nb, float* out) {
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m128i h;
    std::memcpy(&h, src + 2 * i, 16);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < nb; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = _cvtsh_ss(h);
  }
}

// y[i, 0..R) for MB rows of x against R quantized rows at w (`stride` bytes apart): the full
// blocks in registers (the next R rows' same columns prefetched), a last short block in scalars.
template <int R, int MB>
LLAMA_INLINE void Block(const float* x, int64_t k, const uint8_t* w, int64_t stride, float* y,
                        int64_t ldy) {
  __m256 acc[MB][R];
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  const int64_t full = k / q8::kBlock;
  alignas(32) float scales[R][kScaleChunk];
  for (int64_t b = 0; b < full; ++b) {
    const int64_t p = b * q8::kBlock, c = b % kScaleChunk;
    if (c == 0) {
      for (int r = 0; r < R; ++r) {
        Scales(w + r * stride + k + 2 * b, std::min(kScaleChunk, full - b), scales[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * stride;
      _mm_prefetch(reinterpret_cast<const char*>(row + R * stride + p), _MM_HINT_T0);
      const __m256 d = _mm256_set1_ps(scales[r][c]);
      const auto* q = reinterpret_cast<const int8_t*>(row + p);
      __m256 wv[4];
      for (int u = 0; u < 4; ++u) wv[u] = Widen8(q + 8 * u);
      // Each row of x: the block's dot product, then scaled once (the same order for any MB: a
      // row's result does not depend on the batch).
      for (int i = 0; i < MB; ++i) {
        const float* xi = x + i * k + p;
        __m256 s = _mm256_mul_ps(_mm256_loadu_ps(xi), wv[0]);
        for (int u = 1; u < 4; ++u) s = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 8 * u), wv[u], s);
        acc[i][r] = _mm256_fmadd_ps(d, s, acc[i][r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const uint8_t* row = w + r * stride;
    const float d = full * q8::kBlock < k ? Scale(row, k, full) : 0.0f;
    for (int i = 0; i < MB; ++i) {
      float s = 0.0f;
      for (int64_t p = full * q8::kBlock; p < k; ++p) {
        s += x[i * k + p] * static_cast<float>(static_cast<int8_t>(row[p]));
      }
      y[i * ldy + r] = Sum(acc[i][r]) + s * d;
    }
  }
}

// Rows [0, m) of x against R quantized rows, in blocks of up to 4 rows of x.
template <int R>
LLAMA_INLINE void Rows(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t stride,
                       float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) Block<R, 4>(x + i * k, k, w, stride, y + i * ldy, ldy);
  switch (m - i) {
    case 3:
      Block<R, 3>(x + i * k, k, w, stride, y + i * ldy, ldy);
      break;
    case 2:
      Block<R, 2>(x + i * k, k, w, stride, y + i * ldy, ldy);
      break;
    case 1:
      Block<R, 1>(x + i * k, k, w, stride, y + i * ldy, ldy);
      break;
    default:
      break;
  }
}

}  // namespace

void DequantizeQ8(const uint8_t* w, int64_t n, int64_t k, float* out) {
  const int64_t full = k / q8::kBlock;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = w + j * q8::RowBytes(k);
    float* o = out + j * k;
    for (int64_t b = 0; b < full; ++b) {
      const __m256 d = _mm256_set1_ps(Scale(row, k, b));
      const auto* q = reinterpret_cast<const int8_t*>(row + b * q8::kBlock);
      for (int u = 0; u < 4; ++u) {
        _mm256_storeu_ps(o + b * q8::kBlock + 8 * u, _mm256_mul_ps(Widen8(q + 8 * u), d));
      }
    }
    if (full * q8::kBlock < k) {
      const float d = Scale(row, k, full);
      for (int64_t p = full * q8::kBlock; p < k; ++p) {
        o[p] = static_cast<float>(static_cast<int8_t>(row[p])) * d;
      }
    }
  }
}

void StreamingQ8(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                 int64_t ldy) {
  const int64_t stride = q8::RowBytes(k);
  int64_t j = 0;
  if (m == 1) {
    for (; j + 4 <= n; j += 4) Block<4, 1>(x, k, w + j * stride, stride, y + j, ldy);
  } else {
    for (; j + 2 <= n; j += 2) Rows<2>(x, m, k, w + j * stride, stride, y + j, ldy);
  }
  for (; j < n; ++j) Rows<1>(x, m, k, w + j * stride, stride, y + j, ldy);
}

bool ToHalf(const float* x, int64_t n, uint16_t* out) {
  const __m256 limit = _mm256_set1_ps(65520.0f), inf = _mm256_set1_ps(INFINITY),
               abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 past = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 a = _mm256_and_ps(v, abs);
    past = _mm256_or_ps(past, _mm256_and_ps(_mm256_cmp_ps(a, limit, _CMP_GE_OQ),
                                            _mm256_cmp_ps(a, inf, _CMP_LT_OQ)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  bool fits = _mm256_movemask_ps(past) == 0;
  for (; i < n; ++i) {
    fits = fits && !(std::fabs(x[i]) >= 65520.0f && std::isfinite(x[i]));
    out[i] = static_cast<uint16_t>(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return fits;
}

void FromHalf(const uint16_t* h, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(h[i]);
}

}  // namespace llama::avx2
