// disco-llama-kernels: the decode's streaming product (kernels.h's Linear for a few rows of x)
// alone, on a weight matrix larger than the caches, under the kernel set DISCO_CPU_KERNELS
// chooses: weight bytes read per second, per dtype and batch (docs/performance.md). No MPI.
//   disco-llama-kernels [ROWS [COLS [REPS]]]     (default 8192 4096 15: 128 MiB of float32)
#include <disco/error.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llama/kernels.h"

namespace {

int64_t Arg(int argc, char** argv, int i, int64_t fallback, const char* what) {
  if (i >= argc) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(argv[i], &end, 10);
  DISCO_CHECK(end != argv[i] && *end == '\0' && v > 0 && v <= (int64_t{1} << 20), ValueError)
      << what << " is a positive integer up to 2^20, not '" << argv[i] << "'";
  return v;
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median time of `reps` products of `m` rows of x with the n x k weights w.
double MedianSeconds(const float* x, int64_t m, int64_t k, const void* w, bool bf16, int64_t n,
                     int64_t reps) {
  std::vector<float> y(static_cast<size_t>(m * n)), scratch;
  std::vector<double> t;
  llama::Linear(x, m, k, w, bf16, n, y.data(), n, &scratch);  // warm-up
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = Seconds();
    llama::Linear(x, m, k, w, bf16, n, y.data(), n, &scratch);
    t.push_back(Seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int Run(int argc, char** argv) {
  const int64_t n = Arg(argc, argv, 1, 8192, "ROWS"), k = Arg(argc, argv, 2, 4096, "COLS");
  const int64_t reps = Arg(argc, argv, 3, 15, "REPS");
  std::printf("kernels: %s\n", llama::CpuKernels().c_str());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n * k)), x(static_cast<size_t>(4 * k));
  for (float& v : wf) v = u(rng);
  for (float& v : x) v = u(rng);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &wf[i], 4);
    wb[i] = static_cast<uint16_t>(bits >> 16);
  }
  for (const bool bf16 : {false, true}) {
    for (const int64_t m : {int64_t{1}, int64_t{4}}) {
      const double s = MedianSeconds(
          x.data(), m, k,
          bf16 ? static_cast<const void*>(wb.data()) : static_cast<const void*>(wf.data()), bf16, n,
          reps);
      const double bytes = static_cast<double>(n * k) * (bf16 ? 2 : 4);
      std::printf("%s batch %lld: %.2f GB/s of weights, %.3f ms per product (%lld x %lld)\n",
                  bf16 ? "bfloat16" : "float32", static_cast<long long>(m), bytes / s / 1e9,
                  s * 1e3, static_cast<long long>(n), static_cast<long long>(k));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const disco::Error& e) {
    std::fprintf(stderr, "disco-llama-kernels: %s\n", e.what());
    return 2;
  }
}
