#include "llama/kernels_avx512.h"

// GCC 12 warns inside its own avx512fintrin.h (the _mm512_undefined_* that the masked loads and
// _mm512_reduce_add_ps start from), not on this file's code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "llama/kernels.h"
#include "llama/q8.h"

#define LLAMA_INLINE inline __attribute__((always_inline))

namespace llama::avx512 {
namespace {

constexpr int64_t kStreamingBlocks = (kStreamingRows + 3) / 4;

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

// Every product here forms each row of y in one order, whatever the other rows of x are: MB rows
// of x (MB <= 4) against one weight row, four accumulators a row of x, a[u] taking the u-th of
// every four steps, the steps left over in a[0], the row's short tail in a[1], summed as (a0 + a1)
// + (a2 + a3). So a row's result is bit for bit the same alone (decode at batch 1) as in any
// batch: the server's greedy tokens do not depend on what else runs. Weight rows go one after
// another, one sequential stream (8 rows side by side, 8 streams, ran at half the speed on rows
// of 768 bfloat16); a weight row is read once for up to 4 rows of x.
//
// Above one row, x is first copied into blocks of 4 rows whose steps interleave (step s of rows
// 0..3, then step s + 1 of each: XRows), so that the loads of x are one sequential stream too:
// 4 rows of 16 KiB read side by side from L2 halved the speed at batch 4 (rows of 4096 floats).
LLAMA_INLINE float Reduce(const __m512 (&a)[4]) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

// Where element p of row i of x is: x + i * row + (p / S) * step + p % S. Rows as given: row = k,
// step = S; interleaved (Interleave): row = S, step = MB * S, the last step padded with zeros.
template <typename T, int S>
struct XRows {
  const T* x;
  int64_t row, step;
  LLAMA_INLINE const T* At(int i, int64_t p) const { return x + i * row + (p / S) * step + p % S; }
};

template <int MB, typename L>
LLAMA_INLINE void FmaRows(XRows<float, 16> x, int64_t k, const typename L::W* w, float* y,
                          int64_t ldy) {
  __m512 a[MB][4];
  for (int i = 0; i < MB; ++i) {
    for (int u = 0; u < 4; ++u) a[i][u] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 64 <= k; p += 64) {
    for (int u = 0; u < 4; ++u) {
      const __m512 wv = L::Load(w + p + 16 * u);
      for (int i = 0; i < MB; ++i) {
        a[i][u] = _mm512_fmadd_ps(_mm512_loadu_ps(x.At(i, p + 16 * u)), wv, a[i][u]);
      }
    }
  }
  for (; p + 16 <= k; p += 16) {
    const __m512 wv = L::Load(w + p);
    for (int i = 0; i < MB; ++i)
      a[i][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x.At(i, p)), wv, a[i][0]);
  }
  if (p < k) {
    const __m512 wv = L::Tail(w + p, k - p);
    for (int i = 0; i < MB; ++i) {
      a[i][1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(Mask16(k - p), x.At(i, p)), wv, a[i][1]);
    }
  }
  for (int i = 0; i < MB; ++i) y[i * ldy] = Reduce(a[i]);
}

// The same by vdpbf16ps: x already bfloat16, 32 weights a step, each adding the products of 16
// pairs into 16 float32 lanes.
LLAMA_INLINE __m512bh LoadBh(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

template <int MB>
LLAMA_INLINE void DotRows(XRows<uint16_t, 32> x, int64_t k, const uint16_t* w, float* y,
                          int64_t ldy) {
  __m512 a[MB][4];
  for (int i = 0; i < MB; ++i) {
    for (int u = 0; u < 4; ++u) a[i][u] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 128 <= k; p += 128) {
    for (int u = 0; u < 4; ++u) {
      const __m512bh wv = LoadBh(w + p + 32 * u);
      for (int i = 0; i < MB; ++i) {
        a[i][u] = _mm512_dpbf16_ps(a[i][u], LoadBh(x.At(i, p + 32 * u)), wv);
      }
    }
  }
  for (; p + 32 <= k; p += 32) {
    const __m512bh wv = LoadBh(w + p);
    for (int i = 0; i < MB; ++i) a[i][0] = _mm512_dpbf16_ps(a[i][0], LoadBh(x.At(i, p)), wv);
  }
  if (p < k) {  // zeros past the row's end: their products are 0
    const __mmask32 mask = Mask32(k - p);
    const auto wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + p);
    for (int i = 0; i < MB; ++i) {
      a[i][1] = _mm512_dpbf16_ps(a[i][1], (__m512bh)_mm512_maskz_loadu_epi16(mask, x.At(i, p)), wv);
    }
  }
  for (int i = 0; i < MB; ++i) y[i * ldy] = Reduce(a[i]);
}

// One kernel's rows of x against one weight row (X: float for the FMA kernels, uint16_t bfloat16
// for the dot kernel; S: the elements of x a step), and where weight row j of the matrix w is.
template <typename L>
struct Fma {
  using X = float;
  using W = typename L::W;
  static constexpr int S = 16;
  static const W* Row(const W* w, int64_t k, int64_t j) { return w + j * k; }
  template <int MB>
  static LLAMA_INLINE void Rows(XRows<X, S> x, int64_t k, const W* w, float* y, int64_t ldy) {
    FmaRows<MB, L>(x, k, w, y, ldy);
  }
};
struct Dot {
  using X = uint16_t;
  using W = uint16_t;
  static constexpr int S = 32;
  static const W* Row(const W* w, int64_t k, int64_t j) { return w + j * k; }
  template <int MB>
  static LLAMA_INLINE void Rows(XRows<X, S> x, int64_t k, const W* w, float* y, int64_t ldy) {
    DotRows<MB>(x, k, w, y, ldy);
  }
};

// Rows i0..i0+mb of x (m rows of k) copied into XRows's interleaved layout at out (mb * kpad).
template <typename T, int S>
XRows<T, S> Interleave(const T* x, int64_t k, int64_t mb, T* out) {
  const int64_t steps = (k + S - 1) / S;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < mb; ++i) {
      T* o = out + (s * mb + i) * S;
      const int64_t n = std::min<int64_t>(S, k - s * S);
      std::memcpy(o, x + i * k + s * S, static_cast<size_t>(n) * sizeof(T));
      std::fill(o + n, o + S, T{});
    }
  }
  return {out, S, mb * S};
}

template <typename K>
void Streaming(const typename K::X* x, int64_t m, int64_t k, const typename K::W* w, int64_t n,
               float* y, int64_t ldy) {
  using X = typename K::X;
  constexpr int S = K::S;
  if (m == 1) {
    const XRows<X, S> xr{x, k, S};
    for (int64_t j = 0; j < n; ++j) K::template Rows<1>(xr, k, K::Row(w, k, j), y + j, ldy);
    return;
  }
  if (m > kStreamingRows) {  // Linear sends no more; in turns of kStreamingRows all the same
    for (int64_t i = 0; i < m; i += kStreamingRows) {
      Streaming<K>(x + i * k, std::min(kStreamingRows, m - i), k, w, n, y + i * ldy, ldy);
    }
    return;
  }
  const int64_t kpad = (k + S - 1) / S * S, blocks = (m + 3) / 4;
  thread_local std::vector<X> packed;
  packed.resize(static_cast<size_t>(blocks * 4 * kpad));
  XRows<X, S> xr[kStreamingBlocks];
  for (int64_t b = 0; b < blocks; ++b) {
    xr[b] = Interleave<X, S>(x + b * 4 * k, k, std::min<int64_t>(4, m - b * 4),
                             packed.data() + b * 4 * kpad);
  }
  for (int64_t j = 0; j < n; ++j) {
    const typename K::W* row = K::Row(w, k, j);
    for (int64_t b = 0; b < blocks; ++b) {
      float* yb = y + b * 4 * ldy + j;
      switch (std::min<int64_t>(4, m - b * 4)) {
        case 4:
          K::template Rows<4>(xr[b], k, row, yb, ldy);
          break;
        case 3:
          K::template Rows<3>(xr[b], k, row, yb, ldy);
          break;
        case 2:
          K::template Rows<2>(xr[b], k, row, yb, ldy);
          break;
        default:
          K::template Rows<1>(xr[b], k, row, yb, ldy);
          break;
      }
    }
  }
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

// int8 weights (q8.h): 16 weights at a time widened int8 -> int32 -> float32. A block's float16
// scale, from the row's end:
LLAMA_INLINE float Q8Scale(const uint8_t* row, int64_t k, int64_t b) {
  uint16_t h;
  std::memcpy(&h, row + k + 2 * b, 2);
  return _cvtsh_ss(h);
}
// Blocks whose float16 scales are widened at once, 16 by an instruction, into a buffer the block
// loop broadcasts from (a load; widening each scale alone took the shuffle port the int8 -> int32
// widening needs).
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

// MB rows of x against one quantized row, in AllRows's order: a block's 32 products summed, then
// scaled once into the accumulator of its turn. A row's scales are widened first, up to
// kRowScales blocks (rows up to 8192) at once: the row's stream then goes once to its scales at
// the end and back, not once per 64 blocks. A last short block in scalars.
constexpr int64_t kRowScales = 256;
template <int MB>
LLAMA_INLINE void Q8Rows(XRows<float, 32> x, int64_t k, const uint8_t* row, float* y, int64_t ldy) {
  __m512 a[MB][4];
  for (int i = 0; i < MB; ++i) {
    for (int u = 0; u < 4; ++u) a[i][u] = _mm512_setzero_ps();
  }
  const int64_t full = k / q8::kBlock;
  alignas(64) float scales[kRowScales];
  auto block = [&](int64_t blk, int u) {
    const int64_t p = blk * q8::kBlock;
    const auto* q = reinterpret_cast<const int8_t*>(row + p);
    const __m512 w0 = Widen16(q), w1 = Widen16(q + 16);
    const __m512 d = _mm512_set1_ps(scales[blk % kRowScales]);
    for (int i = 0; i < MB; ++i) {
      const float* xi = x.At(i, p);
      const __m512 s =
          _mm512_fmadd_ps(_mm512_loadu_ps(xi + 16), w1, _mm512_mul_ps(_mm512_loadu_ps(xi), w0));
      a[i][u] = _mm512_fmadd_ps(d, s, a[i][u]);
    }
  };
  for (int64_t b = 0; b < full; b += kRowScales) {
    const int64_t nb = std::min(kRowScales, full - b);
    Q8Scales(row + k + 2 * b, nb, scales);
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
      for (int u = 0; u < 4; ++u) block(b + i + u, u);
    }
    for (; i < nb; ++i) block(b + i, 0);
  }
  const float d = full * q8::kBlock < k ? Q8Scale(row, k, full) : 0.0f;
  for (int i = 0; i < MB; ++i) {
    float tail = 0.0f;
    for (int64_t p = full * q8::kBlock; p < k; ++p) {
      tail += *x.At(i, p) * static_cast<float>(static_cast<int8_t>(row[p]));
    }
    y[i * ldy] = Reduce(a[i]) + tail * d;
  }
}

struct Q8 {
  using X = float;
  using W = uint8_t;
  static constexpr int S = q8::kBlock;
  static const W* Row(const W* w, int64_t k, int64_t j) { return w + j * q8::RowBytes(k); }
  template <int MB>
  static LLAMA_INLINE void Rows(XRows<X, S> x, int64_t k, const W* w, float* y, int64_t ldy) {
    Q8Rows<MB>(x, k, w, y, ldy);
  }
};

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
  Streaming<Q8>(x, m, k, w, n, y, ldy);
}

}  // namespace llama::avx512
