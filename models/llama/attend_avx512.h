// Decode's attention (kernels.h's Attend) in AVX-512, in a file of its own compiled with
// -mavx512f (attend_avx512.cc): kernels.cc calls it only where the CPU has those features and the
// head size is one of AttendFits'.
#ifndef DISCO_MODELS_LLAMA_ATTEND_AVX512_H_
#define DISCO_MODELS_LLAMA_ATTEND_AVX512_H_

#include <cstdint>

namespace llama::avx512 {

/// The head sizes Attend takes: 16, 32, 64, 128 and 256 (every Llama-family model's).
bool AttendFits(int64_t dim);

/// kernels.h's Attend for a head size AttendFits takes: the scores of 16 positions at a time
/// (their products' 16 vectors summed by one transposition), e^x by a polynomial (Cephes' expf:
/// within 1.23 ulp of e^x where it is a normal float, NaN kept), and the values of up to 16 / (dim
/// / 16) heads at once, each output one chain of FMAs along the positions.
/// T: float, or uint16_t (float16 bits: a float16 kv cache, widened as it is read).
template <typename T>
void Attend(const float* q, int64_t rep, const T* k, const T* v, int64_t n, int64_t dim,
            float scale, float* scores, float* out);

}  // namespace llama::avx512

#endif  // DISCO_MODELS_LLAMA_ATTEND_AVX512_H_
