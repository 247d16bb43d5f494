// disco-demo: tensor-parallel MLP inference from an HDF5 checkpoint, checked against a
// single-process reference.
//
// The model is a stack of L Megatron-style MLP blocks over a batch of T tokens of width H:
//
//   h = gelu(x W1 + b1)         W1 (H, F) split by columns: each worker holds F/N of them
//   y = allreduce_sum(h W2)     W2 (F, H) split by rows: each worker's partial product
//   x = layernorm(x + y + b2)   b2, gamma, beta replicated
//
// The controller writes a checkpoint with a fixed seed when none is given: every worker generates
// its own shard (values from a hash of the seed, the dataset name and the global index, so any
// number of workers writes the same file) and h5::SaveTensors writes them. The workers load
// their shards with h5::LoadTensors. The input batch goes from the controller to worker 0
// and out by broadcast; each layer is one command; the output comes back to the controller, which
// recomputes the whole stack alone from the checkpoint file and compares. Matrix products use
// OpenBLAS (one thread per rank); bfloat16 runs keep weights, activations and the allreduce in
// bfloat16 and multiply in float32.
#include <cblas.h>
#include <disco/disco.h>
#include <disco/h5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ccl/reduce.h"
#include "io/h5.h"

namespace disco {
namespace demo {
namespace {

struct Config {
  int64_t hidden = 1024;
  int64_t ffn = 4096;
  int64_t layers = 4;
  int64_t tokens = 128;
  int64_t steps = 10;
  int64_t warmup = 2;
  uint64_t seed = 1234;
  std::string dtype = "float32";
  std::string checkpoint;  // empty: the default path; written when missing
  double tolerance = -1;   // < 0: the default for the dtype
};

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- Deterministic parameters -----------------------------------------------------------------

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t NameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
// Uniform in [-1, 1), from (seed, stream, index) alone.
float Uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  return static_cast<float>(static_cast<double>(Mix(seed ^ Mix(stream ^ Mix(i))) >> 40) /
                                static_cast<double>(1 << 23) -
                            1.0);
}

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  int64_t axis;  // shard axis (-1: replicated)
  float scale;   // value = offset + scale * uniform
  float offset;
};
std::vector<Param> LayerParams(const Config& c, int64_t l) {
  const std::string p = "layers/" + std::to_string(l) + "/";
  const float s1 = 1.0f / std::sqrt(static_cast<float>(c.hidden));
  const float s2 = 1.0f / std::sqrt(static_cast<float>(c.ffn));
  return {{p + "w1", {c.hidden, c.ffn}, 1, s1, 0.f}, {p + "b1", {c.ffn}, 0, 0.02f, 0.f},
          {p + "w2", {c.ffn, c.hidden}, 0, s2, 0.f}, {p + "b2", {c.hidden}, -1, 0.02f, 0.f},
          {p + "ln_g", {c.hidden}, -1, 0.1f, 1.f},   {p + "ln_b", {c.hidden}, -1, 0.02f, 0.f}};
}

bool IsBf16(const Tensor& t) { return t.dtype().code == kDLBfloat; }

void StoreFloat(const Tensor& t, int64_t i, float v) {
  if (IsBf16(t)) {
    static_cast<uint16_t*>(t.data())[i] = ccl::FloatToBFloat16(v);
  } else {
    t.data_as<float>()[i] = v;
  }
}

// A float32 view of `t`: the tensor itself, or a conversion into `scratch`.
const float* AsFloat(const Tensor& t, std::vector<float>* scratch) {
  if (!IsBf16(t)) return t.data_as<float>();
  scratch->resize(static_cast<size_t>(t.numel()));
  const auto* p = static_cast<const uint16_t*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) (*scratch)[i] = ccl::BFloat16ToFloat(p[i]);
  return scratch->data();
}

// This worker's shard of parameter `name` (full shape `full`, split along `axis` over all workers).
DISCO_REGISTER_GLOBAL("demo.init_shard")
    .set_body_typed([](std::string name, Shape full, int64_t axis, int64_t seed, double scale,
                       double offset, std::string dtype) {
      const WorkerInfo& w = ThisWorker();
      std::vector<int64_t> dims(full.begin(), full.end());
      if (axis >= 0) dims[axis] /= w.num_workers;
      Tensor t = Tensor::Empty(Shape(dims), DataType(dtype));
      const uint64_t stream = NameHash(name);
      const int64_t cols = dims.size() == 2 ? dims[1] : 1;
      const int64_t full_cols = full.ndim() == 2 ? full[1] : 1;
      for (int64_t i = 0; i < t.numel(); ++i) {
        int64_t r = i / cols, c = i % cols;
        if (axis == 0) r += w.worker_id * dims[0];
        if (axis == 1) c += w.worker_id * dims[1];
        float u =
            Uniform(static_cast<uint64_t>(seed), stream, static_cast<uint64_t>(r * full_cols + c));
        StoreFloat(t, i, static_cast<float>(offset + scale * u));
      }
      return t;
    });

// ---- The layer ----------------------------------------------------------------------------------

struct Stats {
  double compute_ms = 0;
  double allreduce_ms = 0;
  int64_t calls = 0;
};
Stats& WorkerStats() {
  static Stats s;
  return s;
}

float Gelu(float v) {
  return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
}

// out[t] = layernorm(x[t] + y[t] + b2) * g + beta, for rows of width h.
void ResidualLayerNorm(const float* x, const float* y, const float* b2, const float* g,
                       const float* beta, int64_t tokens, int64_t h, float* out) {
  std::vector<float> z(static_cast<size_t>(h));
  for (int64_t t = 0; t < tokens; ++t) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < h; ++j) {
      z[j] = x[t * h + j] + y[t * h + j] + b2[j];
      mean += z[j];
    }
    mean /= h;
    for (int64_t j = 0; j < h; ++j) var += (z[j] - mean) * (z[j] - mean);
    float inv = static_cast<float>(1.0 / std::sqrt(var / h + 1e-5));
    for (int64_t j = 0; j < h; ++j) {
      out[t * h + j] = (z[j] - static_cast<float>(mean)) * inv * g[j] + beta[j];
    }
  }
}

// Up-projection shard and activation: h = gelu(x w1 + b1), (tokens, f) from (tokens, hidden).
void UpProjection(const float* x, const float* w1, const float* b1, int64_t tokens, int64_t hidden,
                  int64_t f, float* h) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tokens),
              static_cast<int>(f), static_cast<int>(hidden), 1.0f, x, static_cast<int>(hidden), w1,
              static_cast<int>(f), 0.0f, h, static_cast<int>(f));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < f; ++j) h[t * f + j] = Gelu(h[t * f + j] + b1[j]);
  }
}

// Down-projection shard: y = h w2, (tokens, hidden) from (tokens, f).
void DownProjection(const float* h, const float* w2, int64_t tokens, int64_t f, int64_t hidden,
                    float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tokens),
              static_cast<int>(hidden), static_cast<int>(f), 1.0f, h, static_cast<int>(f), w2,
              static_cast<int>(hidden), 0.0f, y, static_cast<int>(hidden));
}

DISCO_REGISTER_GLOBAL("demo.layer")
    .set_body_typed([](Tensor x, Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor g,
                       Tensor beta) {
      double t0 = NowMs();
      const int64_t tokens = x.shape()[0], hidden = x.shape()[1], f = w1.shape()[1];
      DISCO_CHECK(w1.shape()[0] == hidden && w2.shape()[0] == f && w2.shape()[1] == hidden,
                  ValueError)
          << "demo.layer: shards do not fit: x " << x.shape().ToString() << ", w1 "
          << w1.shape().ToString() << ", w2 " << w2.shape().ToString();
      static std::vector<float> sx, s1, sb1, s2, sb2, sg, sbeta, h, y, out;
      const float* xf = AsFloat(x, &sx);
      h.resize(static_cast<size_t>(tokens * f));
      UpProjection(xf, AsFloat(w1, &s1), AsFloat(b1, &sb1), tokens, hidden, f, h.data());
      Tensor partial = Tensor::Empty(Shape{tokens, hidden}, x.dtype());
      y.resize(static_cast<size_t>(tokens * hidden));
      DownProjection(h.data(), AsFloat(w2, &s2), tokens, f, hidden,
                     IsBf16(partial) ? y.data() : partial.data_as<float>());
      if (IsBf16(partial)) {
        for (int64_t i = 0; i < partial.numel(); ++i) StoreFloat(partial, i, y[i]);
      }
      double t1 = NowMs();
      Registry::Get("disco.allreduce")(partial, std::string("sum"), false, partial);
      double t2 = NowMs();
      Tensor result = Tensor::Empty(Shape{tokens, hidden}, x.dtype());
      out.resize(static_cast<size_t>(tokens * hidden));
      std::vector<float> sy;
      ResidualLayerNorm(xf, AsFloat(partial, &sy), AsFloat(b2, &sb2), AsFloat(g, &sg),
                        AsFloat(beta, &sbeta), tokens, hidden, out.data());
      for (int64_t i = 0; i < result.numel(); ++i) StoreFloat(result, i, out[i]);
      Stats& st = WorkerStats();
      st.compute_ms += (t1 - t0) + (NowMs() - t2);
      st.allreduce_ms += t2 - t1;
      st.calls += 1;
      return result;
    });

int64_t PeakRssKiB() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// A loaded shard must have the shape the model needs: a checkpoint of another size names itself.
DISCO_REGISTER_GLOBAL("demo.check_shard")
    .set_body_typed([](Tensor shard, std::string name, Shape want, std::string dtype) {
      DISCO_CHECK(shard.shape() == want, ValueError)
          << "checkpoint dataset '" << name << "' gives worker " << ThisWorker().worker_id
          << " a shard of shape " << shard.shape().ToString() << "; the model needs "
          << want.ToString() << " (does the checkpoint match --hidden/--ffn?)";
      DISCO_CHECK(shard.dtype() == DataType(dtype), TypeError)
          << "checkpoint dataset '" << name << "' holds " << DataTypeToString(shard.dtype())
          << "; the model runs in " << dtype << " (--dtype)";
    });

DISCO_REGISTER_GLOBAL("demo.reset_stats").set_body_typed([]() { WorkerStats() = Stats(); });
// compute ms, allreduce ms (x1000, as integers), calls, peak RSS KiB.
DISCO_REGISTER_GLOBAL("demo.stats").set_body_typed([]() {
  const Stats& s = WorkerStats();
  return Shape{static_cast<int64_t>(s.compute_ms * 1000),
               static_cast<int64_t>(s.allreduce_ms * 1000), s.calls, PeakRssKiB()};
});

// ---- The controller ----------------------------------------------------------------------------

std::string DefaultCheckpoint(const Config& c) {
  return "/tmp/disco-demo-" + c.dtype + "-h" + std::to_string(c.hidden) + "-f" +
         std::to_string(c.ffn) + "-l" + std::to_string(c.layers) + "-s" + std::to_string(c.seed) +
         ".h5";
}

void WriteCheckpoint(Session& s, const Config& c, const std::string& path) {
  DRef init = s.GetGlobalFunc("demo.init_shard");
  std::vector<h5::SaveEntry> entries;
  for (int64_t l = 0; l < c.layers; ++l) {
    for (const Param& p : LayerParams(c, l)) {
      DRef shard =
          s.CallPacked(init, p.name, Shape(p.shape), p.axis, static_cast<int64_t>(c.seed),
                       static_cast<double>(p.scale), static_cast<double>(p.offset), c.dtype);
      entries.push_back({p.name, shard, p.axis});
    }
  }
  h5::SaveTensors(s, path, entries);
}

// The whole stack in this process alone, from the checkpoint file.
std::vector<float> Reference(const Config& c, const std::string& path,
                             const std::vector<float>& input) {
  std::vector<float> x = input, h(static_cast<size_t>(c.tokens * c.ffn)),
                     y(static_cast<size_t>(c.tokens * c.hidden)), out(x.size());
  std::vector<float> scratch[6];
  for (int64_t l = 0; l < c.layers; ++l) {
    std::vector<Param> ps = LayerParams(c, l);
    std::vector<Tensor> w;
    for (const Param& p : ps) w.push_back(io::ReadWholeDataset(path, p.name));
    const float* f[6];
    for (int i = 0; i < 6; ++i) f[i] = AsFloat(w[i], &scratch[i]);
    UpProjection(x.data(), f[0], f[1], c.tokens, c.hidden, c.ffn, h.data());
    DownProjection(h.data(), f[2], c.tokens, c.ffn, c.hidden, y.data());
    ResidualLayerNorm(x.data(), y.data(), f[3], f[4], f[5], c.tokens, c.hidden, out.data());
    x.swap(out);
  }
  return x;
}

int RunChecked(Session& s, const Config& c);

// Errors of the run (a bad checkpoint, a worker that failed) end it with a message and exit 1.
int Run(Session& s, const Config& c) {
  try {
    return RunChecked(s, c);
  } catch (const Error& e) {
    std::fprintf(stderr, "disco-demo: %s\n", e.what());
    return 1;
  }
}

int RunChecked(Session& s, const Config& c) {
  const int n = s.num_workers();
  DISCO_CHECK(c.ffn % n == 0, ValueError)
      << "disco-demo: --ffn " << c.ffn << " cannot be split over " << n << " workers";
  const DLDataType dtype = DataType(c.dtype);
  DISCO_CHECK(c.dtype == "float32" || c.dtype == "bfloat16", ValueError)
      << "disco-demo: --dtype is float32 or bfloat16, not " << c.dtype;
  std::printf("disco-demo: %d workers, %lld layers, hidden %lld, ffn %lld, %lld tokens, %s\n", n,
              static_cast<long long>(c.layers), static_cast<long long>(c.hidden),
              static_cast<long long>(c.ffn), static_cast<long long>(c.tokens), c.dtype.c_str());
  s.InitCCL("mpi");

  std::string path = c.checkpoint.empty() ? DefaultCheckpoint(c) : c.checkpoint;
  if (access(path.c_str(), F_OK) != 0) {
    double t0 = NowMs();
    WriteCheckpoint(s, c, path);
    std::printf("[checkpoint] wrote %s (seed %llu) in %.0f ms\n", path.c_str(),
                static_cast<unsigned long long>(c.seed), NowMs() - t0);
  }

  // Load: every worker reads only its shards.
  double t_load = NowMs();
  std::vector<h5::LoadEntry> plan;
  for (int64_t l = 0; l < c.layers; ++l) {
    for (const Param& p : LayerParams(c, l)) plan.push_back({p.name, p.axis});
  }
  std::map<std::string, DRef> w = h5::LoadTensors(s, path, plan);
  DRef check = s.GetGlobalFunc("demo.check_shard");
  for (int64_t l = 0; l < c.layers; ++l) {
    for (const Param& p : LayerParams(c, l)) {
      std::vector<int64_t> shard = p.shape;
      if (p.axis >= 0) shard[p.axis] /= n;
      s.CallPacked(check, w[p.name], p.name, Shape(shard), c.dtype);
    }
  }
  s.SyncAll();
  std::printf("[load] %zu datasets from %s, sharded over %d workers, in %.0f ms\n", plan.size(),
              path.c_str(), n, NowMs() - t_load);

  // Input: controller -> worker 0 -> broadcast.
  Tensor input = Tensor::Empty(Shape{c.tokens, c.hidden}, dtype);
  std::vector<float> input_f(static_cast<size_t>(input.numel()));
  for (int64_t i = 0; i < input.numel(); ++i) {
    StoreFloat(input, i, Uniform(c.seed, NameHash("input"), static_cast<uint64_t>(i)));
    input_f[i] = IsBf16(input) ? ccl::BFloat16ToFloat(static_cast<uint16_t*>(input.data())[i])
                               : input.data_as<float>()[i];
  }
  DRef x = s.Empty(Shape{c.tokens, c.hidden}, dtype);
  s.CopyToWorker0(input, x);
  s.Broadcast(x, false, x);

  DRef layer = s.GetGlobalFunc("demo.layer");
  auto forward = [&]() {
    DRef cur = x;
    for (int64_t l = 0; l < c.layers; ++l) {
      const std::string p = "layers/" + std::to_string(l) + "/";
      cur = s.CallPacked(layer, cur, w[p + "w1"], w[p + "b1"], w[p + "w2"], w[p + "b2"],
                         w[p + "ln_g"], w[p + "ln_b"]);
    }
    s.SyncAll();
    return cur;
  };
  double t_warm = NowMs();
  for (int64_t i = 0; i < c.warmup; ++i) forward();
  std::printf("[warm-up] %lld steps in %.0f ms\n", static_cast<long long>(c.warmup),
              NowMs() - t_warm);
  s.CallPacked(s.GetGlobalFunc("demo.reset_stats"));
  std::vector<double> step_ms;
  DRef out;
  for (int64_t i = 0; i < c.steps; ++i) {
    double t0 = NowMs();
    out = forward();
    step_ms.push_back(NowMs() - t0);
    std::printf("[step %lld/%lld] %.2f ms\n", static_cast<long long>(i + 1),
                static_cast<long long>(c.steps), step_ms.back());
  }

  // Per-worker time split and memory.
  DRef stats = s.CallPacked(s.GetGlobalFunc("demo.stats"));
  double total_ms = 0;
  for (double t : step_ms) total_ms += t;
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  double busy_max = 0, compute_sum = 0, allreduce_sum = 0;
  std::string peaks;
  for (int wkr = 0; wkr < n; ++wkr) {
    Shape st = stats.DebugGetFromRemote(wkr).cast<Shape>();
    double compute = st[0] / 1000.0, allreduce = st[1] / 1000.0;
    busy_max = std::max(busy_max, compute + allreduce);
    compute_sum += compute;
    allreduce_sum += allreduce;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.0f", wkr ? " " : "", st[3] / 1024.0);
    peaks += buf;
  }

  // Check against the single-process reference.
  Tensor result = Tensor::Empty(Shape{c.tokens, c.hidden}, dtype);
  s.CopyFromWorker0(result, out);
  std::vector<float> ref = Reference(c, path, input_f);
  double max_abs = 0, max_ref = 0;
  for (int64_t i = 0; i < result.numel(); ++i) {
    float got = IsBf16(result) ? ccl::BFloat16ToFloat(static_cast<uint16_t*>(result.data())[i])
                               : result.data_as<float>()[i];
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(got) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  const double rel = max_ref > 0 ? max_abs / max_ref : max_abs;
  const double tol = c.tolerance >= 0 ? c.tolerance : (IsBf16(result) ? 5e-2 : 1e-4);

  std::printf("\nsummary: %lld steps of %lld layers, median step %.2f ms, %.0f tokens/s\n",
              static_cast<long long>(c.steps), static_cast<long long>(c.layers), median,
              c.tokens / (median / 1e3));
  std::printf("  time in layers (all workers): compute %.1f%%, allreduce %.1f%%\n",
              100 * compute_sum / (compute_sum + allreduce_sum),
              100 * allreduce_sum / (compute_sum + allreduce_sum));
  std::printf("  runtime (dispatch and control) share of a step: %.2f%% (%.2f ms per step)\n",
              100 * std::max(0.0, total_ms - busy_max) / total_ms,
              std::max(0.0, total_ms - busy_max) / c.steps);
  std::printf("  peak memory per rank (MiB): %s\n", peaks.c_str());
  std::printf(
      "  check vs single-process reference: max abs error %.3g, max rel error %.3g "
      "(tolerance %.3g): %s\n",
      max_abs, rel, tol, rel <= tol ? "PASS" : "FAIL");
  return rel <= tol ? 0 : 1;
}

void Usage() {
  std::printf(
      "usage: mpirun -n N disco-demo [--hidden H] [--ffn F] [--layers L] [--tokens T] "
      "[--steps S]\n"
      "                              [--warmup W] [--dtype float32|bfloat16] [--seed S]\n"
      "                              [--checkpoint FILE.h5] [--tolerance REL]\n"
      "A missing checkpoint (by default /tmp/disco-demo-DTYPE-hH-fF-lL-sSEED.h5) is written\n"
      "first, with the seed's weights.\n");
}

}  // namespace
}  // namespace demo
}  // namespace disco

int main(int argc, char** argv) {
  disco::demo::Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "disco-demo: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&]() -> int64_t {
      std::string v = value();
      char* end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);  // NOLINT(runtime/int)
      if (end == v.c_str() || *end != '\0' || n < 0) {
        std::fprintf(stderr, "disco-demo: %s needs a non-negative integer, got '%s'\n", a.c_str(),
                     v.c_str());
        std::exit(2);
      }
      return n;
    };
    if (a == "--hidden") {
      c.hidden = number();
    } else if (a == "--ffn") {
      c.ffn = number();
    } else if (a == "--layers") {
      c.layers = number();
    } else if (a == "--tokens") {
      c.tokens = number();
    } else if (a == "--steps") {
      c.steps = std::max<int64_t>(1, number());
    } else if (a == "--warmup") {
      c.warmup = number();
    } else if (a == "--seed") {
      c.seed = static_cast<uint64_t>(number());
    } else if (a == "--dtype") {
      c.dtype = value();
    } else if (a == "--checkpoint") {
      c.checkpoint = value();
    } else if (a == "--tolerance") {
      c.tolerance = std::atof(value().c_str());
    } else if (a == "--help" || a == "-h") {
      disco::demo::Usage();
      return 0;
    } else {
      std::fprintf(stderr, "disco-demo: unknown option %s\n", a.c_str());
      disco::demo::Usage();
      return 2;
    }
  }
  if (c.hidden <= 0 || c.ffn <= 0 || c.layers <= 0 || c.tokens <= 0) {
    std::fprintf(stderr, "disco-demo: sizes must be positive\n");
    return 2;
  }
  openblas_set_num_threads(1);  // one core per rank: the ranks are the parallelism
  return disco::Main(argc, argv, [&](disco::Session& s) { return disco::demo::Run(s, c); });
}
