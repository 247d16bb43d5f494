// What the AVX-512 files (kernels_avx512.cc, attend_avx512.cc) share: the warnings GCC gives inside
// its own headers turned off, the always-inline helper macro, and tail masks. Included first
// after a file's own header, in files compiled with -mavx512f and the rest.
#ifndef DISCO_MODELS_LLAMA_AVX512_COMMON_H_
#define DISCO_MODELS_LLAMA_AVX512_COMMON_H_

// GCC 12 warns inside its own avx512fintrin.h (the _mm512_undefined_* that the masked loads and
// _mm512_reduce_*_ps start from), not on these files' code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <cstdint>

#define LLAMA_INLINE inline __attribute__((always_inline))

namespace llama::avx512 {

/// The first n (0..16) of 16 lanes.
LLAMA_INLINE __mmask16 Mask16(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

}  // namespace llama::avx512

#endif  // DISCO_MODELS_LLAMA_AVX512_COMMON_H_
