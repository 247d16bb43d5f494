#include "llama/kernels_avx512.h"

// GCC 12 warns inside its own avx512fintrin.h (the _mm512_undefined_* that the masked loads and
// _mm512_reduce_add_ps start from), not on this file's code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "llama/q8.h"

#define LLAMA_INLINE inline __attribute__((always_inline))

namespace llama::avx512 {
namespace {

LLAMA_INLINE __mmask16 Mask16(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
LLAMA_INLINE __mmask32 Mask32(int64_t n) { return static_cast<__mmask32>((uint64_t{1} << n) - 1); }

// The weight formats of the FMA kernels: 16 weights at w as 16 floats (Load, and Tail for the
// last n < 16 of a row, zeros after them).
struct F32 {
  using W = float;
  static LLAMA_INLINE __m512 Load(const float* w) { return _mm512_loadu_ps(w); }
  static LLAMA_INLINE __m512 Tail(const float* w, int64_t n) {
    return _mm512_maskz_loadu_ps(Mask16(n), w);
  }
};
struct Bf16 {  // bfloat16 bits are a float's top 16: widened exactly by a shift
  using W = uint16_t;
  static LLAMA_INLINE __m512 Widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static LLAMA_INLINE __m512 Load(const uint16_t* w) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
  }
  static LLAMA_INLINE __m512 Tail(const uint16_t* w, int64_t n) {
    return Widen(_mm256_maskz_loadu_epi16(Mask16(n), w));
  }
};

// y[i, 0..R) for MB rows of x: R weight rows stream through 16 weights at a time (the same
// columns of the next R rows prefetched), R x MB accumulators of 16 lanes.
template <int R, int MB, typename L>
LLAMA_INLINE void FmaBlock(const float* x, int64_t k, const typename L::W* w, float* y,
                           int64_t ldy) {
  __m512 acc[MB][R];
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = L::Load(w + r * k + p);
      _mm_prefetch(reinterpret_cast<const char*>(w + (R + r) * k + p), _MM_HINT_NTA);
    }
    for (int i = 0; i < MB; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + p);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  if (p < k) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = L::Tail(w + r * k + p, k - p);
    for (int i = 0; i < MB; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(Mask16(k - p), x + i * k + p);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i][r]);
  }
}

// The same by vdpbf16ps: x (xb) already bfloat16, 32 weights of a row at a time, each step
// adding the products of 16 pairs into 16 float32 lanes.
template <int R, int MB>
LLAMA_INLINE void DotBlock(const uint16_t* xb, int64_t k, const uint16_t* w, float* y,
                           int64_t ldy) {
  __m512 acc[MB][R];
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = (__m512bh)_mm512_loadu_si512(w + r * k + p);
      _mm_prefetch(reinterpret_cast<const char*>(w + (R + r) * k + p), _MM_HINT_NTA);
    }
    for (int i = 0; i < MB; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + i * k + p);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
    }
  }
  if (p < k) {  // zeros past the row's end: their products are 0
    const __mmask32 mask = Mask32(k - p);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + r * k + p);
    for (int i = 0; i < MB; ++i) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, xb + i * k + p);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
    }
  }
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i][r]);
  }
}

// One weight row against one row of x (decode at batch 1): the rows one after another make one
// sequential stream, the hardware prefetcher's best case (8 rows at a time, 8 streams of a row's
// length each, ran at half the speed on rows of 768 bfloat16); four accumulators hide the
// latency of the FMA or dot product.
template <typename L>
LLAMA_INLINE float FmaRow(const float* x, int64_t k, const typename L::W* w) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  int64_t p = 0;
  for (; p + 64 <= k; p += 64) {
    for (int u = 0; u < 4; ++u) {
      a[u] = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 16 * u), L::Load(w + p + 16 * u), a[u]);
    }
  }
  for (; p + 16 <= k; p += 16) a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + p), L::Load(w + p), a[0]);
  if (p < k) {
    a[1] =
        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(Mask16(k - p), x + p), L::Tail(w + p, k - p), a[1]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

LLAMA_INLINE __m512bh LoadBh(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

LLAMA_INLINE float DotRow(const uint16_t* xb, int64_t k, const uint16_t* w) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  int64_t p = 0;
  for (; p + 128 <= k; p += 128) {
    for (int u = 0; u < 4; ++u) {
      a[u] = _mm512_dpbf16_ps(a[u], LoadBh(xb + p + 32 * u), LoadBh(w + p + 32 * u));
    }
  }
  for (; p + 32 <= k; p += 32) a[0] = _mm512_dpbf16_ps(a[0], LoadBh(xb + p), LoadBh(w + p));
  if (p < k) {
    const __mmask32 mask = Mask32(k - p);
    a[1] = _mm512_dpbf16_ps(a[1], (__m512bh)_mm512_maskz_loadu_epi16(mask, xb + p),
                            (__m512bh)_mm512_maskz_loadu_epi16(mask, w + p));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

// One kernel's block of R weight rows against MB rows of x (X: float for the FMA kernels,
// uint16_t bfloat16 for the dot kernel).
template <typename L>
struct Fma {
  using X = float;
  using W = typename L::W;
  template <int R, int MB>
  static LLAMA_INLINE void Block(const float* x, int64_t k, const W* w, float* y, int64_t ldy) {
    FmaBlock<R, MB, L>(x, k, w, y, ldy);
  }
  static LLAMA_INLINE float Row(const float* x, int64_t k, const W* w) {
    return FmaRow<L>(x, k, w);
  }
};
struct Dot {
  using X = uint16_t;
  using W = uint16_t;
  template <int R, int MB>
  static LLAMA_INLINE void Block(const uint16_t* x, int64_t k, const W* w, float* y, int64_t ldy) {
    DotBlock<R, MB>(x, k, w, y, ldy);
  }
  static LLAMA_INLINE float Row(const uint16_t* x, int64_t k, const W* w) {
    return DotRow(x, k, w);
  }
};

// Rows [0, m) of x against R weight rows, in blocks of up to 4 rows.
template <typename K, int R>
LLAMA_INLINE void Rows(const typename K::X* x, int64_t m, int64_t k, const typename K::W* w,
                       float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) K::template Block<R, 4>(x + i * k, k, w, y + i * ldy, ldy);
  switch (m - i) {
    case 3:
      K::template Block<R, 3>(x + i * k, k, w, y + i * ldy, ldy);
      break;
    case 2:
      K::template Block<R, 2>(x + i * k, k, w, y + i * ldy, ldy);
      break;
    case 1:
      K::template Block<R, 1>(x + i * k, k, w, y + i * ldy, ldy);
      break;
    default:
      break;
  }
}

// One row of x: weight rows one by one; more: blocks of 4 weight rows (each weight loaded once for
// up to 4 rows of x), a tail of fewer rows one by one.
template <typename K>
void Streaming(const typename K::X* x, int64_t m, int64_t k, const typename K::W* w, int64_t n,
               float* y, int64_t ldy) {
  if (m == 1) {
    for (int64_t j = 0; j < n; ++j) y[j] = K::Row(x, k, w + j * k);
    return;
  }
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) Rows<K, 4>(x, m, k, w + j * k, y + j, ldy);
  for (; j < n; ++j) Rows<K, 1>(x, m, k, w + j * k, y + j, ldy);
}

// x (count floats) rounded to bfloat16, to nearest even.
void RoundToBf16(const float* x, int64_t count, uint16_t* out) {
  int64_t p = 0;
  for (; p + 16 <= count; p += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + p));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + p), (__m256i)h);
  }
  if (p < count) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(Mask16(count - p), x + p));
    _mm256_mask_storeu_epi16(out + p, Mask16(count - p), (__m256i)h);
  }
}

// int8 weights (q8.h): y[i, 0..R) for MB rows of x against R quantized rows at w (`stride` bytes
// apart), 16 weights at a time widened int8 -> int32 -> float32; one row of x sums a block's 32
// products and scales them once, more rows scale the weights first (they are reused). A last
// short block in scalars.
LLAMA_INLINE float Q8Scale(const uint8_t* row, int64_t k, int64_t b) {
  uint16_t h;
  std::memcpy(&h, row + k + 2 * b, 2);
  return _cvtsh_ss(h);
}
// Blocks whose float16 scales are widened at once, 16 by an instruction, into a buffer the block
// loop broadcasts from (a load; widening each scale alone took the shuffle port the int8 -> int32
// widening needs).
constexpr int64_t kScaleChunk = 64;
LLAMA_INLINE void Q8Scales(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t i = 0; i < nb; i += 16) {
    const __m256i h = _mm256_maskz_loadu_epi16(Mask16(std::min<int64_t>(16, nb - i)), src + 2 * i);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
}
LLAMA_INLINE __m512 Widen16(const int8_t* q) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
}

template <int R, int MB>
LLAMA_INLINE void Q8Block(const float* x, int64_t k, const uint8_t* w, int64_t stride, float* y,
                          int64_t ldy) {
  __m512 acc[MB][R];
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  const int64_t full = k / q8::kBlock;
  alignas(64) float scales[R][kScaleChunk];
  for (int64_t b = 0; b < full; ++b) {
    const int64_t p = b * q8::kBlock, c = b % kScaleChunk;
    if (c == 0) {
      for (int r = 0; r < R; ++r) {
        Q8Scales(w + r * stride + k + 2 * b, std::min(kScaleChunk, full - b), scales[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * stride;
      _mm_prefetch(reinterpret_cast<const char*>(row + R * stride + p), _MM_HINT_T0);
      const __m512 d = _mm512_set1_ps(scales[r][c]);
      const auto* q = reinterpret_cast<const int8_t*>(row + p);
      __m512 w0 = Widen16(q), w1 = Widen16(q + 16);
      if (MB == 1) {
        const __m512 s = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 16), w1,
                                         _mm512_mul_ps(_mm512_loadu_ps(x + p), w0));
        acc[0][r] = _mm512_fmadd_ps(d, s, acc[0][r]);
        continue;
      }
      w0 = _mm512_mul_ps(w0, d);
      w1 = _mm512_mul_ps(w1, d);
      for (int i = 0; i < MB; ++i) {
        acc[i][r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * k + p), w0, acc[i][r]);
        acc[i][r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * k + p + 16), w1, acc[i][r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const uint8_t* row = w + r * stride;
    const float d = full * q8::kBlock < k ? Q8Scale(row, k, full) : 0.0f;
    for (int i = 0; i < MB; ++i) {
      float s = 0.0f;
      for (int64_t p = full * q8::kBlock; p < k; ++p) {
        s += x[i * k + p] * static_cast<float>(static_cast<int8_t>(row[p]));
      }
      y[i * ldy + r] = _mm512_reduce_add_ps(acc[i][r]) + s * d;
    }
  }
}

// One quantized row against one row of x (batch 1, rows under 4 KiB): rows one after another make
// one sequential stream (as FmaRow's); four accumulators, a block each in turn, hide the FMA's
// latency. By the thread's CPU time on the loaded Zen 4, GB/s, one row at a time against four
// side by side: rows of 768 16.2 / 12.4, 2048 20.9 / 15.1, 4096 14.9 / 19.5 (medians of 4
// interleaved runs): longer rows keep Q8Block<4, 1>.
// A row's scales are widened first, up to kRowScales blocks (rows up to 8192) at once: the row's
// stream then goes once to its scales at the end and back, not once per 64 blocks.
constexpr int64_t kRowScales = 256;
LLAMA_INLINE float Q8Row(const float* x, int64_t k, const uint8_t* row) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  const int64_t full = k / q8::kBlock;
  alignas(64) float scales[kRowScales];
  int64_t b = 0;
  auto block = [&](int64_t blk, int u) {
    const int64_t p = blk * q8::kBlock;
    const auto* q = reinterpret_cast<const int8_t*>(row + p);
    const __m512 s = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 16), Widen16(q + 16),
                                     _mm512_mul_ps(_mm512_loadu_ps(x + p), Widen16(q)));
    a[u] = _mm512_fmadd_ps(_mm512_set1_ps(scales[blk % kRowScales]), s, a[u]);
  };
  for (; b < full; b += kRowScales) {
    const int64_t nb = std::min(kRowScales, full - b);
    Q8Scales(row + k + 2 * b, nb, scales);
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
      for (int u = 0; u < 4; ++u) block(b + i + u, u);
    }
    for (; i < nb; ++i) block(b + i, 0);
  }
  float tail = 0.0f;
  if (full * q8::kBlock < k) {
    for (int64_t p = full * q8::kBlock; p < k; ++p) {
      tail += x[p] * static_cast<float>(static_cast<int8_t>(row[p]));
    }
    tail *= Q8Scale(row, k, full);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]))) +
         tail;
}

template <int R>
LLAMA_INLINE void Q8Rows(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t stride,
                         float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) Q8Block<R, 4>(x + i * k, k, w, stride, y + i * ldy, ldy);
  switch (m - i) {
    case 3:
      Q8Block<R, 3>(x + i * k, k, w, stride, y + i * ldy, ldy);
      break;
    case 2:
      Q8Block<R, 2>(x + i * k, k, w, stride, y + i * ldy, ldy);
      break;
    case 1:
      Q8Block<R, 1>(x + i * k, k, w, stride, y + i * ldy, ldy);
      break;
    default:
      break;
  }
}

}  // namespace

void StreamingF32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                  int64_t ldy) {
  Streaming<Fma<F32>>(x, m, k, w, n, y, ldy);
}

void StreamingBf16Widen(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                        float* y, int64_t ldy) {
  Streaming<Fma<Bf16>>(x, m, k, w, n, y, ldy);
}

void StreamingBf16Dot(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                      int64_t ldy, std::vector<float>* scratch) {
  const int64_t count = m * k;
  scratch->resize(static_cast<size_t>((count + 1) / 2));
  auto* xb = reinterpret_cast<uint16_t*>(scratch->data());
  RoundToBf16(x, count, xb);
  Streaming<Dot>(xb, m, k, w, n, y, ldy);
}

void StreamingQ8(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                 int64_t ldy) {
  const int64_t stride = q8::RowBytes(k);
  int64_t j = 0;
  if (m == 1 && stride < 4096) {
    for (; j < n; ++j) y[j] = Q8Row(x, k, w + j * stride);
    return;
  }
  if (m == 1) {
    for (; j + 4 <= n; j += 4) Q8Block<4, 1>(x, k, w + j * stride, stride, y + j, ldy);
  } else {
    for (; j + 4 <= n; j += 4) Q8Rows<4>(x, m, k, w + j * stride, stride, y + j, ldy);
  }
  for (; j < n; ++j) Q8Rows<1>(x, m, k, w + j * stride, stride, y + j, ldy);
}

}  // namespace llama::avx512
