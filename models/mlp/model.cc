// The model of models/mlp/model.h, on disco's public API only (tests/layers/check_layers.sh).
#include "mlp/model.h"

#ifndef DISCO_DEMO_CUDA
#define DISCO_DEMO_CUDA 0
#endif

#include <cblas.h>
#include <disco/files.h>
#include <disco/half.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "common/rng.h"
#include "mlp/h5_read.h"

#if DISCO_DEMO_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "mlp/cuda_kernels.h"
#endif

namespace disco {
namespace demo {

// One BLAS thread per rank (the ranks are the parallelism), unless OPENBLAS_NUM_THREADS says
// otherwise: set when the program starts, on every rank.
const bool kOneBlasThreadPerRank = [] {
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
  return true;
}();

// A monotonic clock, in milliseconds.
double NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// This process's peak resident set since it started, in KiB, from /proc/self/status (VmHWM); -1
// where the kernel does not say.
int64_t PeakRssKib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// ---- Deterministic parameters -----------------------------------------------------------------

using demo_rng::NameHash;
using demo_rng::Uniform;

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
    static_cast<uint16_t*>(t.data())[i] = FloatToBf16(v);
  } else {
    t.data_as<float>()[i] = v;
  }
}

// A float32 view of `t`: the tensor itself, or a conversion into `scratch`.
const float* AsFloat(const Tensor& t, std::vector<float>* scratch) {
  if (!IsBf16(t)) return t.data_as<float>();
  scratch->resize(static_cast<size_t>(t.numel()));
  const auto* p = static_cast<const uint16_t*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) (*scratch)[i] = Bf16ToFloat(p[i]);
  return scratch->data();
}

// Part `part` of `parts` of parameter `name` (full shape `full`, split along `axis`).
Tensor MakeShard(const std::string& name, const Shape& full, int64_t axis, int64_t seed,
                 double scale, double offset, const std::string& dtype, int part, int parts) {
  std::vector<int64_t> dims(full.begin(), full.end());
  if (axis >= 0) dims[axis] /= parts;
  Tensor t = Tensor::Empty(Shape(dims), DataType(dtype));
  const uint64_t stream = NameHash(name);
  const int64_t cols = dims.size() == 2 ? dims[1] : 1;
  const int64_t full_cols = full.ndim() == 2 ? full[1] : 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t r = i / cols, c = i % cols;
    if (axis == 0) r += part * dims[0];
    if (axis == 1) c += part * dims[1];
    float u =
        Uniform(static_cast<uint64_t>(seed), stream, static_cast<uint64_t>(r * full_cols + c));
    StoreFloat(t, i, static_cast<float>(offset + scale * u));
  }
  return t;
}

// This worker's shard of a parameter, split over all workers.
DISCO_REGISTER_GLOBAL("demo.init_shard")
    .set_body_typed([](std::string name, Shape full, int64_t axis, int64_t seed, double scale,
                       double offset, std::string dtype) {
      const WorkerInfo& w = ThisWorker();
      return MakeShard(name, full, axis, seed, scale, offset, dtype, w.worker_id, w.num_workers);
    });

// The whole parameter on worker 0 (None elsewhere), for the single-worker baseline.
DISCO_REGISTER_GLOBAL("demo.init_full")
    .set_body_typed([](std::string name, Shape full, int64_t seed, double scale, double offset,
                       std::string dtype) -> Any {
      if (ThisWorker().worker_id != 0) return Any();
      return Any(MakeShard(name, full, -1, seed, scale, offset, dtype, 0, 1));
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

#if DISCO_DEMO_CUDA
// A CUDA runtime call's error as a RuntimeError that names the call (`what`: its text).
void CudaCall(cudaError_t st, const char* what) {
  DISCO_CHECK(st == cudaSuccess, RuntimeError)
      << what << " failed: " << cudaGetErrorName(st) << ": " << cudaGetErrorString(st);
}

// Makes `device` current for the lifetime of the guard and restores the previous one.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) : device_(device) {
    CudaCall(cudaGetDevice(&previous_), "cudaGetDevice(&previous_)");
    if (previous_ != device) CudaCall(cudaSetDevice(device), "cudaSetDevice(device)");
  }
  ~CudaDeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_;
};

// One cuBLAS handle per device, made on first use on that device (after InitCCL bound it), its
// work on stream 0 (set explicitly), where the kernels and disco's copies run and after which the
// NCCL backend orders its collectives. The handles live until the process ends (never destroyed
// after main, when the CUDA runtime may already be gone).
cublasHandle_t CublasHandle(int device) {
  static std::mutex mu;
  static auto* handles = new std::map<int, cublasHandle_t>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles->find(device);
  if (it != handles->end()) return it->second;
  cublasHandle_t handle = nullptr;
  cublasStatus_t st = cublasCreate(&handle);
  DISCO_CHECK(st == CUBLAS_STATUS_SUCCESS, RuntimeError)
      << "cublasCreate on cuda:" << device << " failed: " << cublasGetStatusString(st);
  st = cublasSetStream(handle, cudaStreamLegacy);
  DISCO_CHECK(st == CUBLAS_STATUS_SUCCESS, RuntimeError)
      << "cublasSetStream failed: " << cublasGetStatusString(st);
  handles->emplace(device, handle);
  return handle;
}

// cuBLAS takes int sizes: larger ones are an error, not a wrap.
int GemmDim(int64_t v, const char* what) {
  DISCO_CHECK(v >= 0 && v <= INT32_MAX, ValueError)
      << "demo.layer: " << what << " = " << v << " exceeds cuBLAS's int range";
  return static_cast<int>(v);
}

// Row-major c (m, n) = a (m, k) b (k, n): column-major c^T = b^T a^T, accumulated in float32.
void Gemm(int device, const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
          bool bf16) {
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int mi = GemmDim(m, "rows"), ni = GemmDim(n, "columns"), ki = GemmDim(k, "inner size");
  cublasStatus_t st =
      cublasGemmEx(CublasHandle(device), CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ki, &one, b, t, ni, a, t,
                   ki, &zero, c, t, ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  DISCO_CHECK(st == CUBLAS_STATUS_SUCCESS, RuntimeError)
      << "demo.layer: cublasGemmEx failed: " << cublasGetStatusString(st);
}

void CheckKernels(const char* what) {
  const char* err = cuda::LastLaunchError();
  DISCO_CHECK(err[0] == '\0', RuntimeError) << "demo.layer: " << what << " kernel: " << err;
}

// Timing without synchronizing: four events per layer call on stream 0 (start, products done,
// allreduce done, layer done), read when the statistics are asked for. Events are reused.
struct LayerEvents {
  cudaEvent_t e[4];
};
struct DeviceTimes {
  std::vector<LayerEvents> pool;
  size_t used = 0;
  cudaEvent_t Next(int i) {
    if (used == pool.size()) {
      LayerEvents le;
      for (cudaEvent_t& ev : le.e) CudaCall(cudaEventCreate(&ev), "cudaEventCreate(&ev)");
      pool.push_back(le);
    }
    return pool[used].e[i];
  }
};
DeviceTimes& WorkerDeviceTimes() {
  static auto* t = new DeviceTimes();  // events live as long as the process
  return *t;
}
// Adds the layer calls recorded since the last reset to the statistics (waits for them).
void CollectDeviceTimes(Stats* st);
void Record(int i) {
  // A long run without statistics folds its events in now and then, so that the pool stays small.
  if (i == 0 && WorkerDeviceTimes().used >= 1024) CollectDeviceTimes(&WorkerStats());
  CudaCall(cudaEventRecord(WorkerDeviceTimes().Next(i), cudaStreamLegacy),
           "cudaEventRecord(WorkerDeviceTimes().Next(i), cudaStreamLegacy)");
}

void CollectDeviceTimes(Stats* st) {
  DeviceTimes& t = WorkerDeviceTimes();
  for (size_t i = 0; i < t.used; ++i) {
    const LayerEvents& le = t.pool[i];
    CudaCall(cudaEventSynchronize(le.e[3]), "cudaEventSynchronize(le.e[3])");
    float ms[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      CudaCall(cudaEventElapsedTime(&ms[k], le.e[k], le.e[k + 1]),
               "cudaEventElapsedTime(&ms[k], le.e[k], le.e[k + 1])");
    }
    st->compute_ms += ms[0] + ms[2];
    st->allreduce_ms += ms[1];
  }
  t.used = 0;
}

// The layer on CUDA tensors: cuBLAS products and the kernels of cuda_kernels.cu on stream 0, the
// allreduce through the NCCL backend (ordered after stream 0 by the backend itself). Nothing here
// allocates with cudaMalloc (tensors come from the device's memory pool) or synchronizes.
Tensor LayerOnDevice(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                     const Tensor& b2, const Tensor& g, const Tensor& beta, bool reduce) {
  const int64_t tokens = x.shape()[0], hidden = x.shape()[1], f = w1.shape()[1];
  const bool bf16 = IsBf16(x);
  const int device = x.device().device_id;
  for (const Tensor* t : {&w1, &b1, &w2, &b2, &g, &beta}) {
    DISCO_CHECK(t->device() == x.device() && t->dtype() == x.dtype(), ValueError)
        << "demo.layer: every tensor must be a " << DataTypeToString(x.dtype()) << " on "
        << DeviceToString(x.device()) << "; got " << t->ToString();
  }
  CudaDeviceGuard guard(device);
  Record(0);
  Tensor h = Tensor::Empty(Shape{tokens, f}, x.dtype(), x.device());
  Gemm(device, x.data(), w1.data(), h.data(), tokens, f, hidden, bf16);
  cuda::BiasGelu(h.data(), b1.data(), tokens, f, bf16);
  CheckKernels("bias + gelu");
  Tensor partial = Tensor::Empty(Shape{tokens, hidden}, x.dtype(), x.device());
  Gemm(device, h.data(), w2.data(), partial.data(), tokens, hidden, f, bf16);
  Record(1);
  if (reduce) Registry::Get("disco.allreduce")(partial, std::string("sum"), false, partial);
  Record(2);
  Tensor result = Tensor::Empty(Shape{tokens, hidden}, x.dtype(), x.device());
  cuda::ResidualLayerNorm(x.data(), partial.data(), b2.data(), g.data(), beta.data(), tokens,
                          hidden, result.data(), bf16);
  CheckKernels("residual + layer norm");
  Record(3);
  ++WorkerDeviceTimes().used;
  WorkerStats().calls += 1;
  return result;
}
#endif

bool HaveCudaPath() { return DISCO_DEMO_CUDA != 0; }

// One layer on this worker's shards; `reduce` sums the partial products over the workers (off for
// the unsharded single-worker baseline).
Tensor LayerOnShards(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                     const Tensor& b2, const Tensor& g, const Tensor& beta, bool reduce) {
  const int64_t tokens = x.shape()[0], hidden = x.shape()[1], f = w1.shape()[1];
  DISCO_CHECK(w1.shape()[0] == hidden && w2.shape()[0] == f && w2.shape()[1] == hidden, ValueError)
      << "demo.layer: shards do not fit: x " << x.shape().ToString() << ", w1 "
      << w1.shape().ToString() << ", w2 " << w2.shape().ToString();
#if DISCO_DEMO_CUDA
  if (x.device().device_type == kDLCUDA) return LayerOnDevice(x, w1, b1, w2, b2, g, beta, reduce);
#endif
  DISCO_CHECK(x.device().device_type == kDLCPU, ValueError)
      << "demo.layer: this build runs the model on host tensors only, got " << x.ToString();
  double t0 = NowMs();
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
  if (reduce) Registry::Get("disco.allreduce")(partial, std::string("sum"), false, partial);
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
}

DISCO_REGISTER_GLOBAL("demo.layer")
    .set_body_typed([](Tensor x, Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor g,
                       Tensor beta) { return LayerOnShards(x, w1, b1, w2, b2, g, beta, true); });

// The single-worker baseline of disco-bench mlp: worker 0 runs the unsharded layer, the others
// return None at once.
DISCO_REGISTER_GLOBAL("demo.layer_local")
    .set_body_typed([](Any x, Any w1, Any b1, Any w2, Any b2, Any g, Any beta) -> Any {
      if (ThisWorker().worker_id != 0) return Any();
      return Any(LayerOnShards(x.cast<Tensor>(), w1.cast<Tensor>(), b1.cast<Tensor>(),
                               w2.cast<Tensor>(), b2.cast<Tensor>(), g.cast<Tensor>(),
                               beta.cast<Tensor>(), false));
    });

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

DISCO_REGISTER_GLOBAL("demo.reset_stats").set_body_typed([]() {
  WorkerStats() = Stats();
#if DISCO_DEMO_CUDA
  WorkerDeviceTimes().used = 0;
#endif
});
// compute ms, allreduce ms (x1000, as integers), calls, peak RSS KiB.
DISCO_REGISTER_GLOBAL("demo.stats").set_body_typed([]() {
#if DISCO_DEMO_CUDA
  CollectDeviceTimes(&WorkerStats());
#endif
  const Stats& s = WorkerStats();
  return Shape{static_cast<int64_t>(s.compute_ms * 1000),
               static_cast<int64_t>(s.allreduce_ms * 1000), s.calls, PeakRssKib()};
});

// ---- The controller ----------------------------------------------------------------------------

std::string DefaultCheckpoint(const Config& c) {
  // In a directory only this user can create names in: no other user can plant the file.
  return disco::PrivateTempDir() + "/mlp-" + c.dtype + "-h" + std::to_string(c.hidden) + "-f" +
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
    for (const Param& p : ps) w.push_back(ReadWholeDataset(path, p.name));
    const float* f[6];
    for (int i = 0; i < 6; ++i) f[i] = AsFloat(w[i], &scratch[i]);
    UpProjection(x.data(), f[0], f[1], c.tokens, c.hidden, c.ffn, h.data());
    DownProjection(h.data(), f[2], c.tokens, c.ffn, c.hidden, y.data());
    ResidualLayerNorm(x.data(), y.data(), f[3], f[4], f[5], c.tokens, c.hidden, out.data());
    x.swap(out);
  }
  return x;
}

float ToFloat(const Tensor& t, int64_t i) {
  return IsBf16(t) ? Bf16ToFloat(static_cast<const uint16_t*>(t.data())[i]) : t.data_as<float>()[i];
}

Tensor MakeInput(const Config& c, std::vector<float>* as_float) {
  Tensor input = Tensor::Empty(Shape{c.tokens, c.hidden}, DataType(c.dtype));
  as_float->resize(static_cast<size_t>(input.numel()));
  for (int64_t i = 0; i < input.numel(); ++i) {
    StoreFloat(input, i, Uniform(c.seed, NameHash("input"), static_cast<uint64_t>(i)));
    (*as_float)[i] = ToFloat(input, i);
  }
  return input;
}

std::map<std::string, DRef> LoadModel(Session& s, const Config& c, const std::string& path) {
  const int n = s.num_workers();
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
  return w;
}

std::map<std::string, DRef> MakeFullModelOnWorker0(Session& s, const Config& c) {
  DRef init = s.GetGlobalFunc("demo.init_full");
  std::map<std::string, DRef> w;
  for (int64_t l = 0; l < c.layers; ++l) {
    for (const Param& p : LayerParams(c, l)) {
      w[p.name] =
          s.CallPacked(init, p.name, Shape(p.shape), static_cast<int64_t>(c.seed),
                       static_cast<double>(p.scale), static_cast<double>(p.offset), c.dtype);
    }
  }
  s.SyncAll();
  return w;
}

DRef Forward(Session& s, const Config& c, const std::map<std::string, DRef>& w, const DRef& x,
             bool local) {
  DRef layer = s.GetGlobalFunc(local ? "demo.layer_local" : "demo.layer");
  DRef cur = x;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers/" + std::to_string(l) + "/";
    cur = s.CallPacked(layer, cur, w.at(p + "w1"), w.at(p + "b1"), w.at(p + "w2"), w.at(p + "b2"),
                       w.at(p + "ln_g"), w.at(p + "ln_b"));
  }
  return cur;
}

// A copy of `t` on this worker's device (the one InitCCL bound; the host without a GPU).
DISCO_REGISTER_GLOBAL("demo.to_device").set_body_typed([](Tensor t) {
  Tensor d = Tensor::Empty(t.shape(), t.dtype(), ThisWorker().device);
  d.CopyFrom(t);
  return d;
});

void MoveToDevice(Session& s, std::map<std::string, DRef>* w) {
  DRef to_device = s.GetGlobalFunc("demo.to_device");
  for (auto& entry : *w) entry.second = s.CallPacked(to_device, entry.second);
}

DRef MoveToDevice(Session& s, const DRef& x) {
  return s.CallPacked(s.GetGlobalFunc("demo.to_device"), x);
}

void ResetWorkerTimes(Session& s) { s.CallPacked(s.GetGlobalFunc("demo.reset_stats")); }

std::vector<WorkerTimes> GetWorkerTimes(Session& s) {
  DRef stats = s.CallPacked(s.GetGlobalFunc("demo.stats"));
  std::vector<WorkerTimes> out;
  for (int w = 0; w < s.num_workers(); ++w) {
    Shape st = stats.DebugGetFromRemote(w).cast<Shape>();
    out.push_back({st[0] / 1000.0, st[1] / 1000.0, st[2], st[3]});
  }
  return out;
}

}  // namespace demo
}  // namespace disco
