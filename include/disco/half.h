/// \file disco/half.h
/// \brief float16 and bfloat16 to and from float32: the conversions disco's collectives and models
/// use, one copy (float16 is tested over all 65,536 values, tests/unit/reduce_test.cc).
#ifndef DISCO_HALF_H_
#define DISCO_HALF_H_

#include <cstdint>
#include <cstring>

namespace disco {

/// IEEE binary16 to float32: exact (subnormals, infinities and NaN payloads included).
float HalfToFloat(uint16_t h);
/// float32 to IEEE binary16: round to nearest even; past 65504 an infinity; a NaN stays a quiet
/// NaN.
uint16_t FloatToHalf(float f);

/// bfloat16 to float32: the top half of a float32 (exact). Inline: a loop over it vectorizes.
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
/// float32 to bfloat16: round to nearest even; a NaN stays a quiet NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

}  // namespace disco

#endif  // DISCO_HALF_H_
