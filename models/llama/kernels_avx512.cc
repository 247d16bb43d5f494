#include "llama/kernels_avx512.h"

// GCC 12 warns inside its own avx512fintrin.h (the _mm512_undefined_* that the masked loads and
// _mm512_reduce_add_ps start from), not on this file's code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "llama/kernels.h"
#include "llama/q8.h"

#define LLAMA_INLINE inline __attribute__((always_inline))

namespace llama::avx512 {
namespace {

constexpr int64_t kPanelBytes = 128 << 10;  // weight rows reused from L2 by each block of x

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

// Where element p (a multiple of S) of row i of MB rows of x is: one row as given, x + p;
// interleaved (Interleave: the MB rows' step p / S side by side, the last step padded with
// zeros), x + p * MB + i * S. Both are constant offsets from a pointer that advances with p (an
// earlier form, x + i * row + (p / S) * step, cost a shift and a multiply per load).
template <typename T, int S>
struct XRows {
  const T* x;
  template <int MB>
  LLAMA_INLINE const T* At(int i, int64_t p) const {
    return x + p * MB + i * S;
  }
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
        a[i][u] = _mm512_fmadd_ps(_mm512_loadu_ps(x.template At<MB>(i, p + 16 * u)), wv, a[i][u]);
      }
    }
  }
  for (; p + 16 <= k; p += 16) {
    const __m512 wv = L::Load(w + p);
    for (int i = 0; i < MB; ++i)
      a[i][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x.template At<MB>(i, p)), wv, a[i][0]);
  }
  if (p < k) {
    const __m512 wv = L::Tail(w + p, k - p);
    for (int i = 0; i < MB; ++i) {
      a[i][1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(Mask16(k - p), x.template At<MB>(i, p)), wv,
                                a[i][1]);
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
        a[i][u] = _mm512_dpbf16_ps(a[i][u], LoadBh(x.template At<MB>(i, p + 32 * u)), wv);
      }
    }
  }
  for (; p + 32 <= k; p += 32) {
    const __m512bh wv = LoadBh(w + p);
    for (int i = 0; i < MB; ++i)
      a[i][0] = _mm512_dpbf16_ps(a[i][0], LoadBh(x.template At<MB>(i, p)), wv);
  }
  if (p < k) {  // zeros past the row's end: their products are 0
    const __mmask32 mask = Mask32(k - p);
    const auto wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + p);
    for (int i = 0; i < MB; ++i) {
      a[i][1] = _mm512_dpbf16_ps(
          a[i][1], (__m512bh)_mm512_maskz_loadu_epi16(mask, x.template At<MB>(i, p)), wv);
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

// The mb rows of k at x copied into XRows's interleaved layout at out (mb x k padded to S).
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
  return {out};
}

template <typename K>
void Streaming(const typename K::X* x, int64_t m, int64_t k, const typename K::W* w, int64_t n,
               float* y, int64_t ldy) {
  using X = typename K::X;
  constexpr int S = K::S;
  if (m == 1) {
    const XRows<X, S> xr{x};
    for (int64_t j = 0; j < n; ++j) K::template Rows<1>(xr, k, K::Row(w, k, j), y + j, ldy);
    return;
  }
  if (m > kStreamingRows) {  // prefill (kernels.h's OneOrderRows): in turns, each the same
    for (int64_t i = 0; i < m; i += kStreamingRows) {
      Streaming<K>(x + i * k, std::min(kStreamingRows, m - i), k, w, n, y + i * ldy, ldy);
    }
    return;
  }
  // Blocks of 4 rows of x. Above one block, a panel of weight rows (kPanelBytes, kept in L2)
  // goes against each block in turn, so that a block's x stays in L1 while the panel's rows pass
  // (all blocks went through L1 for every weight row: 48 KiB of float32 x at 16 rows of 768;
  // float32 at 16 rows of 768 went from 50 to 70 GFLOP/s, bfloat16 of 3072 from 98 to 137).
  // Blocks of 2 where 4 overflow L1 (float32 rows past 1536) were slower: a weight load for 2
  // FMAs. Each product is the same whatever the blocking.
  const int64_t kpad = (k + S - 1) / S * S, per = 4, blocks = (m + per - 1) / per;
  thread_local std::vector<X> packed;
  packed.resize(static_cast<size_t>(blocks * per * kpad));
  XRows<X, S> xr[(kStreamingRows + 3) / 4];
  for (int64_t b = 0; b < blocks; ++b) {
    xr[b] = Interleave<X, S>(x + b * per * k, k, std::min(per, m - b * per),
                             packed.data() + b * per * kpad);
  }
  const int64_t panel =
      blocks == 1 ? n : std::max<int64_t>(1, kPanelBytes / (k * int64_t{sizeof(typename K::W)}));
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t j1 = std::min(n, j0 + panel);
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t j = j0; j < j1; ++j) {
        const typename K::W* row = K::Row(w, k, j);
        float* yb = y + b * per * ldy + j;
        switch (std::min(per, m - b * per)) {
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

// int8 weights (q8.h) by integer products: each row of x is first quantized per block of 32 to
// int16 (dx = max |x| / 32767, x off by at most dx / 2: about 2^-16 of the block's largest, far
// below the weights' own rounding), then a block is one widening of its 32 weights to int16, one
// vpmaddwd (32 products summed in pairs into 16 int32 lanes, at most 32 * 127 * 32767 < 2^31 in
// all), one conversion to float and one FMA with dw * dx: 4 instructions for 32 weights where
// widening to float32 took 7, which left a core at 18 GB/s of weights against its 33 (batch 1).
// A row's last short block is loaded masked (zeros past k: the scales follow the weights), x's
// padded with zeros.
LLAMA_INLINE void Q8Scales(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t i = 0; i < nb; i += 16) {
    const __m256i h = _mm256_maskz_loadu_epi16(Mask16(std::min<int64_t>(16, nb - i)), src + 2 * i);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
}

// x (k floats) as blocks of 32 int16 (kp = k rounded up to 32, zeros after k) and their scales.
void QuantizeX(const float* x, int64_t k, int16_t* q, float* d) {
  for (int64_t b = 0, p = 0; p < k; ++b, p += q8::kBlock) {
    const int64_t n = std::min<int64_t>(q8::kBlock, k - p);
    const __m512 x0 = _mm512_maskz_loadu_ps(Mask16(std::min<int64_t>(16, n)), x + p);
    const __m512 x1 = _mm512_maskz_loadu_ps(Mask16(std::max<int64_t>(0, n - 16)), x + p + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    // max ignores a NaN: a block holding one (or an infinity) gets a NaN scale, so that the row's
    // products are NaN as the float kernels' are, not quietly finite.
    const bool finite = _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q) == 0 &&
                        _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q) == 0 && amax <= FLT_MAX;
    d[b] = finite ? amax / 32767.0f : NAN;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv));  // to nearest even
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + p), _mm512_cvtsepi32_epi16(q0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + p + 16), _mm512_cvtsepi32_epi16(q1));
  }
}

// MB rows of x (xq: kp int16 a row, dx: their block scales, nbp a row) against one quantized
// row, in the order of the kernels above: block b into accumulator b % 4 of each group of four,
// the blocks left over into a[0]. The row's scales times x's, 16 blocks by an instruction, up to
// kChunk blocks at a time, into a buffer the FMAs broadcast from.
constexpr int64_t kChunk = 128;
template <int MB>
LLAMA_INLINE void Q8Rows(const int16_t* xq, int64_t kp, const float* dx, int64_t nbp, int64_t k,
                         const uint8_t* row, float* y, int64_t ldy) {
  __m512 a[MB][4];
  for (int i = 0; i < MB; ++i) {
    for (int u = 0; u < 4; ++u) a[i][u] = _mm512_setzero_ps();
  }
  const int64_t nb = kp / q8::kBlock;
  alignas(64) float dw[kChunk], sc[MB][kChunk];
  auto block = [&](int64_t b, int64_t c, int u) {  // block b, c of its chunk
    const int64_t p = b * q8::kBlock;
    const __m256i q = p + q8::kBlock <= k
                          ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p))
                          : _mm256_maskz_loadu_epi8(Mask32(k - p), row + p);
    const __m512i w = _mm512_cvtepi8_epi16(q);
    for (int i = 0; i < MB; ++i) {
      const __m512i prod = _mm512_madd_epi16(w, _mm512_loadu_si512(xq + i * kp + p));
      a[i][u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), _mm512_set1_ps(sc[i][c]), a[i][u]);
    }
  };
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t n = std::min(kChunk, nb - b0);
    Q8Scales(row + k + 2 * b0, n, dw);
    for (int i = 0; i < MB; ++i) {
      for (int64_t c = 0; c < n; c += 16) {
        _mm512_store_ps(sc[i] + c, _mm512_mul_ps(_mm512_load_ps(dw + c),
                                                 _mm512_loadu_ps(dx + i * nbp + b0 + c)));
      }
    }
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
      for (int u = 0; u < 4; ++u) block(b0 + c + u, c + u, u);
    }
    for (; c < n; ++c) block(b0 + c, c, 0);
  }
  for (int i = 0; i < MB; ++i) y[i * ldy] = Reduce(a[i]);
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
  const int64_t nb = (k + q8::kBlock - 1) / q8::kBlock, kp = nb * q8::kBlock;
  const int64_t nbp = (nb + 15) / 16 * 16, stride = q8::RowBytes(k);
  thread_local std::vector<int16_t> xq;
  thread_local std::vector<float> dx;
  xq.resize(static_cast<size_t>(m * kp));  // QuantizeX writes every block, padding included
  dx.assign(static_cast<size_t>(m * nbp), 0.0f);
  for (int64_t i = 0; i < m; ++i) QuantizeX(x + i * k, k, xq.data() + i * kp, dx.data() + i * nbp);
  if (m == 1) {  // decode at batch 1: the loop with the kernel inlined
    for (int64_t j = 0; j < n; ++j)
      Q8Rows<1>(xq.data(), kp, dx.data(), nbp, k, w + j * stride, y + j, ldy);
    return;
  }
  // As Streaming: above 4 rows, a panel of weight rows from L2 against each block of x in turn.
  const int64_t panel = m <= 4 ? n : std::max<int64_t>(1, kPanelBytes / stride);
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t j1 = std::min(n, j0 + panel);
    for (int64_t i = 0; i < m; i += 4) {
      for (int64_t j = j0; j < j1; ++j) {
        auto rows = [&](auto mb) {
          Q8Rows<decltype(mb)::value>(xq.data() + i * kp, kp, dx.data() + i * nbp, nbp, k,
                                      w + j * stride, y + i * ldy + j, ldy);
        };
        switch (std::min<int64_t>(4, m - i)) {
          case 4:
            rows(std::integral_constant<int, 4>());
            break;
          case 3:
            rows(std::integral_constant<int, 3>());
            break;
          case 2:
            rows(std::integral_constant<int, 2>());
            break;
          default:
            rows(std::integral_constant<int, 1>());
            break;
        }
      }
    }
  }
}

}  // namespace llama::avx512
