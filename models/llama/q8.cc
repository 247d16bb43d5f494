#include "llama/q8.h"

#include <disco/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace llama::q8 {
namespace {

float BlockScale(const uint8_t* row, int64_t k, int64_t b) {
  uint16_t h;
  std::memcpy(&h, row + k + 2 * b, 2);
  return HalfToFloat(h);
}

}  // namespace

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: infinity
  if (x < 0x38800000u) {                        // below 2^-14: a subnormal float16 (or 0)
    return static_cast<uint16_t>(sign |
                                 static_cast<uint32_t>(std::nearbyint(std::fabs(f) * 16777216.0f)));
  }
  const uint32_t r = x + 0xfffu + ((x >> 13) & 1u);  // to nearest even at bit 13
  return static_cast<uint16_t>(sign | ((r - (uint32_t{112} << 23)) >> 13));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void Quantize(const float* w, int64_t n, int64_t k, uint8_t* out, const std::string& what) {
  const int64_t nb = Blocks(k);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = w + j * k;
    uint8_t* o = out + j * RowBytes(k);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t p0 = b * kBlock, p1 = std::min(k, p0 + kBlock);
      float amax = 0.0f;
      for (int64_t p = p0; p < p1; ++p) {
        DISCO_CHECK(std::isfinite(row[p]), ValueError)
            << what << ": row " << j << ", column " << p << " is " << row[p]
            << "; int8 quantization needs finite weights";
        amax = std::max(amax, std::fabs(row[p]));
      }
      // As llama.cpp's quantize_row_q8_0: q by the float32 scale, the scale stored in float16.
      const float d = amax / 127.0f;
      float id = d != 0.0f ? 1.0f / d : 0.0f;
      uint16_t h = FloatToHalf(d);
      DISCO_CHECK(std::isfinite(HalfToFloat(h)), ValueError)
          << what << ": row " << j << ", columns " << p0 << " to " << p1 - 1
          << " (a block) have max |w| " << amax
          << ", whose int8 scale (max/127) overflows float16 (at most 65504)";
      if ((h & 0x7c00u) == 0 && amax > 0.0f) {  // a subnormal float16 scale (q8.h)
        h = std::max<uint16_t>(h, 1);
        id = 1.0f / HalfToFloat(h);
      }
      for (int64_t p = p0; p < p1; ++p) {
        const float v = std::clamp(std::round(row[p] * id), -127.0f, 127.0f);
        o[p] = static_cast<uint8_t>(static_cast<int8_t>(v));
      }
      std::memcpy(o + k + 2 * b, &h, 2);
    }
  }
}

void Dequantize(const uint8_t* w, int64_t n, int64_t k, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = w + j * RowBytes(k);
    for (int64_t p = 0; p < k; ++p) {
      out[j * k + p] =
          static_cast<float>(static_cast<int8_t>(row[p])) * BlockScale(row, k, p / kBlock);
    }
  }
}

void StreamingRef(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y,
                  int64_t ldy) {
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    Dequantize(w + j * RowBytes(k), 1, k, row.data());
    for (int64_t i = 0; i < m; ++i) {
      float s = 0.0f;
      for (int64_t p = 0; p < k; ++p) s += x[i * k + p] * row[p];
      y[i * ldy + j] = s;
    }
  }
}

}  // namespace llama::q8
