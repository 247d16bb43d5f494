#include "llama/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace llama {

int64_t PackBest(float value, int64_t index) {
  if (value == 0.0f) value = 0.0f;  // -0 and +0 are equal
  uint32_t u;
  std::memcpy(&u, &value, 4);
  u = (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
  const uint64_t key =
      (static_cast<uint64_t>(u) << 32) | (0xFFFFFFFFull - static_cast<uint64_t>(index));
  return static_cast<int64_t>(key ^ (uint64_t{1} << 63));
}
int64_t UnpackIndex(int64_t key) {
  return static_cast<int64_t>(0xFFFFFFFFull - (static_cast<uint64_t>(key) & 0xFFFFFFFFull));
}

// The Gumbel-max trick: argmax over the vocabulary of logit / temperature + Gumbel noise is a
// draw from softmax(logits / temperature). The noise of each (seed, position, token id) is a hash
// of the three, so each rank perturbs its slice alone, the allreduce(max) of the packed pairs
// picks the draw, and a seed gives the same tokens whatever the batch.
double Uniform(uint64_t seed, int64_t pos, int64_t id) {
  uint64_t z = seed ^ (static_cast<uint64_t>(pos) * 0x9E3779B97F4A7C15ull) ^
               (static_cast<uint64_t>(id) * 0xC2B2AE3D27D4EB4Full);
  for (int k = 0; k < 2; ++k) {  // splitmix64's finalizer, twice
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return (static_cast<double>(z >> 11) + 0.5) * 0x1p-53;  // in (0, 1)
}
int64_t SampleBest(const float* row, int64_t start, int64_t n, float temperature, uint64_t seed,
                   int64_t pos, float floor) {
  int64_t arg = -1;
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    if (row[j] < floor) continue;  // outside the nucleus
    const double g = -std::log(-std::log(Uniform(seed, pos, start + j)));
    const auto score = static_cast<float>(row[j] / temperature + g);
    if (arg < 0 || score > top) top = score, arg = j;
  }
  return PackBest(top, start + std::max<int64_t>(arg, 0));  // none here: -inf, another rank's
}

float NucleusFloor(const float* logits, int64_t v, float temperature, float top_p) {
  std::vector<int32_t> idx(static_cast<size_t>(v));
  std::iota(idx.begin(), idx.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const float top = *std::max_element(logits, logits + v);
  double z = 0;
  for (int64_t j = 0; j < v; ++j)
    z += std::exp((static_cast<double>(logits[j]) - top) / temperature);
  for (int64_t k = std::min<int64_t>(64, v);; k = std::min(2 * k, v)) {
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      sum += std::exp((static_cast<double>(logits[idx[i]]) - top) / temperature) / z;
      if (sum >= top_p) return logits[idx[i]];
    }
    if (k == v) return logits[idx[v - 1]];
  }
}

}  // namespace llama
