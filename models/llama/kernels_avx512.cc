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

// The weight format of the widening FMA kernel: 16 bfloat16 weights at w as 16 floats (Load, and
// Tail for the last n < 16 of a row, zeros after them).
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

// The FMA kernel's rows of x against one weight row (X: float; S: the elements of x a step), and
// where weight row j of the matrix w is.
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

// ---- Panels of weight rows, k-major (PackF32, PackBf16) ---------------------------------------
//
// Each panel of kPanel weight rows (the last one, nv < 64 rows, as it is) holds its rows' steps
// side by side: a step is G weights of a row along k (float32: 1; bfloat16: 2, the pair vdpbf16ps
// takes), so weight (j, G t + g) of the panel is at (t nv + j) G + g; an odd bfloat16 row's last
// weight follows alone, at (k - 1) nv + j. A tile of MB rows of x (MB <= 6) against a panel keeps
// MB x 4 accumulators of 16 outputs; each step broadcasts x's G values of row i and reads the
// panel's 64 x G weights, one sequential stream. Each output is one chain of FMAs (or dot
// products) along k from 0, whatever MB, the panel or the other rows: a row's result is bit for
// bit the same alone (decode at batch 1) as in any batch, and prefill forms its rows as decode
// does. Against the streaming kernel (a weight row against up to 4 rows of x, four accumulators
// an output, then reduced across lanes), no reduction is left and a weight vector feeds MB FMAs
// from registers: float32 at 16 rows of 3072 x 768, 79-93 -> 255-261 GFLOP/s, and at batch 1
// from memory 28-30 -> 34-43 GB/s (Zen 5, disco-llama-kernels; docs/performance.md).
constexpr int64_t kPanel = 64;

// The panel kernels' element types: Step broadcasts x's step and multiplies it into a, Weights
// loads a step's 16 outputs' weights (masked where the panel has fewer rows), and (bfloat16) the
// odd weight's step (Last) pairs it with a zero.
struct F32Panel {
  using T = float;
  static constexpr int64_t G = 1;
  static LLAMA_INLINE __m512 Weights(const float* w, __mmask16 m, bool full) {
    return full ? _mm512_loadu_ps(w) : _mm512_maskz_loadu_ps(m, w);
  }
  static LLAMA_INLINE __m512 X(const float* x) { return _mm512_set1_ps(*x); }
  static LLAMA_INLINE __m512 Step(__m512 a, __m512 x, __m512 w) { return _mm512_fmadd_ps(x, w, a); }
};
struct Bf16Panel {
  using T = uint16_t;
  static constexpr int64_t G = 2;
  static LLAMA_INLINE __m512 Weights(const uint16_t* w, __mmask16 m, bool full) {
    return _mm512_castsi512_ps(full ? _mm512_loadu_si512(w) : _mm512_maskz_loadu_epi32(m, w));
  }
  static LLAMA_INLINE __m512 X(const uint16_t* x) {
    uint32_t pair;
    std::memcpy(&pair, x, sizeof pair);
    return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(pair)));
  }
  static LLAMA_INLINE __m512 Step(__m512 a, __m512 x, __m512 w) {
    return _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)w);
  }
  static LLAMA_INLINE __m512 LastWeights(const uint16_t* w, __mmask16 m) {  // (w, 0) pairs
    return _mm512_castsi512_ps(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, w)));
  }
  static LLAMA_INLINE __m512 LastX(const uint16_t* x) {
    return _mm512_castsi512_ps(_mm512_set1_epi32(*x));
  }
};

// MB rows of x (rows k apart) against one panel of nv rows at wp (kFull: nv = kPanel).
template <typename P, int MB, bool kFull>
LLAMA_INLINE void PanelTile(const typename P::T* x, int64_t k, const typename P::T* wp, int64_t nv,
                            float* y, int64_t ldy) {
  constexpr int64_t G = P::G;
  const int64_t rows = kFull ? kPanel : nv, steps = k / G;
  __mmask16 mask[4];
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) mask[v] = Mask16(std::clamp<int64_t>(nv - 16 * v, 0, 16));
  __m512 a[MB][4];
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) a[i][v] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < steps; ++t) {
    const typename P::T* wr = wp + t * rows * G;
    __m512 wv[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) wv[v] = P::Weights(wr + 16 * G * v, mask[v], kFull);
#pragma GCC unroll 6
    for (int i = 0; i < MB; ++i) {
      const __m512 xb = P::X(x + i * k + t * G);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) a[i][v] = P::Step(a[i][v], xb, wv[v]);
    }
  }
  if constexpr (G > 1) {
    if (steps * G < k) {  // an odd bfloat16 row's last weight
      const typename P::T* wr = wp + steps * rows * G;
      __m512 wv[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) wv[v] = P::LastWeights(wr + 16 * v, mask[v]);
#pragma GCC unroll 6
      for (int i = 0; i < MB; ++i) {
        const __m512 xb = P::LastX(x + i * k + k - 1);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) a[i][v] = P::Step(a[i][v], xb, wv[v]);
      }
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(y + i * ldy + 16 * v, mask[v], a[i][v]);
  }
}

// MB rows of x against the panels of weight rows [j0, j1) (j0 a multiple of kPanel).
template <typename P, int MB>
__attribute__((noinline)) void PanelRows(const typename P::T* x, int64_t k, const typename P::T* w,
                                         int64_t n, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  for (int64_t jb = j0; jb < j1; jb += kPanel) {
    const int64_t nv = std::min(kPanel, n - jb);
    if (nv == kPanel) {
      PanelTile<P, MB, true>(x, k, w + jb * k, nv, y + jb, ldy);
    } else {
      PanelTile<P, MB, false>(x, k, w + jb * k, nv, y + jb, ldy);
    }
  }
}

// y[m, n] = x w^T on panels: tiles of 6 rows of x; above one tile, spans of panels
// (kPanelSpanBytes, kept in L2) go against each tile in turn.
template <typename P>
void Panels(const typename P::T* x, int64_t m, int64_t k, const typename P::T* w, int64_t n,
            float* y, int64_t ldy) {
  constexpr int64_t kPanelSpanBytes = 256 << 10;
  const int64_t row_bytes = k * int64_t{sizeof(typename P::T)};
  const int64_t span =
      m <= 6 ? n : std::max<int64_t>(1, kPanelSpanBytes / row_bytes / kPanel) * kPanel;
  for (int64_t j0 = 0; j0 < n; j0 += span) {
    const int64_t j1 = std::min(n, j0 + span);
    using Rows = void (*)(const typename P::T*, int64_t, const typename P::T*, int64_t, int64_t,
                          int64_t, float*, int64_t);
    static constexpr Rows kRows[] = {nullptr,         PanelRows<P, 1>, PanelRows<P, 2>,
                                     PanelRows<P, 3>, PanelRows<P, 4>, PanelRows<P, 5>};
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) PanelRows<P, 6>(x + i * k, k, w, n, j0, j1, y + i * ldy, ldy);
    if (i < m) kRows[m - i](x + i * k, k, w, n, j0, j1, y + i * ldy, ldy);
  }
}

// Where weight (j, p) of a panel of nv rows (steps of G) is.
template <int64_t G>
LLAMA_INLINE int64_t InPanel(int64_t j, int64_t p, int64_t nv, int64_t k) {
  return p < k / G * G ? (p / G * nv + j) * G + p % G : (k - 1) * nv + j;
}

template <int64_t G, typename T>
void PackPanels(T* w, int64_t n, int64_t k) {
  std::vector<T> rows(static_cast<size_t>(std::min(n, kPanel) * k));
  for (int64_t jb = 0; jb < n; jb += kPanel) {
    const int64_t nv = std::min(kPanel, n - jb);
    T* panel = w + jb * k;
    std::copy(panel, panel + nv * k, rows.begin());
    for (int64_t j = 0; j < nv; ++j) {
      for (int64_t p = 0; p < k; ++p) panel[InPanel<G>(j, p, nv, k)] = rows[j * k + p];
    }
  }
}

template <int64_t G, typename T>
void UnpackPanels(const T* w, int64_t n, int64_t k, int64_t j0, int64_t count, T* out) {
  for (int64_t r = 0; r < count; ++r) {
    const int64_t j = j0 + r, jb = j / kPanel * kPanel, nv = std::min(kPanel, n - jb);
    for (int64_t p = 0; p < k; ++p) out[r * k + p] = w[jb * k + InPanel<G>(j - jb, p, nv, k)];
  }
}

}  // namespace

void PackedF32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
               int64_t ldy) {
  Panels<F32Panel>(x, m, k, w, n, y, ldy);
}

void PackF32(float* w, int64_t n, int64_t k) { PackPanels<1>(w, n, k); }

void UnpackF32(const float* w, int64_t n, int64_t k, int64_t j0, int64_t count, float* out) {
  UnpackPanels<1>(w, n, k, j0, count, out);
}

void PackBf16(uint16_t* w, int64_t n, int64_t k) { PackPanels<2>(w, n, k); }

void UnpackBf16(const uint16_t* w, int64_t n, int64_t k, int64_t j0, int64_t count, uint16_t* out) {
  UnpackPanels<2>(w, n, k, j0, count, out);
}

namespace {

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

// int8 weights (q8.h) by VNNI byte products (vpdpbusd), exact in integers. Each row of x is first
// rounded per block of 32 to int16 in [-kXMax, kXMax] (dx = max |x| / kXMax: x off by at most
// dx / 2, about 2^-16 of the block's largest, far below the weights' own rounding) and split into
// two signed bytes, x = 256 h + l (l in [-128, 127], so h in [-127, 127]). vpdpbusd multiplies
// unsigned bytes by signed ones, 4 pairs into each int32 lane; the weights are taken unsigned as
// w + 128, and over the weights of a lane
//   256 * sum (w + 128) h + sum (w + 128) l - 128 * sum x = sum w x,
// exact in int32 (under 2^29 on the way).
//
// On the Zen 4 cores this was tuned on, a vector instruction issues about every 0.6 ns whatever
// its width or kind (a 256-bit FMA as a 512-bit one), so what counts is instructions per weight.
// Blocks in a row's natural order (two blocks a 64-byte load, a permuted pair of scales, one FMA)
// take 7 to 9 per 64 weights, no faster than widening to int16 and vpmaddwd (8). So PackQ8
// rearranges each row's groups of 8 whole blocks (256 weights) once at load: the group's 4 loads
// of 64 bytes each hold 8 weights of every block (lanes 2j and 2j + 1: block j), stored as w + 128;
// each lane sums 16 weights of one block over 8 vpdpbusd (x's high and low bytes, packed the same
// way), and one conversion, one permute of 8 scales and one FMA take the whole group: 13
// instructions per 256 weights. A row's blocks past its last whole group (k % 256) keep q8.h's
// order and go two at a time. Each lane's sum, under 2^26, is rounded once to float32. From cache,
// disco-llama-kernels, 768 x 2048 / 3072 x 768: batch 1 60 / 52 -> 74 / 79 GFLOP/s, batch 4 80 /
// 73 -> 105 / 84, batch 64 100 / 75 -> 104 / 105.
constexpr int32_t kXMax = 127 * 257;
constexpr int64_t kGroup = 8;                         // blocks of a packed group
constexpr int64_t kGroupBytes = kGroup * q8::kBlock;  // 256: 4 loads of 64 bytes

LLAMA_INLINE __mmask64 Mask64(int64_t n) {
  return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

// The 256 bytes at p rearranged into the packed order, each XOR `flip`: bytes 8 s to 8 s + 7 of
// block j (s < 4) go to 64 s + 8 j, 8 bytes at a time.
void PackGroup(uint8_t* p, uint64_t flip) {
  uint64_t t[kGroupBytes / 8];
  for (int64_t j = 0; j < kGroup; ++j) {
    for (int64_t s = 0; s < 4; ++s) {
      uint64_t v;
      std::memcpy(&v, p + 32 * j + 8 * s, 8);
      t[8 * s + j] = v ^ flip;
    }
  }
  std::memcpy(p, t, sizeof t);
}

LLAMA_INLINE void Q8Scales(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t i = 0; i < nb; i += 16) {
    const __m256i h = _mm256_maskz_loadu_epi16(Mask16(std::min<int64_t>(16, nb - i)), src + 2 * i);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
}

// A row of x as the kernel reads it: kp = its blocks rounded up to an even count, times 32; the
// bytes of its whole groups packed as the weights'.
struct Q8X {
  int8_t* h;   // kp high bytes
  int8_t* l;   // kp low bytes
  int32_t* c;  // for group g, 16 at 16 g: minus 128 times the sum of lane L's 16 x; then, past
               // the whole groups, 128 times the sum of each 4 consecutive x
  float* d;    // the blocks' scales (zeros past the row's)
};

// x (k floats) into `out`, whose arrays hold zeros.
void QuantizeX(const float* x, int64_t k, const Q8X& out) {
  alignas(64) int32_t q[q8::kBlock];
  for (int64_t b = 0, p = 0; p < k; ++b, p += q8::kBlock) {
    const int64_t n = std::min<int64_t>(q8::kBlock, k - p);
    const __m512 x0 = _mm512_maskz_loadu_ps(Mask16(std::min<int64_t>(16, n)), x + p);
    const __m512 x1 = _mm512_maskz_loadu_ps(Mask16(std::max<int64_t>(0, n - 16)), x + p + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    // max ignores a NaN: a block holding one (or an infinity) gets a NaN scale, so that the row's
    // products are NaN as the float kernels' are, not quietly finite.
    const bool finite = _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q) == 0 &&
                        _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q) == 0 && amax <= FLT_MAX;
    out.d[b] = finite ? amax / kXMax : NAN;
    // A block of max |x| under 2^-112 counts as zeros (kXMax / max would overflow): at most 2^-52
    // of its row's largest, as StreamingQ8 scales rows under 2^-60 up.
    const __m512 inv = _mm512_set1_ps(amax > 0x1p-112f ? kXMax / amax : 0.0f);
    const __m512i lo = _mm512_set1_epi32(-kXMax), hi = _mm512_set1_epi32(kXMax);
    for (int half = 0; half < 2; ++half) {  // to nearest even; a NaN's INT_MIN clamped
      const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(half == 0 ? x0 : x1, inv));
      const __m512i qv = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
      const __m512i l = _mm512_srai_epi32(_mm512_slli_epi32(qv, 24), 24);
      const __m512i h = _mm512_srai_epi32(_mm512_sub_epi32(qv, l), 8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.l + p + 16 * half), _mm512_cvtepi32_epi8(l));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.h + p + 16 * half), _mm512_cvtepi32_epi8(h));
      _mm512_store_si512(q + 16 * half, qv);
    }
    for (int g = 0; g < q8::kBlock / 4; ++g) {
      out.c[p / 4 + g] = 128 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
    }
  }
  for (int64_t g = 0; g < k / kGroupBytes; ++g) {
    const int64_t p = g * kGroupBytes;
    PackGroup(reinterpret_cast<uint8_t*>(out.h + p), 0);
    PackGroup(reinterpret_cast<uint8_t*>(out.l + p), 0);
    int32_t lane[16];  // lane 2j + t: elements 8 s + 4 t + e of block j
    for (int64_t j = 0; j < kGroup; ++j) {
      for (int64_t t = 0; t < 2; ++t) {
        int32_t sum = 0;
        for (int64_t s = 0; s < 4; ++s) sum += out.c[(p + 32 * j + 8 * s + 4 * t) / 4];
        lane[2 * j + t] = -sum;
      }
    }
    std::memcpy(out.c + 16 * g, lane, sizeof lane);  // what it overwrites is used
  }
  const int64_t groups = k / kGroupBytes, kp = (q8::Blocks(k) + 1) / 2 * 2 * q8::kBlock;
  std::memmove(out.c + 16 * groups, out.c + 64 * groups,  // the padding's zeros too
               sizeof(int32_t) * static_cast<size_t>((kp - groups * kGroupBytes) / 4));
}

// One weight row against MB rows of x, y[i * ldy]. Each output has one accumulator taking the
// groups, then the pairs of blocks past them, in order, summed across its lanes at the end: the
// same operations whatever MB, so a row of y is bit for bit the same in any batch. The blocks'
// scales dw * dx are formed up to kChunk at a time, 16 by an instruction, into a buffer. (4 weight
// rows at a time against one row of x read their memory at half the speed: 15 GB/s.)
constexpr int64_t kChunk = 128;  // a multiple of kGroup
template <int MB>
LLAMA_INLINE void Q8Rows(const Q8X* x, int64_t k, const uint8_t* w, float* y, int64_t ldy) {
  __m512 a[MB];
  for (int i = 0; i < MB; ++i) a[i] = _mm512_setzero_ps();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i eight = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const int64_t nb = q8::Blocks(k), grouped = k / kGroupBytes * kGroup;
  const int64_t grouped_p = grouped * q8::kBlock, tail_c = grouped / kGroup * 16;
  alignas(64) float dw[kChunk], sc[MB][kChunk];
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t n = std::min(kChunk, nb - b0);
    Q8Scales(w + k + 2 * b0, n, dw);
    for (int i = 0; i < MB; ++i) {
      for (int64_t c = 0; c < n; c += 16) {
        _mm512_store_ps(sc[i] + c,
                        _mm512_mul_ps(_mm512_load_ps(dw + c), _mm512_loadu_ps(x[i].d + b0 + c)));
      }
    }
    int64_t c = 0;
    for (; c < n && b0 + c < grouped; c += kGroup) {
      const int64_t p = (b0 + c) * q8::kBlock;
      __m512i wv[4];
      for (int s = 0; s < 4; ++s) wv[s] = _mm512_loadu_si512(w + p + 64 * s);
      for (int i = 0; i < MB; ++i) {
        __m512i th = _mm512_setzero_si512(), tl = _mm512_loadu_si512(x[i].c + p / 16);
        for (int s = 0; s < 4; ++s) {
          th = _mm512_dpbusd_epi32(th, wv[s], _mm512_loadu_si512(x[i].h + p + 64 * s));
          tl = _mm512_dpbusd_epi32(tl, wv[s], _mm512_loadu_si512(x[i].l + p + 64 * s));
        }
        const __m512i t = _mm512_add_epi32(_mm512_slli_epi32(th, 8), tl);
        const __m512 s =
            _mm512_permutexvar_ps(eight, _mm512_castps256_ps512(_mm256_load_ps(sc[i] + c)));
        a[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, a[i]);
      }
    }
    for (; c < n; c += 2) {
      const int64_t p = (b0 + c) * q8::kBlock;
      const __m512i wu =
          _mm512_xor_si512(p + 2 * q8::kBlock <= k ? _mm512_loadu_si512(w + p)
                                                   : _mm512_maskz_loadu_epi8(Mask64(k - p), w + p),
                           flip);
      for (int i = 0; i < MB; ++i) {
        __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu, _mm512_loadu_si512(x[i].h + p));
        t = _mm512_dpbusd_epi32(_mm512_slli_epi32(t, 8), wu, _mm512_loadu_si512(x[i].l + p));
        t = _mm512_sub_epi32(t, _mm512_loadu_si512(x[i].c + tail_c + (p - grouped_p) / 4));
        const __m512 s = _mm512_permutexvar_ps(
            pair, _mm512_castps128_ps512(
                      _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(sc[i] + c)))));
        a[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, a[i]);
      }
    }
  }
  for (int i = 0; i < MB; ++i) y[i * ldy] = _mm512_reduce_add_ps(a[i]);
}

}  // namespace

void PackQ8(uint8_t* w, int64_t n, int64_t k) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < k / kGroupBytes; ++g) {
      PackGroup(w + j * q8::RowBytes(k) + g * kGroupBytes, 0x8080808080808080);
    }
  }
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
  Panels<Bf16Panel>(xb, m, k, w, n, y, ldy);
}

namespace {

void Q8Products(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                int64_t ldy) {
  const int64_t nb = q8::Blocks(k), kp = (nb + 1) / 2 * 2 * q8::kBlock;
  const int64_t nbp = (nb + 15) / 16 * 16, stride = q8::RowBytes(k);
  // Each row's bytes in one buffer, h, l and c a cache line apart and the rows 3 kp + 256 bytes
  // apart (not a multiple of 4 KiB): as separate arrays, 4 rows' 12 streams read side by side at
  // the same offsets from strides of 2 or 4 KiB shared the L1's sets (16 rows of 768 x 2048: 89
  // GFLOP/s, under the old kernel's 100; 109 in one buffer).
  const int64_t row_bytes = 3 * kp + 256;
  struct alignas(64) Line {
    int8_t b[64];
  };
  thread_local std::vector<Line> buf;
  thread_local std::vector<float> dx;
  buf.assign(static_cast<size_t>((m * row_bytes + 63) / 64), Line{});  // zeros: each row's
  dx.assign(static_cast<size_t>(m * nbp), 0.0f);                       // padding
  auto row = [&](int64_t i) {
    auto* r = reinterpret_cast<int8_t*>(buf.data()) + i * row_bytes;
    return Q8X{r, r + kp + 64, reinterpret_cast<int32_t*>(r + 2 * kp + 128), dx.data() + i * nbp};
  };
  for (int64_t i = 0; i < m; ++i) QuantizeX(x + i * k, k, row(i));
  if (m == 1) {  // decode at batch 1: the loop with the kernel inlined
    const Q8X x0 = row(0);
    for (int64_t j = 0; j < n; ++j) Q8Rows<1>(&x0, k, w + j * stride, y + j, ldy);
    return;
  }
  // As Streaming: above 4 rows, a panel of weight rows from L2 against each block of x in turn.
  const int64_t panel = m <= 4 ? n : std::max<int64_t>(1, kPanelBytes / stride);
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t j1 = std::min(n, j0 + panel);
    for (int64_t i = 0; i < m; i += 4) {
      const Q8X xb[4] = {row(i), row(std::min(i + 1, m - 1)), row(std::min(i + 2, m - 1)),
                         row(std::min(i + 3, m - 1))};
      for (int64_t j = j0; j < j1; ++j) {
        auto rows = [&](auto mb) {
          Q8Rows<decltype(mb)::value>(xb, k, w + j * stride, y + i * ldy + j, ldy);
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

// 2^e brings a row's largest |x| into [1, 2) where it is under 2^-60: the block scales (max |x|
// / kXMax) and their products with the weights' would underflow in a row of tiny values (a norm
// weight of 1e-36 left every int8 logit off by three times the largest). 0 elsewhere: rows of
// ordinary values are left as they are (scaling every row in the products' pass cost batch-4
// decode 15%), and rows of zeros or holding a NaN or an infinity.
int RowExponent(const float* x, int64_t k) {
  __m512 m = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + p)));
  if (p < k) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(Mask16(k - p), x + p)));
  const float amax = _mm512_reduce_max_ps(m);
  return amax > 0.0f && amax < 0x1p-60f ? -std::ilogb(amax) : 0;
}

// v (count floats) times 2^e, exactly (scalef), into out (which may be v).
void Scale2(const float* v, int64_t count, int e, float* out) {
  const __m512 f = _mm512_set1_ps(static_cast<float>(e));
  int64_t j = 0;
  for (; j + 16 <= count; j += 16) {
    _mm512_storeu_ps(out + j, _mm512_scalef_ps(_mm512_loadu_ps(v + j), f));
  }
  if (j < count) {
    const __mmask16 mask = Mask16(count - j);
    _mm512_mask_storeu_ps(out + j, mask, _mm512_scalef_ps(_mm512_maskz_loadu_ps(mask, v + j), f));
  }
}

}  // namespace

// Rows of tiny x are products of x 2^e, their outputs then 2^-e: exact, as if unscaled.
void StreamingQ8(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                 int64_t ldy) {
  thread_local std::vector<int> exps;
  thread_local std::vector<float> scaled;
  exps.assign(static_cast<size_t>(m), 0);
  bool any = false;
  for (int64_t i = 0; i < m; ++i) any |= (exps[i] = RowExponent(x + i * k, k)) != 0;
  if (!any) return Q8Products(x, m, k, w, n, y, ldy);
  scaled.resize(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) Scale2(x + i * k, k, exps[i], scaled.data() + i * k);
  Q8Products(scaled.data(), m, k, w, n, y, ldy);
  for (int64_t i = 0; i < m; ++i) {
    if (exps[i] != 0) Scale2(y + i * ldy, n, -exps[i], y + i * ldy);
  }
}

}  // namespace llama::avx512
