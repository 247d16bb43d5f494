// disco-llama-kernels: the decode's streaming product (kernels.h's Linear for a few rows of x)
// alone, on a weight matrix larger than the caches, under the kernel set DISCO_CPU_KERNELS
// chooses: weight bytes read per second and GFLOP/s, per dtype and batch (1, 4 and 16 rows; 64,
// past kStreamingRows, goes to sgemm as prefill does), by the wall clock and by the
// thread's CPU time (less disturbed on a loaded machine) (docs/performance.md); int8 counts its
// 1.0625 bytes a weight (q8.h). With `step`, instead: the 85 matrices of a decode step of the
// benchmark's 125M model (bench/checkpoint.py), each allocated after the last as in the weight
// arena, one product of each at batch 1 in turn, per dtype. No MPI.
//   disco-llama-kernels [ROWS [COLS [REPS]]]     (default 8192 4096 15: 128 MiB of float32)
//   disco-llama-kernels step [REPS]
#include <disco/error.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llama/kernels.h"
#include "llama/q8.h"

namespace {

int64_t Arg(int argc, char** argv, int i, int64_t fallback, const char* what) {
  if (i >= argc) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(argv[i], &end, 10);
  DISCO_CHECK(end != argv[i] && *end == '\0' && v > 0 && v <= (int64_t{1} << 20), ValueError)
      << what << " is a positive integer up to 2^20, not '" << argv[i] << "'";
  return v;
}

// Wall-clock seconds, and this thread's CPU seconds (which a loaded machine's time slices given
// to other processes do not count).
double Seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

const char* Name(llama::WeightFormat f) {
  return f == llama::WeightFormat::kF32    ? "float32"
         : f == llama::WeightFormat::kBf16 ? "bfloat16"
                                           : "int8";
}

// Bytes of an n x k weight matrix in `format` (int8: q8.h's rows, scales included).
int64_t WeightBytes(llama::WeightFormat f, int64_t n, int64_t k) {
  return f == llama::WeightFormat::kQ8     ? n * llama::q8::RowBytes(k)
         : f == llama::WeightFormat::kBf16 ? n * k * 2
                                           : n * k * 4;
}

// The float32 weights w as bfloat16 bits (their top 16: truncated).
std::vector<uint16_t> TruncatedBf16(const std::vector<float>& w) {
  std::vector<uint16_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w[i], 4);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

struct Times {
  double wall, cpu;  // medians
};

// The median times of `reps` products of `m` rows of x with the n x k weights w.
Times MedianSeconds(const float* x, int64_t m, int64_t k, const void* w, llama::WeightFormat f,
                    int64_t n, int64_t reps) {
  std::vector<float> y(static_cast<size_t>(m * n)), scratch;
  std::vector<double> wall, cpu;
  llama::Linear(x, m, k, w, f, n, y.data(), n, &scratch);  // warm-up
  for (int64_t r = 0; r < reps; ++r) {
    const double w0 = Seconds(CLOCK_MONOTONIC), c0 = Seconds(CLOCK_THREAD_CPUTIME_ID);
    llama::Linear(x, m, k, w, f, n, y.data(), n, &scratch);
    cpu.push_back(Seconds(CLOCK_THREAD_CPUTIME_ID) - c0);
    wall.push_back(Seconds(CLOCK_MONOTONIC) - w0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

// The matrices of one decode step of the 125M model (hidden 768, 4 of 12 heads of kv, ffn 2048,
// 12 layers, a vocabulary of 32000 as the LM head) in one buffer, in `format`, one product each
// at batch 1 per repetition: the median's GB/s of weights.
void StepBench(llama::WeightFormat format, int64_t reps) {
  using llama::WeightFormat;
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (rows, cols)
  for (int l = 0; l < 12; ++l) {
    for (const auto& s : {std::pair<int64_t, int64_t>{768, 768},
                          {256, 768},
                          {256, 768},
                          {768, 768},
                          {2048, 768},
                          {2048, 768},
                          {768, 2048}}) {
      shapes.push_back(s);
    }
  }
  shapes.push_back({32000, 768});
  std::vector<size_t> at;
  size_t total = 0;
  for (const auto& [n, k] : shapes) {
    at.push_back(total);
    total += (static_cast<size_t>(WeightBytes(format, n, k)) + 63) / 64 * 64;
  }
  std::vector<uint8_t> buf(total);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [n, k] = shapes[i];
    std::vector<float> w(static_cast<size_t>(n * k));
    for (float& v : w) v = u(rng);
    uint8_t* p = buf.data() + at[i];
    if (format == WeightFormat::kQ8) {
      llama::q8::Quantize(w.data(), n, k, p, "the benchmark's weights");
      llama::PackQ8(p, n, k);
    } else if (format == WeightFormat::kBf16) {
      const std::vector<uint16_t> b = TruncatedBf16(w);
      std::memcpy(p, b.data(), b.size() * sizeof(uint16_t));
      llama::PackBf16(reinterpret_cast<uint16_t*>(p), n, k);
    } else {
      std::memcpy(p, w.data(), w.size() * sizeof(float));
      llama::PackF32(reinterpret_cast<float*>(p), n, k);
    }
  }
  std::vector<float> x(2048), y(32000), scratch;
  for (float& v : x) v = u(rng);
  std::vector<double> wall;
  for (int64_t r = 0; r <= reps; ++r) {  // the first: warm-up
    const double t0 = Seconds(CLOCK_MONOTONIC);
    for (size_t i = 0; i < shapes.size(); ++i) {
      llama::Linear(x.data(), 1, shapes[i].second, buf.data() + at[i], format, shapes[i].first,
                    y.data(), shapes[i].first, &scratch);
    }
    if (r > 0) wall.push_back(Seconds(CLOCK_MONOTONIC) - t0);
  }
  std::sort(wall.begin(), wall.end());
  const double t = wall[wall.size() / 2];
  std::printf("%s step of the 125M model: %.1f MB of weights, %.3f ms, %.2f GB/s (%zu matrices)\n",
              Name(format), static_cast<double>(total) / 1e6, t * 1e3,
              static_cast<double>(total) / t / 1e9, shapes.size());
}

int Run(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "step") {
    const int64_t reps = Arg(argc, argv, 2, 15, "REPS");
    std::printf("kernels: %s\n", llama::CpuKernels().c_str());
    using llama::WeightFormat;
    for (const WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kQ8}) {
      StepBench(f, reps);
    }
    return 0;
  }
  const int64_t n = Arg(argc, argv, 1, 8192, "ROWS"), k = Arg(argc, argv, 2, 4096, "COLS");
  const int64_t reps = Arg(argc, argv, 3, 15, "REPS");
  std::printf("kernels: %s\n", llama::CpuKernels().c_str());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n * k)), x(static_cast<size_t>(64 * k));
  for (float& v : wf) v = u(rng);
  for (float& v : x) v = u(rng);
  std::vector<uint16_t> wb = TruncatedBf16(wf);
  std::vector<uint8_t> wq(static_cast<size_t>(n * llama::q8::RowBytes(k)));
  llama::q8::Quantize(wf.data(), n, k, wq.data(), "the benchmark's weights");
  llama::PackQ8(wq.data(), n, k);
  llama::PackF32(wf.data(), n, k);
  llama::PackBf16(wb.data(), n, k);
  using llama::WeightFormat;
  for (const WeightFormat f : {WeightFormat::kF32, WeightFormat::kBf16, WeightFormat::kQ8}) {
    for (const int64_t m : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{64}}) {
      const void* w = f == WeightFormat::kF32    ? static_cast<const void*>(wf.data())
                      : f == WeightFormat::kBf16 ? static_cast<const void*>(wb.data())
                                                 : static_cast<const void*>(wq.data());
      const Times t = MedianSeconds(x.data(), m, k, w, f, n, reps);
      const auto bytes = static_cast<double>(WeightBytes(f, n, k));
      std::printf(
          "%s batch %lld: %.2f GB/s of weights, %.1f GFLOP/s, %.3f ms per product (%lld x %lld); "
          "by CPU time %.2f GB/s\n",
          Name(f), static_cast<long long>(m), bytes / t.wall / 1e9,
          2.0 * static_cast<double>(m * n * k) / t.wall / 1e9, t.wall * 1e3,
          static_cast<long long>(n), static_cast<long long>(k), bytes / t.cpu / 1e9);
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
