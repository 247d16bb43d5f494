#include "llama/kernels_avx512.h"

#include "llama/avx512_common.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "llama/kernels.h"
#include "llama/q8.h"

namespace llama::avx512 {
namespace {

constexpr int64_t kPanelBytes = 128 << 10;  // weight rows reused from L2 by each block of x

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

// A tile's pieces, shared by the panel kernels: the masks of a panel's 4 vectors of 16 rows (nv
// rows in all), MB x 4 accumulators zeroed, and stored (masked) into MB rows of y.
LLAMA_INLINE void PanelMasks(int64_t nv, __mmask16 (&mask)[4]) {
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) mask[v] = Mask16(std::clamp<int64_t>(nv - 16 * v, 0, 16));
}
template <int MB>
LLAMA_INLINE void ZeroTile(__m512 (&a)[MB][4]) {
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) a[i][v] = _mm512_setzero_ps();
  }
}
template <int MB>
LLAMA_INLINE void StoreTile(const __m512 (&a)[MB][4], const __mmask16 (&mask)[4], float* y,
                            int64_t ldy) {
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(y + i * ldy + 16 * v, mask[v], a[i][v]);
  }
}

// MB rows of x (rows k apart) against one panel of nv rows at wp (kFull: nv = kPanel).
template <typename P, int MB, bool kFull>
LLAMA_INLINE void PanelTile(const typename P::T* x, int64_t k, const typename P::T* wp, int64_t nv,
                            float* y, int64_t ldy) {
  constexpr int64_t G = P::G;
  const int64_t rows = kFull ? kPanel : nv, steps = k / G;
  __mmask16 mask[4];
  PanelMasks(nv, mask);
  __m512 a[MB][4];
  ZeroTile(a);
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
  StoreTile(a, mask, y, ldy);
}

// tile(jb, nv, full) for each panel of the weight rows [j0, j1) of n (j0 a multiple of kPanel):
// its first row, its rows, and std::true_type where it has kPanel of them.
template <typename Tile>
LLAMA_INLINE void EachPanel(int64_t n, int64_t j0, int64_t j1, Tile tile) {
  for (int64_t jb = j0; jb < j1; jb += kPanel) {
    const int64_t nv = std::min(kPanel, n - jb);
    if (nv == kPanel) {
      tile(jb, nv, std::true_type());
    } else {
      tile(jb, nv, std::false_type());
    }
  }
}

// MB rows of x against the panels of weight rows [j0, j1) (j0 a multiple of kPanel).
template <typename P, int MB>
__attribute__((noinline)) void PanelRows(const typename P::T* x, int64_t k, const typename P::T* w,
                                         int64_t n, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  EachPanel(n, j0, j1, [&](int64_t jb, int64_t nv, auto full) {
    PanelTile<P, MB, decltype(full)::value>(x, k, w + jb * k, nv, y + jb, ldy);
  });
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

// Each panel of the n rows of `row` elements at w, in place: rearrange(panel, rows, nv) writes
// the panel's nv rows, given in row order in `rows` (a copy), in the panel's order.
template <typename T, typename Rearrange>
void RepackPanels(T* w, int64_t n, int64_t row, Rearrange rearrange) {
  std::vector<T> rows(static_cast<size_t>(std::min(n, kPanel) * row));
  for (int64_t jb = 0; jb < n; jb += kPanel) {
    const int64_t nv = std::min(kPanel, n - jb);
    T* panel = w + jb * row;
    std::copy(panel, panel + nv * row, rows.begin());
    rearrange(panel, static_cast<const T*>(rows.data()), nv);
  }
}

template <int64_t G, typename T>
void PackPanels(T* w, int64_t n, int64_t k) {
  RepackPanels(w, n, k, [k](T* panel, const T* rows, int64_t nv) {
    for (int64_t j = 0; j < nv; ++j) {
      for (int64_t p = 0; p < k; ++p) panel[InPanel<G>(j, p, nv, k)] = rows[j * k + p];
    }
  });
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
// unsigned bytes by signed ones, 4 pairs into each int32 lane; the weights are stored unsigned as
// w + 128, and over a block
//   256 * sum (w + 128) h + sum (w + 128) l - 128 * sum x = sum w x,
// exact in int32 (under 2^29 on the way).
//
// The weights are in panels of kPanel rows, as float32's (PackQ8), block after block: a block's
// steps of 4 weights (the 4 bytes vpdpbusd sums into a lane) of every row side by side, row j's at
// 4 j, so that a lane is an output; then each row's last kb % 4 weights (a short last block); then
// the rows' float16 scales. A tile of MB rows of x (MB <= 2) keeps, for each of its 4 x 16
// outputs, two int32 sums per block (h and l, 8 steps of one instruction each, x's 4 bytes
// broadcast), then one conversion, a product by the weights' scales dw and an FMA by x's dx
// into a float32 accumulator: each output one chain of FMAs along its blocks, the same whatever MB,
// so a row is bit for bit the same alone and in any batch. Against the kernel before (a weight row
// at a time against up to 4 rows of x, groups of 8 blocks rearranged within the row, 26
// instructions a group and two dependent chains of 4 dot products in each), a vector of weights
// feeds 2 MB instructions from registers and 8 independent chains run side by side:
// disco-llama-kernels on Zen 5, 768 x 2048 from cache at batch 1 / 4 / 64, 109-116 / 189-193 /
// 202-208 -> 199-200 / 331-339 / 396-406 GFLOP/s; `step` (a 125M decode step's 85 matrices from
// memory) 33-36 -> 42-43 GB/s. Tiles of 3 or 4 rows spill registers (batch 4: 207, 177 GFLOP/s).
constexpr int32_t kXMax = 127 * 257;
constexpr int64_t kQ8BlockRowBytes = q8::kBlock + 2;  // a whole block of a row: weights, scale
// How far ahead a full panel's bytes are prefetched (into L1), every line of it (the scales too:
// a block's 34 lines, 2 of them scales): the 85 int8 matrices of a 125M decode step (`step`), one
// after another, 38-40 -> 42-44 GB/s on Zen 5 with the steps' lines, 44-45 -> 46-47 with the
// scales' (1 KiB ahead slowed it to 35, 3 to 8 KiB were alike, into L3 (_MM_HINT_T2) 33).
constexpr int64_t kQ8PrefetchBytes = 4096;

// A row of x as the panels read it: int16 values split into high and low bytes (h, l: the row's
// blocks times 32, zeros past k), each block's sum times -128 (c) and its scale (d).
struct Q8X {
  const int8_t* h;
  const int8_t* l;
  const int32_t* c;
  const float* d;
};

// x (k floats) into h and l (q8::Blocks(k) * 32 bytes each) and c, d (a value a block).
void QuantizeX(const float* x, int64_t k, int8_t* h, int8_t* l, int32_t* c, float* d) {
  for (int64_t b = 0, p = 0; p < k; ++b, p += q8::kBlock) {
    const int64_t n = std::min<int64_t>(q8::kBlock, k - p);
    const __m512 x0 = _mm512_maskz_loadu_ps(Mask16(std::min<int64_t>(16, n)), x + p);
    const __m512 x1 = _mm512_maskz_loadu_ps(Mask16(std::max<int64_t>(0, n - 16)), x + p + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    // max ignores a NaN: a block holding one (or an infinity) gets a NaN scale, so that the row's
    // products are NaN as the float kernels' are, not quietly finite.
    const bool finite = _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q) == 0 &&
                        _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q) == 0 && amax <= FLT_MAX;
    d[b] = finite ? amax / kXMax : NAN;
    // A block of max |x| under 2^-112 counts as zeros (kXMax / max would overflow): at most 2^-52
    // of its row's largest, as StreamingQ8 scales rows under 2^-60 up.
    const __m512 inv = _mm512_set1_ps(amax > 0x1p-112f ? kXMax / amax : 0.0f);
    const __m512i lo = _mm512_set1_epi32(-kXMax), hi = _mm512_set1_epi32(kXMax);
    __m512i sum = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {  // to nearest even; a NaN's INT_MIN clamped
      const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(half == 0 ? x0 : x1, inv));
      const __m512i qv = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
      const __m512i lb = _mm512_srai_epi32(_mm512_slli_epi32(qv, 24), 24);
      const __m512i hb = _mm512_srai_epi32(_mm512_sub_epi32(qv, lb), 8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(l + p + 16 * half), _mm512_cvtepi32_epi8(lb));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(h + p + 16 * half), _mm512_cvtepi32_epi8(hb));
      sum = _mm512_add_epi32(sum, qv);
    }
    c[b] = -128 * _mm512_reduce_add_epi32(sum);
  }
}

LLAMA_INLINE __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// MB rows of x against one int8 panel of nv rows at wp (kFull: nv = kPanel; kStream: the panel
// comes from memory, and is prefetched).
template <int MB, bool kFull, bool kStream>
LLAMA_INLINE void Q8Tile(const Q8X* x, int64_t k, const uint8_t* wp, int64_t nv, float* y,
                         int64_t ldy) {
  const int64_t rows = kFull ? kPanel : nv, nb = q8::Blocks(k);
  __mmask16 mask[4];
  PanelMasks(nv, mask);
  __m512 a[MB][4];
  ZeroTile(a);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t p0 = b * q8::kBlock, kb = std::min(q8::kBlock, k - p0), steps = kb / 4;
    const uint8_t* blk = wp + rows * kQ8BlockRowBytes * b;
    __m512i th[MB][4], tl[MB][4];
#pragma GCC unroll 2
    for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        th[i][v] = _mm512_setzero_si512();
        tl[i][v] = _mm512_set1_epi32(x[i].c[b]);
      }
    }
    auto step = [&](const uint8_t* ws, int64_t p) {  // a step's weights, against x at p
      __m512i wv[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        wv[v] = kFull ? _mm512_loadu_si512(ws + 64 * v)
                      : _mm512_maskz_loadu_epi32(mask[v], ws + 64 * v);
      }

#pragma GCC unroll 2
      for (int i = 0; i < MB; ++i) {
        const __m512i xh = Broadcast4(x[i].h + p), xl = Broadcast4(x[i].l + p);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          th[i][v] = _mm512_dpbusd_epi32(th[i][v], wv[v], xh);
          tl[i][v] = _mm512_dpbusd_epi32(tl[i][v], wv[v], xl);
        }
      }
    };
    for (int64_t t = 0; t < steps; ++t) {
      const uint8_t* ws = blk + t * rows * 4;
      if constexpr (kFull && kStream) {  // past the panel's end: the next one's (or matrix's)
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          _mm_prefetch(reinterpret_cast<const char*>(ws) + kQ8PrefetchBytes + 64 * v, _MM_HINT_T0);
        }
      }
      step(ws, p0 + 4 * t);
    }
    if (const int64_t r = kb - 4 * steps; r > 0) {  // the rows' last r weights, 4 a row here (x
      alignas(64) uint8_t last[kPanel * 4] = {};    // is zero past k)
      for (int64_t j = 0; j < nv; ++j) std::memcpy(last + 4 * j, blk + steps * rows * 4 + r * j, r);
      step(last, p0 + 4 * steps);
    }
    const uint8_t* scales = blk + rows * kb;
    if constexpr (kFull && kStream) {  // the 2 lines of scales after the steps
      _mm_prefetch(reinterpret_cast<const char*>(scales) + kQ8PrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(scales) + kQ8PrefetchBytes + 64, _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512 dw = _mm512_cvtph_ps(
          kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32 * v))
                : _mm256_maskz_loadu_epi16(mask[v], scales + 32 * v));
#pragma GCC unroll 2
      for (int i = 0; i < MB; ++i) {
        const __m512i t = _mm512_add_epi32(_mm512_slli_epi32(th[i][v], 8), tl[i][v]);
        // (t dw) dx, not t (dw dx): the scales' product alone overflows (0 x inf: NaN where t is
        // 0) or underflows (a block of tiny x) where the whole does not.
        a[i][v] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(t), dw),
                                  _mm512_set1_ps(x[i].d[b]), a[i][v]);
      }
    }
  }
  StoreTile(a, mask, y, ldy);
}

// MB rows of x against the int8 panels of weight rows [j0, j1) (j0 a multiple of kPanel).
template <int MB, bool kStream>
__attribute__((noinline)) void Q8PanelRows(const Q8X* x, int64_t k, const uint8_t* w, int64_t n,
                                           int64_t j0, int64_t j1, float* y, int64_t ldy) {
  const int64_t rb = q8::RowBytes(k);
  EachPanel(n, j0, j1, [&](int64_t jb, int64_t nv, auto full) {
    Q8Tile<MB, decltype(full)::value, kStream>(x, k, w + jb * rb, nv, y + jb, ldy);
  });
}

// m rows of x against the panels: tiles of 2 rows; above one tile, spans of panels (256 KiB, kept
// in L2) go against each tile in turn, prefetched for the first one only (from L2, the prefetches
// cost batches of 4 to 64 rows 12-20%: 768 x 2048, 341-358 -> 304 GFLOP/s at 4).
void Q8Panels(const Q8X* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
              int64_t ldy) {
  constexpr int64_t kSpanBytes = 256 << 10;
  const int64_t span =
      m <= 2 ? n
             : std::max<int64_t>(1, kSpanBytes / std::max<int64_t>(1, q8::RowBytes(k)) / kPanel) *
                   kPanel;
  for (int64_t j0 = 0; j0 < n; j0 += span) {
    const int64_t j1 = std::min(n, j0 + span);
    using Rows =
        void (*)(const Q8X*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t);
    static constexpr Rows kRows[2][2] = {{Q8PanelRows<1, false>, Q8PanelRows<1, true>},
                                         {Q8PanelRows<2, false>, Q8PanelRows<2, true>}};
    for (int64_t i = 0; i < m; i += 2) {
      kRows[std::min<int64_t>(2, m - i) - 1][i == 0](x + i, k, w, n, j0, j1, y + i * ldy, ldy);
    }
  }
}

}  // namespace

void PackQ8(uint8_t* w, int64_t n, int64_t k) {
  const int64_t rb = q8::RowBytes(k), nb = q8::Blocks(k);
  RepackPanels(w, n, rb, [k, rb, nb](uint8_t* panel, const uint8_t* rows, int64_t nv) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t p0 = b * q8::kBlock, kb = std::min(q8::kBlock, k - p0), whole = kb / 4 * 4;
      uint8_t* blk = panel + nv * kQ8BlockRowBytes * b;
      for (int64_t j = 0; j < nv; ++j) {
        const uint8_t* src = rows + j * rb;
        for (int64_t p = 0; p < whole; ++p) blk[(p / 4 * nv + j) * 4 + p % 4] = src[p0 + p] ^ 0x80;
        for (int64_t p = whole; p < kb; ++p) {
          blk[whole * nv + (kb - whole) * j + p - whole] = src[p0 + p] ^ 0x80;
        }
        std::memcpy(blk + nv * kb + 2 * j, src + k + 2 * b, 2);
      }
    }
  });
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
  const int64_t nb = q8::Blocks(k), kp = nb * q8::kBlock;
  thread_local std::vector<int8_t> hl;
  thread_local std::vector<int32_t> c;
  thread_local std::vector<float> d;
  thread_local std::vector<Q8X> rows;
  hl.resize(static_cast<size_t>(2 * m * kp));
  c.resize(static_cast<size_t>(m * nb));
  d.resize(static_cast<size_t>(m * nb));
  rows.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    int8_t* h = hl.data() + 2 * i * kp;
    QuantizeX(x + i * k, k, h, h + kp, c.data() + i * nb, d.data() + i * nb);
    rows[i] = Q8X{h, h + kp, c.data() + i * nb, d.data() + i * nb};
  }
  Q8Panels(rows.data(), m, k, w, n, y, ldy);
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
