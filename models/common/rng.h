// The demos' deterministic weights: a value from (seed, stream, index) alone, so that any rank can
// make any slice of a weight without the rest, and the Python generators (tests/llama,
// examples/tp_mlp.py) make the same values bit for bit. SplitMix64's finalizer, FNV-1a for a
// weight's name as its stream.
#ifndef DISCO_MODELS_COMMON_RNG_H_
#define DISCO_MODELS_COMMON_RNG_H_

#include <cstdint>
#include <string>

namespace demo_rng {

inline uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// FNV-1a of `s`: a weight's name as the stream of its values.
inline uint64_t NameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

/// Uniform in [-1, 1) from (seed, stream, index) alone.
inline float Uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  return static_cast<float>(static_cast<double>(Mix(seed ^ Mix(stream ^ Mix(i))) >> 40) /
                                static_cast<double>(1 << 23) -
                            1.0);
}

}  // namespace demo_rng

#endif  // DISCO_MODELS_COMMON_RNG_H_
