// 8-bit weights as llama.cpp's Q8_0 (disco-demo --dtype int8): each row of a linear layer's weight
// matrix W [n, k] in blocks of 32 consecutive weights along k, one scale per block,
//   d = max|w| / 127 (stored as float16, as Q8_0 stores it: 1.0625 bytes per weight),
//   q = round(w / d) (int8 in [-127, 127]; a block of zeros has d = 0 and q = 0),
// and w is read back as q * d. q is rounded with d in float32 and d then stored in float16, as
// llama.cpp's quantize_row_q8_0 does, so a weight is off by at most d/2 plus 127 times d's
// float16 rounding (2^-11 of d): 0.56 d. Where d is under float16's least normal (2^-14: a block
// of max |w| under 127 x 2^-14, about 7.8e-3) its float16 has fewer bits (a step of 2^-24, and
// none under 2^-25, where the least step is stored), so q is taken against the scale as stored
// (clamped to [-127, 127]): a weight is off by at most half the stored scale (llama.cpp's way left
// a block of max |w| 6e-6 off by 22%). A row of k weights is k bytes of q, then ceil(k/32)
// float16 scales (little-endian); a last block of k % 32 weights has its own scale (llama.cpp
// needs k a multiple of 32; here each rank quantizes its own shard, so a shard's blocks start at
// its first column, and match one rank's blocks where k / ranks is a multiple of 32).
#ifndef DISCO_MODELS_LLAMA_Q8_H_
#define DISCO_MODELS_LLAMA_Q8_H_

#include <cstdint>
#include <string>

namespace llama::q8 {

constexpr int64_t kBlock = 32;

/// Blocks of a row of k weights: ceil(k / 32).
constexpr int64_t Blocks(int64_t k) { return (k + kBlock - 1) / kBlock; }
/// Bytes of a quantized row of k weights: k quants and a float16 scale per block.
constexpr int64_t RowBytes(int64_t k) { return k + 2 * Blocks(k); }

/// float -> float16 (to nearest even; subnormals kept, too large: infinity) and back.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

/// Quantizes the n x k floats at w (row-major) into n rows of RowBytes(k) bytes at out. Throws
/// ValueError naming `what` and the row when a weight is not finite or a block's scale overflows
/// float16 (max|w| > 127 * 65504).
void Quantize(const float* w, int64_t n, int64_t k, uint8_t* out, const std::string& what);

/// The n quantized rows at w back to n x k floats (q * d).
void Dequantize(const uint8_t* w, int64_t n, int64_t k, float* out);

/// y[i, j] = sum_p x[i, p] * w[j, p] for m rows of x and n quantized rows of w, in plain C++: the
/// kernel of CPUs without AVX2 and the reference of the tests.
void StreamingRef(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                  int64_t ldy);

}  // namespace llama::q8

#endif  // DISCO_MODELS_LLAMA_Q8_H_
