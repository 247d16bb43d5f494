// e^x's pieces for the attention kernels' vectorized softmax (kernels.cc's Exp8, attend_avx512.cc's
// Exp): x = n ln 2 + r with |r| <= ln 2 / 2, ln 2 in two parts (n ln2_hi exact in float), and
// Cephes' expf polynomial for e^r = 1 + r + r^2 (c0 + c1 r + ... + c5 r^5), coefficients from the
// highest power. One table, so both paths compute the same function.
#ifndef DISCO_MODELS_LLAMA_EXPF_POLY_H_
#define DISCO_MODELS_LLAMA_EXPF_POLY_H_

namespace llama::expf_poly {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kCoef[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace llama::expf_poly

#endif  // DISCO_MODELS_LLAMA_EXPF_POLY_H_
