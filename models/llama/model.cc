// A Llama-architecture decoder with Megatron tensor parallelism, as disco worker functions: Llama,
// Mistral, Qwen2 and Qwen3 checkpoints (what each family adds: config.h).
//
//   x = embed(tokens)                                   vocabulary-parallel, allreduce
//   for each layer:
//     h = rmsnorm(x) * input_layernorm
//     q, k, v = h Wq^T, h Wk^T, h Wv^T (+ biases)       column-parallel: this rank's heads
//     q, k = rmsnorm(q) * q_norm, rmsnorm(k) * k_norm   Qwen3: per head, replicated weights
//     q, k = rope(q), rope(k)                           rotate_half, rope_theta (rope_scaling)
//     cache[k, v] at each row's (sequence, position)
//     a = softmax(q K^T / sqrt(head_dim)) V             causal (Mistral: sliding window),
//                                                       grouped-query (shared kv heads)
//     x += allreduce(a Wo^T) (+ o bias)                 row-parallel: partial sums; a bias
//                                                       is added once, after the sum
//     h = rmsnorm(x) * post_attention_layernorm
//     x += allreduce((silu(h Wg^T) * h Wu^T) Wd^T)      gate/up column-, down row-parallel
//                                                       (Llama's mlp_bias likewise)
//   logits = rmsnorm(x) * norm  LM_head^T               vocabulary-parallel (tied: embed)
//   next = argmax(logits)                               each rank its slice's (value, index);
//                                                       one allreduce(max) of packed pairs
//
// A batch is a list of rows, each a (sequence, position, token): prefill puts every prompt's
// tokens in it (concatenated, each prompt its own length and positions 0..len-1), a decode step
// the last token of every sequence at its own position. Every row first writes its key and value
// into the KV cache at its position, then attends to positions 0..its own of its sequence: causal
// masking and per-sequence lengths follow from the positions alone. The KV cache has a fixed
// capacity (max_len positions per sequence) and every buffer is allocated by llama.new_state, so a
// decode step allocates nothing and keeps its shapes: it can be a captured graph whose one input
// is the step number.
//
// Slot mode (llama.begin_step, disco-llm-server's continuous batching) uses the same rows: each
// sequence of the KV cache is a slot at a position of its own, and a step lists the slots it
// advances and their tokens (a new prompt's chunk, or a decoding slot's last token); the head
// reads each listed slot's last row. A slot is reused without clearing: a row attends only to
// positions up to its own, which its sequence has written.
//
// Allreduces go through disco::AllReduceInFunction (no agreement round): every rank's tensors
// follow from the config and the command's arguments.
//
// On a GPU (a worker whose device is CUDA when the model is made: after InitCCL("nccl")) the
// weights, the KV cache and every buffer live on the worker's GPU and every step is queued on its
// compute stream (disco::ThisWorkerStream()), allreduces included: a worker function returns
// before the GPU has run it, so the controller's next calls overlap the GPU's work. The kernels
// and cuBLAS products are in libdisco_llama_cuda.so (cuda_kernels.h), loaded on first use.
//
// This file stays whole, over the house's 800 lines, as llm.c's model file does: it opens with
// the algorithm above and then holds, in its order, the rank's shards (Model), the state of a
// generation (State), the layers on a GPU and on the host, and the worker functions; the classes
// are private to it, so a reader follows one step from the algorithm to its code without a header
// in between. The parts that are not the model (the checkpoint's files, the config, the kernels,
// the driver) are files of their own beside it.
#include "llama/model.h"

#include <cblas.h>
#include <disco/any.h>
#include <disco/ccl.h>
#include <disco/error.h>
#include <disco/function.h>
#include <disco/tensor.h>
#include <disco/worker.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llama/config.h"
#include "llama/cuda_kernels.h"
#include "llama/kernels.h"
#include "llama/q8.h"
#include "llama/safetensors.h"
#include "llama/sampling.h"
#include "llama/weight_arena.h"

namespace llama {
namespace {

using disco::Object;
using disco::Shape;
using disco::Tensor;

// One BLAS thread per rank (the ranks are the parallelism), unless OPENBLAS_NUM_THREADS says
// otherwise: set when the library loads, on every rank.
const bool kOneBlasThreadPerRank = [] {
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
  return true;
}();

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A run's dtype: the weights' storage dtype, and whether the linear layers' weights are int8
// (q8.h: "int8" keeps the embedding, norms and biases in float32).
struct RunDType {
  DType dtype;
  bool q8;
};
RunDType ParseRunDType(const std::string& s) {
  DISCO_CHECK(s == "float32" || s == "bfloat16" || s == "int8", ValueError)
      << "dtype is float32, bfloat16 or int8, not '" << s << "'";
  return {s == "bfloat16" ? DType::kBF16 : DType::kF32, s == "int8"};
}
DLDataType ToDL(DType d) {
  return d == DType::kF32 ? disco::DataType("float32") : disco::DataType("bfloat16");
}
DType FromDL(DLDataType t) {
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  return DType::kOther;
}

// The peak resident set of this process (VmHWM), in KiB.
int64_t PeakRssKib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

// The GPU path's functions: libdisco_llama_cuda.so, next to this library (or on the library
// path), loaded on first use.
const cuda::Ops& CudaOps() {
  static const cuda::Ops* ops = [] {
    Dl_info self{};
    std::string beside;
    if (dladdr(reinterpret_cast<void*>(&WorkerFunctionNames), &self) != 0 &&
        self.dli_fname != nullptr) {
      std::string me = self.dli_fname;
      beside = me.substr(0, me.find_last_of('/') + 1) + "libdisco_llama_cuda.so";
    }
    std::string errors;
    for (const std::string& path : {beside, std::string("libdisco_llama_cuda.so")}) {
      if (path.empty()) continue;
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        const char* e = dlerror();
        errors += std::string(errors.empty() ? "" : "; ") + (e != nullptr ? e : path);
        continue;
      }
      using Entry = const cuda::Ops* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(h, "disco_llama_cuda_ops"));
      DISCO_CHECK(entry != nullptr && entry()->version == cuda::kVersion, RuntimeError)
          << path << " is not the CUDA module of this libdisco_llama (version "
          << (entry != nullptr ? entry()->version : -1) << ", this library's " << cuda::kVersion
          << "): rebuild and reinstall both";
      return entry();
    }
    DISCO_THROW(RuntimeError)
        << "a llama model on a GPU needs libdisco_llama_cuda.so (built with disco when CUDA, "
        << "cuBLAS and nvcc are found), which could not be loaded: " << errors;
  }();
  return *ops;
}

// A host copy of a (host or device) tensor.
Tensor OnHost(const Tensor& t) {
  if (t.device().device_type == kDLCPU) return t;
  Tensor h = Tensor::Empty(t.shape(), t.dtype());
  h.CopyFrom(t);
  return h;
}
// A copy of host tensor `t` on `device` (itself on the host).
Tensor OnDevice(const Tensor& t, DLDevice device) {
  if (device.device_type == kDLCPU) return t;
  Tensor d = Tensor::Empty(t.shape(), t.dtype(), device);
  d.CopyFrom(t);
  return d;
}

// ---- The model: this rank's shards -----------------------------------------------------------

// A small vector of weights (a norm; a bias, this rank's shard of it): a float32 copy on the host,
// and on a GPU one there. Empty when the config has none (biases, q/k norms).
struct Floats {
  std::vector<float> host;
  Tensor gpu;
  bool empty() const { return host.empty(); }
};

struct LayerWeights {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  Floats input_norm, post_norm;
  Floats q_norm, k_norm;                  // Qwen3: per head, head_dim each
  Floats q_bias, k_bias, v_bias, o_bias;  // o_bias whole: added once, after the allreduce
  Floats gate_bias, up_bias, down_bias;   // down_bias likewise
};

class Model {
 public:
  Model(const Config& c, RunDType run, int rank, int ranks, DLDevice device)
      : config(c), dtype(run.dtype), q8(run.q8), rank(rank), ranks(ranks), device(device) {
    gpu = device.device_type == kDLCUDA;
    DISCO_CHECK(!(gpu && q8), ValueError)
        << "dtype int8 runs on the CPU only (its kernels are the CPU's); on a GPU use float32 or "
        << "bfloat16";
    if (gpu) CudaOps();  // a GPU model without the CUDA module fails here, not at its first step
    c.CheckSplit(ranks);
    heads = c.num_attention_heads / ranks;
    kv_heads = c.num_key_value_heads / ranks;
    ffn = c.intermediate_size / ranks;
    vocab = c.vocab_size / ranks;
    vocab_start = vocab * rank;
    for (const WeightSpec& w : WeightSpecs(c)) specs[w.name] = w;
  }

  const WeightSpec& Spec(const std::string& name) const {
    auto it = specs.find(name);
    DISCO_CHECK(it != specs.end(), ValueError)
        << "'" << name << "' is not a weight of this model (" << config.model_type << ": "
        << config.Summary() << ")";
    return it->second;
  }
  // The rows and columns of the full tensor this rank holds.
  void Range(const WeightSpec& w, int64_t* r0, int64_t* r1, int64_t* c0, int64_t* c1) const {
    const int64_t rows = w.shape.size() == 2 ? w.shape[0] : 1;
    const int64_t cols = w.shape.back();
    *r0 = 0, *r1 = rows, *c0 = 0, *c1 = cols;
    // A bias split like its matrix's rows is one row here: its columns are split.
    const bool by_columns = w.split == Split::kColumns || (w.split == Split::kRows && rows == 1);
    if (w.split == Split::kRows && !by_columns) *r0 = rows / ranks * rank, *r1 = *r0 + rows / ranks;
    if (by_columns) *c0 = cols / ranks * rank, *c1 = *c0 + cols / ranks;
  }

  void SetWeight(const std::string& name, const Tensor& shard) {
    const WeightSpec& w = Spec(name);
    const std::vector<int64_t> want = ShardShape(w, ranks);
    const std::vector<int64_t> got(shard.shape().begin(), shard.shape().end());
    DISCO_CHECK(got == want, ValueError)
        << "weight '" << name << "': worker " << rank << " got a shard of shape "
        << ShapeString(got) << "; with " << ranks << " ranks it needs " << ShapeString(want)
        << " (full shape " << ShapeString(w.shape) << ": " << w.why << ")";
    const DType from = FromDL(shard.dtype());
    const bool here = shard.device().device_type == device.device_type &&
                      shard.device().device_id == device.device_id;
    DISCO_CHECK(
        from != DType::kOther && (shard.device().device_type == kDLCPU || (here && from == dtype)),
        TypeError)
        << "weight '" << name << "': a " << shard.ToString()
        << " (float32, float16 or bfloat16 host tensors, or tensors of the model's dtype on its "
        << "device, " << disco::DeviceToString(device) << ")";
    if (from == dtype) {
      weights[name] = here ? shard : OnDevice(shard, device);  // on the host: no copy
    } else {
      Tensor t = Tensor::Empty(shard.shape(), ToDL(dtype));
      ConvertElements(from, shard.data(), shard.numel(), dtype, t.data());
      weights[name] = OnDevice(t, device);
    }
  }

  void LoadFrom(const Checkpoint& ck) {
    if (!gpu) arena = WeightArena::Make(StreamedBytes());
    for (const WeightSpec& w : WeightSpecs(config)) {
      const TensorInfo* info = ck.Find(w.name);
      DISCO_CHECK(info != nullptr, ValueError) << "tensor '" << w.name << "' is missing";
      const std::vector<int64_t> shard = ShardShape(w, ranks);
      Tensor t = arena && !q8 && Streamed(w.name) ? arena->Take(Shape(shard), ToDL(dtype))
                                                  : Tensor::Empty(Shape(shard), ToDL(dtype));
      int64_t r0, r1, c0, c1;
      Range(w, &r0, &r1, &c0, &c1);
      ck.ReadSlice(*info, r0, r1, c0, c1, dtype, t.data());
      weights[w.name] = OnDevice(t, device);
    }
  }

  // With dtype int8: every linear layer's float32 shard replaced by its int8 blocks (q8.h), and a
  // tied LM head's quantized copy of the embedding (which stays float32 for the embedding).
  void Quantize() {
    auto quantize = [&](const std::string& name, const Tensor& f) {
      const int64_t rows = f.shape()[0], cols = f.shape()[1];
      const Shape shape{rows, q8::RowBytes(cols)};
      Tensor t = arena ? arena->Take(shape, disco::DataType("uint8"))
                       : Tensor::Empty(shape, disco::DataType("uint8"));
      q8::Quantize(f.data_as<float>(), rows, cols, t.data_as<uint8_t>(), "weight '" + name + "'");
      return t;
    };
    for (const WeightSpec& w : WeightSpecs(config)) {
      auto it = weights.find(w.name);
      if (w.shape.size() != 2 || w.name == "model.embed_tokens.weight" || it == weights.end()) {
        continue;
      }
      it->second = quantize(w.name, it->second);
    }
    auto embed_it = weights.find("model.embed_tokens.weight");
    if (config.tie_word_embeddings && embed_it != weights.end()) {
      tied_head_q8 = quantize("model.embed_tokens.weight (as the LM head)", embed_it->second);
    }
  }

  // Whether a decode step streams the weight `name` through Linear (weight_arena.h): the linear
  // layers' matrices, and the embedding when it is the LM head too (not with int8, whose head is a
  // quantized copy).
  bool Streamed(const std::string& name) const {
    if (name == "model.embed_tokens.weight") return config.tie_word_embeddings && !q8;
    return Spec(name).shape.size() == 2;
  }
  // The bytes of this rank's streamed weights in their final format (with int8, Q8_0 rows).
  size_t StreamedBytes() const {
    std::vector<size_t> bytes;
    for (const WeightSpec& w : WeightSpecs(config)) {
      const bool head_q8 =
          q8 && config.tie_word_embeddings && w.name == "model.embed_tokens.weight";
      if (!Streamed(w.name) && !head_q8) continue;
      const std::vector<int64_t> shard = ShardShape(w, ranks);
      bytes.push_back(q8 ? static_cast<size_t>(shard[0] * q8::RowBytes(shard[1]))
                         : static_cast<size_t>(Shape(shard).Numel() * DTypeSize(dtype)));
    }
    return ArenaBytes(bytes);
  }
  // The streamed weights given by llama.set_weight, copied into an arena in the order LoadFrom
  // would have loaded them (a model LoadFrom loaded has its arena: llama.open finalizes it at
  // once).
  void PackStreamed() {
    if (arena) return;
    std::vector<Tensor*> streamed;
    for (const WeightSpec& w : WeightSpecs(config)) {
      auto it = weights.find(w.name);
      if (it != weights.end() && Streamed(w.name)) streamed.push_back(&it->second);
    }
    if (tied_head_q8.defined()) streamed.push_back(&tied_head_q8);
    std::vector<size_t> bytes;
    for (const Tensor* t : streamed) bytes.push_back(t->nbytes());
    arena = WeightArena::Make(ArenaBytes(bytes));
    for (Tensor* t : streamed) *t = arena->Copy(*t);
  }

  WeightFormat Format() const {
    return q8                      ? WeightFormat::kQ8
           : dtype == DType::kBF16 ? WeightFormat::kBf16
                                   : WeightFormat::kF32;
  }

  // Pointers to every weight, and float32 copies of the norms and biases; every weight the config
  // needs must be there.
  void Finalize() {
    if (q8) Quantize();
    if (!gpu) PackStreamed();
    auto get = [&](const std::string& name) -> const void* {
      auto it = weights.find(name);
      DISCO_CHECK(it != weights.end(), ValueError)
          << "weight '" << name << "' was never loaded (llama.set_weight)";
      return it->second.data();
    };
    // A norm's or bias's float32 copies (on a GPU, there too); empty when the config has none.
    auto floats = [&](const std::string& name) {
      Floats f;
      if (specs.count(name) == 0) return f;
      get(name);
      Tensor host = OnHost(weights[name]);
      f.host.resize(static_cast<size_t>(host.numel()));
      ConvertElements(dtype, host.data(), host.numel(), DType::kF32, f.host.data());
      if (gpu) {
        Tensor t = Tensor::Empty(Shape{host.numel()}, disco::DataType("float32"));
        std::memcpy(t.data(), f.host.data(), t.nbytes());
        f.gpu = OnDevice(t, device);
      }
      return f;
    };
    layers.assign(static_cast<size_t>(config.num_hidden_layers), LayerWeights());
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      LayerWeights& lw = layers[l];
      lw.q = get(p + "self_attn.q_proj.weight");
      lw.k = get(p + "self_attn.k_proj.weight");
      lw.v = get(p + "self_attn.v_proj.weight");
      lw.o = get(p + "self_attn.o_proj.weight");
      lw.gate = get(p + "mlp.gate_proj.weight");
      lw.up = get(p + "mlp.up_proj.weight");
      lw.down = get(p + "mlp.down_proj.weight");
      lw.input_norm = floats(p + "input_layernorm.weight");
      lw.post_norm = floats(p + "post_attention_layernorm.weight");
      lw.q_norm = floats(p + "self_attn.q_norm.weight");
      lw.k_norm = floats(p + "self_attn.k_norm.weight");
      lw.q_bias = floats(p + "self_attn.q_proj.bias");
      lw.k_bias = floats(p + "self_attn.k_proj.bias");
      lw.v_bias = floats(p + "self_attn.v_proj.bias");
      lw.o_bias = floats(p + "self_attn.o_proj.bias");
      lw.gate_bias = floats(p + "mlp.gate_proj.bias");
      lw.up_bias = floats(p + "mlp.up_proj.bias");
      lw.down_bias = floats(p + "mlp.down_proj.bias");
    }
    embed = get("model.embed_tokens.weight");
    lm_head = !config.tie_word_embeddings ? get("lm_head.weight")
              : q8                        ? tied_head_q8.data()
                                          : embed;
    final_norm = floats("model.norm.weight");
    finalized = true;
  }

  int64_t HugeBytes() const { return static_cast<int64_t>(arena ? arena->HugeBytes() : 0); }

  int64_t WeightBytes() const {
    int64_t n = 0;
    for (const auto& [name, t] : weights) n += static_cast<int64_t>(t.nbytes());
    return n + (tied_head_q8.defined() ? static_cast<int64_t>(tied_head_q8.nbytes()) : 0);
  }

  Config config;
  DType dtype;  // of the weights in `weights` before Finalize (with q8, of all but the linear ones)
  bool q8;      // dtype int8: the linear layers' weights quantized by Finalize
  int rank, ranks;
  DLDevice device;  // the worker's device when the model was made: CPU or its GPU
  bool gpu = false;
  int64_t heads = 0, kv_heads = 0, ffn = 0, vocab = 0, vocab_start = 0;
  std::map<std::string, WeightSpec> specs;
  std::map<std::string, Tensor> weights;  // this rank's shards, by Hugging Face name
  Tensor tied_head_q8;                    // q8 with tied embeddings: the LM head's int8 copy
  // On a CPU: the streamed matrices (LoadFrom and Quantize, or PackStreamed).
  std::shared_ptr<WeightArena> arena;
  std::vector<LayerWeights> layers;
  const void* embed = nullptr;
  const void* lm_head = nullptr;
  Floats final_norm;
  bool finalized = false;
};

// A [rows, cols] tensor over the first rows of `master` (which it keeps alive): the allreduce of
// a batch smaller than the buffers moves only the batch.
Tensor RowsView(const Tensor& master, int64_t rows) {
  struct Ctx {
    Tensor master;
    int64_t shape[2];
  };
  auto* ctx = new Ctx{master, {rows, master.shape()[1]}};
  auto* mt = new DLManagedTensor{};
  mt->dl_tensor.data = master.data();
  mt->dl_tensor.device = master.device();
  mt->dl_tensor.ndim = 2;
  mt->dl_tensor.dtype = master.dtype();
  mt->dl_tensor.shape = ctx->shape;
  mt->dl_tensor.strides = nullptr;
  mt->dl_tensor.byte_offset = 0;
  mt->manager_ctx = ctx;
  mt->deleter = [](DLManagedTensor* self) {
    delete static_cast<Ctx*>(self->manager_ctx);
    delete self;
  };
  return Tensor::FromDLPack(mt);
}

// A float32 buffer of [max_rows, cols] (on the host, or on a GPU with its stream) that allreduces
// its first rows.
class RowBuffer {
 public:
  void Allocate(int64_t max_rows, int64_t cols, DLDevice device = disco::CPU(),
                void* stream = nullptr) {
    master_ = Tensor::Empty(Shape{max_rows, cols}, disco::DataType("float32"), device);
    if (device.device_type == kDLCPU) {
      std::memset(master_.data(), 0, master_.nbytes());
    } else {
      CudaOps().memset_async(master_.data(), 0, master_.nbytes(), stream);
    }
    views_.clear();
  }
  float* data() const { return master_.data_as<float>(); }
  void AllReduce(int64_t rows) {
    for (const auto& [n, view] : views_) {
      if (n == rows) {
        disco::AllReduceInFunction(view, disco::ReduceOp::kSum);
        return;
      }
    }
    views_.emplace_back(rows, rows == master_.shape()[0] ? master_ : RowsView(master_, rows));
    disco::AllReduceInFunction(views_.back().second, disco::ReduceOp::kSum);
  }

 private:
  Tensor master_;
  std::vector<std::pair<int64_t, Tensor>> views_;
};

// ---- The state of a generation: KV cache, batch, buffers -----------------------------------

// What a generation holds on a GPU: buffers, the KV cache, the batch's rows, the tokens (they
// stay there: a decode step's batch is made from them on the GPU), the cuBLAS handle, and timing
// events (see Timer).
struct GpuState {
  explicit GpuState(void* stream) : ops(CudaOps()), stream(stream) {}
  ~GpuState() {
    for (void* e : events) ops.delete_event(e);
    ops.delete_blas(blas);
  }
  GpuState(const GpuState&) = delete;
  GpuState& operator=(const GpuState&) = delete;

  // Records the next timing event on the stream.
  void* Mark() {
    if (next_event == events.size()) events.push_back(ops.new_event());
    void* e = events[next_event++];
    ops.record(e, stream);
    return e;
  }
  // Adds the time of the recorded segments to the totals (waits for the GPU) and frees their
  // events for reuse.
  void Fold(double* compute_s, double* allreduce_s) {
    if (segments.empty()) return;
    ops.synchronize(stream);
    for (const Segment& seg : segments) {
      const double t = ops.elapsed_ms(seg.from, seg.to) * 1e-3;
      (seg.allreduce ? *allreduce_s : *compute_s) += t;
    }
    segments.clear();
    next_event = 0;
  }

  const cuda::Ops& ops;
  void* stream;
  void* blas = nullptr;
  // Float32 buffers (and bfloat16 copies of the products' inputs with bfloat16 weights).
  Tensor hbuf, hbuf16, q, k, v, attn, attn16, gate, gate16, up, scores, hsel, hsel16, logits;
  Tensor kcache, vcache, cos, sin, kept;
  // int64: the batch's rows, each sequence's output row and prompt length, the tokens.
  Tensor row_seq, row_pos, row_tok, last_row, seq_len, tokens;
  struct Segment {
    void* from;
    void* to;
    bool allreduce;
  };
  std::vector<void*> events;
  size_t next_event = 0;
  std::vector<Segment> segments;
};

template <typename T = float>
T* Ptr(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

class State {
 public:
  State(std::shared_ptr<Model> model, int64_t batch, int64_t max_len, int64_t max_rows,
        int64_t max_new, bool keep_logits)
      : m(std::move(model)),
        batch(batch),
        max_len(max_len),
        max_rows(max_rows),
        max_new(max_new),
        keep_logits(keep_logits) {
    DISCO_CHECK(batch >= 1 && max_len >= 1 && max_rows >= 1 && max_new >= 1, ValueError)
        << "llama.new_state: batch " << batch << ", max_len " << max_len << ", max_rows "
        << max_rows << ", max_new_tokens " << max_new << ": each must be positive";
    const Config& c = m->config;
    const int64_t h = c.hidden_size, hd = c.head_dim;
    CheckSizes();
    cache_stride = max_len * hd;
    const size_t cache = static_cast<size_t>(c.num_hidden_layers * batch * m->kv_heads) *
                         static_cast<size_t>(cache_stride);
    if (!m->gpu) {
      kcache.assign(cache, 0.0f);
      vcache.assign(cache, 0.0f);
    }
    // Rotary tables, as Hugging Face computes them in float32: inv_freq[i] = 1 /
    // theta^(2i / dim) (scaled as rope_scaling says: Config::InvFreq), angle = position *
    // inv_freq.
    const int64_t half = hd / 2;
    const std::vector<float> inv_freq = c.InvFreq();
    cos.resize(static_cast<size_t>(max_len * half));
    sin.resize(cos.size());
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t p = 0; p < max_len; ++p) {
        const float angle = static_cast<float>(p) * inv_freq[i];
        cos[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sin[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    seq_len.assign(static_cast<size_t>(batch), 0);
    tokens.assign(static_cast<size_t>(batch * max_new), -1);
    last_row.assign(static_cast<size_t>(batch), 0);
    next.assign(static_cast<size_t>(batch), -1);
    temperature.assign(static_cast<size_t>(batch), 0.0f);
    top_p.assign(static_cast<size_t>(batch), 1.0f);
    seed.assign(static_cast<size_t>(batch), 0);
    heads = batch;
    row_seq.assign(static_cast<size_t>(max_rows), 0);
    row_pos.assign(static_cast<size_t>(max_rows), 0);
    row_tok.assign(static_cast<size_t>(max_rows), 0);
    if (m->gpu) {
      AllocateOnGpu(static_cast<int64_t>(cache));
      return;
    }
    x.Allocate(max_rows, h);
    part.Allocate(max_rows, h);
    hbuf.resize(static_cast<size_t>(max_rows * h));
    q.resize(static_cast<size_t>(max_rows * m->heads * hd));
    attn.resize(q.size());
    k.resize(static_cast<size_t>(max_rows * m->kv_heads * hd));
    v.resize(k.size());
    gate.resize(static_cast<size_t>(max_rows * m->ffn));
    up.resize(gate.size());
    scores.resize(static_cast<size_t>((m->heads / m->kv_heads) * max_len));
    hsel.resize(static_cast<size_t>(batch * h));
    logits.resize(static_cast<size_t>(batch * m->vocab));
    best = Tensor::Empty(Shape{batch}, disco::DataType("int64"));
    if (keep_logits) kept.assign(static_cast<size_t>(max_new * batch * m->vocab), 0.0f);
  }

  // Every buffer's size, formed without wrapping before anything is allocated: the arguments
  // come from a caller and the config from a file.
  void CheckSizes() const {
    const Config& c = m->config;
    const std::string fn = "llama.new_state: ";
    CheckedProduct({c.num_hidden_layers, batch, m->kv_heads, max_len, c.head_dim},
                   fn + "the kv cache (num_hidden_layers x batch x kv heads x max_len x head_dim)");
    CheckedProduct({max_rows, m->heads, std::max(max_len, c.head_dim)},
                   fn + "max_rows x heads x max(max_len, head_dim) (queries and scores)");
    CheckedProduct({max_rows, std::max({m->ffn, c.hidden_size})},
                   fn + "max_rows x max(intermediate_size, hidden_size) (activations)");
    CheckedProduct({max_new, batch, m->vocab},
                   fn + "max_new_tokens x batch x vocab_size (tokens and kept logits)");
  }

  // The GPU's buffers; the host keeps the rotary tables' source and the batch's rows.
  void AllocateOnGpu(int64_t cache) {
    void* stream = disco::ThisWorkerStream();
    DISCO_CHECK(stream != nullptr, ValueError)
        << "llama.new_state: the model is on " << disco::DeviceToString(m->device)
        << ", but this worker has no GPU now (" << disco::DeviceToString(disco::ThisWorker().device)
        << ")";
    g = std::make_unique<GpuState>(stream);
    const Config& c = m->config;
    const DLDevice dev = m->device;
    const bool bf16 = m->dtype == DType::kBF16;
    const int64_t h = c.hidden_size, hd = c.head_dim, qw = m->heads * hd, kvw = m->kv_heads * hd;
    auto make = [&](int64_t n, const char* dtype) {
      return Tensor::Empty(Shape{n}, disco::DataType(dtype), dev);
    };
    auto f32 = [&](int64_t n) { return make(n, "float32"); };
    auto half = [&](int64_t n) { return bf16 ? make(n, "bfloat16") : Tensor(); };
    auto i64 = [&](int64_t n) { return make(n, "int64"); };
    g->blas = g->ops.new_blas(stream);
    g->hbuf = f32(max_rows * h);
    g->hbuf16 = half(max_rows * h);
    g->q = f32(max_rows * qw);
    g->attn = f32(max_rows * qw);
    g->attn16 = half(max_rows * qw);
    g->k = f32(max_rows * kvw);
    g->v = f32(max_rows * kvw);
    g->gate = f32(max_rows * m->ffn);
    g->gate16 = half(max_rows * m->ffn);
    g->up = f32(max_rows * m->ffn);
    g->scores = f32(max_rows * m->heads * max_len);
    g->hsel = f32(batch * h);
    g->hsel16 = half(batch * h);
    g->logits = f32(batch * m->vocab);
    g->kcache = f32(cache);
    g->vcache = f32(cache);
    g->ops.memset_async(g->kcache.data(), 0, g->kcache.nbytes(), stream);
    g->ops.memset_async(g->vcache.data(), 0, g->vcache.nbytes(), stream);
    g->cos = f32(static_cast<int64_t>(cos.size()));
    g->sin = f32(static_cast<int64_t>(sin.size()));
    g->ops.copy_async(g->cos.data(), cos.data(), g->cos.nbytes(), stream);
    g->ops.copy_async(g->sin.data(), sin.data(), g->sin.nbytes(), stream);
    g->row_seq = i64(max_rows);
    g->row_pos = i64(max_rows);
    g->row_tok = i64(max_rows);
    g->last_row = i64(batch);
    g->seq_len = i64(batch);
    g->tokens = i64(batch * max_new);
    g->ops.memset_async(g->tokens.data(), 0xFF, g->tokens.nbytes(), stream);  // -1: none yet
    if (keep_logits) {
      g->kept = f32(max_new * batch * m->vocab);
      g->ops.memset_async(g->kept.data(), 0, g->kept.nbytes(), stream);
    }
    best = Tensor::Empty(Shape{batch}, disco::DataType("int64"), dev);
    x.Allocate(max_rows, h, dev, stream);
    part.Allocate(max_rows, h, dev, stream);
    g->ops.synchronize(stream);  // the host tables above are copied before they may change
  }

  int64_t KvBytes() const {
    if (g != nullptr) return static_cast<int64_t>(g->kcache.nbytes() + g->vcache.nbytes());
    return static_cast<int64_t>((kcache.size() + vcache.size()) * sizeof(float));
  }
  float* KCache(int64_t layer, int64_t seq, int64_t kv_head) {
    return kcache.data() + ((layer * batch + seq) * m->kv_heads + kv_head) * cache_stride;
  }
  float* VCache(int64_t layer, int64_t seq, int64_t kv_head) {
    return vcache.data() + ((layer * batch + seq) * m->kv_heads + kv_head) * cache_stride;
  }

  void CheckLayer(int64_t layer, const char* fn) const {
    DISCO_CHECK(layer >= 0 && layer < m->config.num_hidden_layers, ValueError)
        << fn << ": layer " << layer << " is out of range [0, " << m->config.num_hidden_layers
        << ")";
    DISCO_CHECK(rows > 0, ValueError) << fn << ": no batch (llama.begin_prefill first)";
  }

  std::shared_ptr<Model> m;
  const int64_t batch, max_len, max_rows, max_new;
  const bool keep_logits;
  int64_t cache_stride = 0;
  std::vector<float> kcache, vcache;  // [layer][sequence][kv head][position][head_dim]
  std::vector<float> cos, sin;        // [position][head_dim / 2]
  std::vector<int64_t> seq_len;       // prompt lengths
  std::vector<int64_t> tokens;        // [sequence][step]: the generated tokens
  // The batch: its rows' sequence, position and token, and the row whose output picks each
  // sequence's next token.
  int64_t rows = 0, step = 0;
  std::vector<int64_t> row_seq, row_pos, row_tok, last_row;
  // Buffers.
  RowBuffer x, part;  // the residual stream, and the partial sums each allreduce adds to it
  std::vector<float> hbuf, q, k, v, attn, gate, up, scores, hsel, logits, kept, scratch;
  Tensor best;                  // packed (value, index) of each sequence's best token
  std::unique_ptr<GpuState> g;  // on a GPU: everything there
  int64_t head_step = -1;       // the step whose tokens llama.head made last (-1: none)
  // Slot mode (llama.begin_step): the head reads `heads` rows (last_row), the first `outs` of
  // them a listed slot's, and its tokens go to `next` (llama.next_tokens), not to `tokens`.
  bool stepping = false, next_ready = false;
  int64_t heads = 0, outs = 0;
  std::vector<int64_t> next;
  std::vector<float> temperature;  // each listed slot's (0: greedy), llama.set_sampling's
  std::vector<float> top_p;        // each listed slot's nucleus (1: the whole vocabulary)
  std::vector<uint64_t> seed;
  // Time spent in the worker functions since the last llama.reset_stats.
  double compute_s = 0, allreduce_s = 0;
  int64_t calls = 0;
};

std::shared_ptr<Model> ModelOf(const Object& o, const char* fn) {
  std::shared_ptr<Model> m = o.as<Model>();
  DISCO_CHECK(m != nullptr, TypeError)
      << fn << ": expected a llama Model (from llama.open or llama.new_model), got a "
      << o.type_name();
  return m;
}
State& StateOf(const Object& o, const char* fn) {
  std::shared_ptr<State> s = o.as<State>();
  DISCO_CHECK(s != nullptr, TypeError)
      << fn << ": expected a llama State (from llama.new_state), got a " << o.type_name();
  return *s;
}

// Times a worker function's compute and allreduce parts: on the host, the time spent in them; on
// a GPU, where the functions only queue work, the GPU's time between events recorded on the
// stream at the same points (read by llama.stats, which waits for the GPU).
class Timer {
 public:
  explicit Timer(State* s) : s_(s), t_(Now()) {
    ++s->calls;
    if (s->g != nullptr) {
      // Long runs without llama.stats or llama.reset_stats: fold, so the events stay few.
      if (s->g->segments.size() > 60000) s->g->Fold(&s->compute_s, &s->allreduce_s);
      last_ = s->g->Mark();
    }
  }
  // Everything since the last mark was compute; what follows until the next mark, allreduce.
  void StartAllReduce() { Segment(false); }
  void EndAllReduce() { Segment(true); }
  ~Timer() {
    try {
      Segment(false);
    } catch (const std::exception&) {  // a CUDA error: the function's own error says more
    }
  }

 private:
  void Segment(bool allreduce) {
    if (s_->g != nullptr) {
      void* e = s_->g->Mark();
      s_->g->segments.push_back({last_, e, allreduce});
      last_ = e;
      return;
    }
    const double t = Now();
    (allreduce ? s_->allreduce_s : s_->compute_s) += t - t_;
    t_ = t;
  }

  State* s_;
  double t_;
  void* last_ = nullptr;
};

// ---- The layers on a GPU: the same steps, queued on the worker's stream ------------------------

void GpuEmbed(State& s) {
  Timer timer(&s);
  const Model& m = *s.m;
  GpuState& g = *s.g;
  g.ops.embed(Ptr<int64_t>(g.row_tok), s.rows, m.embed, m.dtype == DType::kBF16, m.vocab_start,
              m.vocab, m.config.hidden_size, s.x.data(), g.stream);
  timer.StartAllReduce();
  s.x.AllReduce(s.rows);
  timer.EndAllReduce();
}

void GpuAttention(State& s, int64_t layer) {
  Timer timer(&s);
  const Model& m = *s.m;
  const Config& c = m.config;
  const LayerWeights& w = m.layers[layer];
  GpuState& g = *s.g;
  const bool bf16 = m.dtype == DType::kBF16;
  const int64_t h = c.hidden_size, hd = c.head_dim, rows = s.rows;
  const int64_t qw = m.heads * hd, kvw = m.kv_heads * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  g.ops.rms_norm(s.x.data(), nullptr, rows, Ptr(w.input_norm.gpu), h, eps, Ptr(g.hbuf),
                 Ptr<void>(g.hbuf16), g.stream);
  const void* in = bf16 ? g.hbuf16.data() : g.hbuf.data();
  g.ops.linear(g.blas, in, rows, h, w.q, bf16, qw, Ptr(g.q), qw);
  g.ops.linear(g.blas, in, rows, h, w.k, bf16, kvw, Ptr(g.k), kvw);
  g.ops.linear(g.blas, in, rows, h, w.v, bf16, kvw, Ptr(g.v), kvw);
  if (!w.q_bias.empty()) {
    g.ops.add_bias(Ptr(w.q_bias.gpu), Ptr(g.q), rows, qw, g.stream);
    g.ops.add_bias(Ptr(w.k_bias.gpu), Ptr(g.k), rows, kvw, g.stream);
    g.ops.add_bias(Ptr(w.v_bias.gpu), Ptr(g.v), rows, kvw, g.stream);
  }
  if (!w.q_norm.empty()) {  // every head of q and k normalized in place, before the rotation
    g.ops.rms_norm(Ptr(g.q), nullptr, rows * m.heads, Ptr(w.q_norm.gpu), hd, eps, Ptr(g.q), nullptr,
                   g.stream);
    g.ops.rms_norm(Ptr(g.k), nullptr, rows * m.kv_heads, Ptr(w.k_norm.gpu), hd, eps, Ptr(g.k),
                   nullptr, g.stream);
  }
  const int64_t layer_cache = layer * s.batch * m.kv_heads * s.cache_stride;
  float* kc = Ptr(g.kcache) + layer_cache;
  float* vc = Ptr(g.vcache) + layer_cache;
  g.ops.rope_and_cache(Ptr(g.q), Ptr(g.k), Ptr(g.v), rows, Ptr<int64_t>(g.row_seq),
                       Ptr<int64_t>(g.row_pos), m.heads, m.kv_heads, hd, Ptr(g.cos), Ptr(g.sin), kc,
                       vc, s.max_len, g.stream);
  g.ops.attend(Ptr(g.q), rows, Ptr<int64_t>(g.row_seq), Ptr<int64_t>(g.row_pos), m.heads,
               m.kv_heads, hd, kc, vc, s.max_len, c.sliding_window,
               1.0f / std::sqrt(static_cast<float>(hd)), Ptr(g.scores), Ptr(g.attn),
               Ptr<void>(g.attn16), g.stream);
  g.ops.linear(g.blas, bf16 ? g.attn16.data() : g.attn.data(), rows, qw, w.o, bf16, h,
               s.part.data(), h);
  timer.StartAllReduce();
  s.part.AllReduce(rows);
  timer.EndAllReduce();
  g.ops.add(s.part.data(), s.x.data(), rows * h, g.stream);
  if (!w.o_bias.empty()) g.ops.add_bias(Ptr(w.o_bias.gpu), s.x.data(), rows, h, g.stream);
}

void GpuMlp(State& s, int64_t layer) {
  Timer timer(&s);
  const Model& m = *s.m;
  const Config& c = m.config;
  const LayerWeights& w = m.layers[layer];
  GpuState& g = *s.g;
  const bool bf16 = m.dtype == DType::kBF16;
  const int64_t h = c.hidden_size, f = m.ffn, rows = s.rows;
  g.ops.rms_norm(s.x.data(), nullptr, rows, Ptr(w.post_norm.gpu), h,
                 static_cast<float>(c.rms_norm_eps), Ptr(g.hbuf), Ptr<void>(g.hbuf16), g.stream);
  const void* in = bf16 ? g.hbuf16.data() : g.hbuf.data();
  g.ops.linear(g.blas, in, rows, h, w.gate, bf16, f, Ptr(g.gate), f);
  g.ops.linear(g.blas, in, rows, h, w.up, bf16, f, Ptr(g.up), f);
  if (!w.gate_bias.empty()) {
    g.ops.add_bias(Ptr(w.gate_bias.gpu), Ptr(g.gate), rows, f, g.stream);
    g.ops.add_bias(Ptr(w.up_bias.gpu), Ptr(g.up), rows, f, g.stream);
  }
  g.ops.silu_mul(Ptr(g.gate), Ptr(g.up), Ptr(g.gate), Ptr<void>(g.gate16), rows * f, g.stream);
  g.ops.linear(g.blas, bf16 ? g.gate16.data() : g.gate.data(), rows, f, w.down, bf16, h,
               s.part.data(), h);
  timer.StartAllReduce();
  s.part.AllReduce(rows);
  timer.EndAllReduce();
  g.ops.add(s.part.data(), s.x.data(), rows * h, g.stream);
  if (!w.down_bias.empty()) g.ops.add_bias(Ptr(w.down_bias.gpu), s.x.data(), rows, h, g.stream);
}

void GpuHead(State& s) {
  Timer timer(&s);
  const Model& m = *s.m;
  const Config& c = m.config;
  GpuState& g = *s.g;
  const bool bf16 = m.dtype == DType::kBF16;
  const int64_t h = c.hidden_size, b = s.heads, vl = m.vocab;
  g.ops.rms_norm(s.x.data(), Ptr<int64_t>(g.last_row), b, Ptr(m.final_norm.gpu), h,
                 static_cast<float>(c.rms_norm_eps), Ptr(g.hsel), Ptr<void>(g.hsel16), g.stream);
  g.ops.linear(g.blas, bf16 ? g.hsel16.data() : g.hsel.data(), b, h, m.lm_head, bf16, vl,
               Ptr(g.logits), vl);
  g.ops.argmax_packed(Ptr(g.logits), b, vl, m.vocab_start, Ptr<int64_t>(s.best), g.stream);
  if (s.keep_logits) {  // slot mode: the step's listed slots, at the start
    g.ops.copy_async(Ptr(g.kept) + s.step * b * vl, Ptr(g.logits),
                     static_cast<size_t>((s.stepping ? s.outs : b) * vl) * sizeof(float), g.stream);
  }
  timer.StartAllReduce();
  disco::AllReduceInFunction(s.best, disco::ReduceOp::kMax);
  timer.EndAllReduce();
  if (s.stepping) return;  // llama.next_tokens reads s.best
  g.ops.store_tokens(Ptr<int64_t>(s.best), b, s.max_new, s.step, Ptr<int64_t>(g.tokens), g.stream);
}

// ---- The layers ---------------------------------------------------------------------------------

void Embed(State& s) {
  if (s.g != nullptr) return GpuEmbed(s);
  Timer timer(&s);
  const Model& m = *s.m;
  const int64_t h = m.config.hidden_size;
  float* x = s.x.data();
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t local = s.row_tok[r] - m.vocab_start;
    if (local >= 0 && local < m.vocab) {
      const char* row = static_cast<const char*>(m.embed) + local * h * DTypeSize(m.dtype);
      ConvertElements(m.dtype, row, h, DType::kF32, x + r * h);
    } else {
      std::memset(x + r * h, 0, static_cast<size_t>(h) * sizeof(float));
    }
  }
  timer.StartAllReduce();
  s.x.AllReduce(s.rows);
  timer.EndAllReduce();
}

// The attention of one row, for the `rep` query heads that share one kv head: softmax(q K^T *
// scale) V over positions 0..pos of the row's sequence (with a sliding window, the positions
// > pos - sliding_window only).
void AttendRow(State& s, const float* q, int64_t rep, const float* kc, const float* vc, int64_t pos,
               float* out) {
  const int64_t hd = s.m->config.head_dim, window = s.m->config.sliding_window;
  const int64_t first = window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0;
  Attend(q, rep, kc + first * hd, vc + first * hd, pos + 1 - first, hd,
         1.0f / std::sqrt(static_cast<float>(hd)), s.scores.data(), out);
}

void Attention(State& s, int64_t layer) {
  s.CheckLayer(layer, "llama.attention");
  if (s.g != nullptr) return GpuAttention(s, layer);
  Timer timer(&s);
  const Model& m = *s.m;
  const Config& c = m.config;
  const LayerWeights& w = m.layers[layer];
  const WeightFormat wf = m.Format();
  const int64_t h = c.hidden_size, hd = c.head_dim, rows = s.rows;
  const int64_t qw = m.heads * hd, kvw = m.kv_heads * hd, rep = m.heads / m.kv_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = s.x.data();
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(x + r * h, w.input_norm.host.data(), h, eps, s.hbuf.data() + r * h);
  }
  Linear(s.hbuf.data(), rows, h, w.q, wf, qw, s.q.data(), qw, &s.scratch);
  Linear(s.hbuf.data(), rows, h, w.k, wf, kvw, s.k.data(), kvw, &s.scratch);
  Linear(s.hbuf.data(), rows, h, w.v, wf, kvw, s.v.data(), kvw, &s.scratch);
  if (!w.q_bias.empty()) {
    AddBias(w.q_bias.host.data(), s.q.data(), rows, qw);
    AddBias(w.k_bias.host.data(), s.k.data(), rows, kvw);
    AddBias(w.v_bias.host.data(), s.v.data(), rows, kvw);
  }
  if (!w.q_norm.empty()) {  // every head of q and k normalized in place, before the rotation
    for (int64_t i = 0; i < rows * m.heads; ++i) {
      RmsNorm(s.q.data() + i * hd, w.q_norm.host.data(), hd, eps, s.q.data() + i * hd);
    }
    for (int64_t i = 0; i < rows * m.kv_heads; ++i) {
      RmsNorm(s.k.data() + i * hd, w.k_norm.host.data(), hd, eps, s.k.data() + i * hd);
    }
  }
  // Rotary embedding, then every row's key and value into the cache at its position.
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = s.row_pos[r], seq = s.row_seq[r];
    Rope(s.q.data() + r * qw, m.heads, hd, s.cos.data() + pos * half, s.sin.data() + pos * half);
    Rope(s.k.data() + r * kvw, m.kv_heads, hd, s.cos.data() + pos * half,
         s.sin.data() + pos * half);
    for (int64_t g = 0; g < m.kv_heads; ++g) {
      std::memcpy(s.KCache(layer, seq, g) + pos * hd, s.k.data() + r * kvw + g * hd,
                  static_cast<size_t>(hd) * sizeof(float));
      std::memcpy(s.VCache(layer, seq, g) + pos * hd, s.v.data() + r * kvw + g * hd,
                  static_cast<size_t>(hd) * sizeof(float));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = s.row_pos[r], seq = s.row_seq[r];
    for (int64_t g = 0; g < m.kv_heads; ++g) {
      AttendRow(s, s.q.data() + r * qw + g * rep * hd, rep, s.KCache(layer, seq, g),
                s.VCache(layer, seq, g), pos, s.attn.data() + r * qw + g * rep * hd);
    }
  }
  Linear(s.attn.data(), rows, qw, w.o, wf, h, s.part.data(), h, &s.scratch);
  timer.StartAllReduce();
  s.part.AllReduce(rows);
  timer.EndAllReduce();
  Add(s.part.data(), x, rows * h);
  if (!w.o_bias.empty()) AddBias(w.o_bias.host.data(), x, rows, h);  // once: after the sum
}

void Mlp(State& s, int64_t layer) {
  s.CheckLayer(layer, "llama.mlp");
  if (s.g != nullptr) return GpuMlp(s, layer);
  Timer timer(&s);
  const Model& m = *s.m;
  const Config& c = m.config;
  const LayerWeights& w = m.layers[layer];
  const WeightFormat wf = m.Format();
  const int64_t h = c.hidden_size, f = m.ffn, rows = s.rows;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = s.x.data();
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(x + r * h, w.post_norm.host.data(), h, eps, s.hbuf.data() + r * h);
  }
  Linear(s.hbuf.data(), rows, h, w.gate, wf, f, s.gate.data(), f, &s.scratch);
  Linear(s.hbuf.data(), rows, h, w.up, wf, f, s.up.data(), f, &s.scratch);
  if (!w.gate_bias.empty()) {
    AddBias(w.gate_bias.host.data(), s.gate.data(), rows, f);
    AddBias(w.up_bias.host.data(), s.up.data(), rows, f);
  }
  SiluMul(s.gate.data(), s.up.data(), s.gate.data(), rows * f);
  Linear(s.gate.data(), rows, f, w.down, wf, h, s.part.data(), h, &s.scratch);
  timer.StartAllReduce();
  s.part.AllReduce(rows);
  timer.EndAllReduce();
  Add(s.part.data(), x, rows * h);
  if (!w.down_bias.empty()) AddBias(w.down_bias.host.data(), x, rows, h);  // once: after the sum
}

// The nucleus floors of the step's listed slots with top_p < 1 (else -inf): every rank's slice of
// their logits, in zeros elsewhere, summed by an allreduce, so that every rank finds the same
// floor from the whole vocabulary. Every rank takes this path or none: llama.set_sampling's
// inputs are the same on all.
std::vector<float> NucleusFloors(State& s, Timer* timer) {
  const Model& m = *s.m;
  const int64_t vl = m.vocab, v = m.config.vocab_size;
  std::vector<float> floors(static_cast<size_t>(s.heads), -std::numeric_limits<float>::infinity());
  std::vector<int64_t> rows;
  for (int64_t i = 0; s.stepping && i < s.outs; ++i) {
    if (s.temperature[i] > 0 && s.top_p[i] < 1) rows.push_back(i);
  }
  if (rows.empty()) return floors;
  Tensor all =
      Tensor::Empty(Shape{static_cast<int64_t>(rows.size()), v}, disco::DataType("float32"));
  float* a = all.data_as<float>();
  std::fill(a, a + all.numel(), 0.0f);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(a + static_cast<int64_t>(r) * v + m.vocab_start, s.logits.data() + rows[r] * vl,
                static_cast<size_t>(vl) * sizeof(float));
  }
  timer->StartAllReduce();
  disco::AllReduceInFunction(all, disco::ReduceOp::kSum);
  timer->EndAllReduce();
  for (size_t r = 0; r < rows.size(); ++r) {
    floors[rows[r]] =
        NucleusFloor(a + static_cast<int64_t>(r) * v, v, s.temperature[rows[r]], s.top_p[rows[r]]);
  }
  return floors;
}

void Head(State& s) {
  DISCO_CHECK(s.rows > 0, ValueError) << "llama.head: no batch (llama.begin_prefill first)";
  s.head_step = s.step;
  s.next_ready = s.stepping;
  if (s.g != nullptr) return GpuHead(s);
  Timer timer(&s);
  const Model& m = *s.m;
  const Config& c = m.config;
  const int64_t h = c.hidden_size, b = s.heads, vl = m.vocab;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float* x = s.x.data();
  for (int64_t i = 0; i < b; ++i) {
    RmsNorm(x + s.last_row[i] * h, m.final_norm.host.data(), h, eps, s.hsel.data() + i * h);
  }
  Linear(s.hsel.data(), b, h, m.lm_head, m.Format(), vl, s.logits.data(), vl, &s.scratch);
  auto* best = s.best.data_as<int64_t>();
  const std::vector<float> floors = NucleusFloors(s, &timer);
  for (int64_t i = 0; i < b; ++i) {
    const float* row = s.logits.data() + i * vl;
    if (s.stepping && i < s.outs && s.temperature[i] > 0) {
      best[i] = SampleBest(row, m.vocab_start, vl, s.temperature[i], s.seed[i],
                           s.row_pos[s.last_row[i]], floors[i]);
      continue;
    }
    int64_t arg = 0;
    for (int64_t j = 1; j < vl; ++j) {
      if (row[j] > row[arg]) arg = j;
    }
    best[i] = PackBest(row[arg], m.vocab_start + arg);
  }
  if (s.keep_logits) {  // slot mode: the step's listed slots, at the start
    std::memcpy(s.kept.data() + s.step * b * vl, s.logits.data(),
                static_cast<size_t>((s.stepping ? s.outs : b) * vl) * sizeof(float));
  }
  timer.StartAllReduce();
  disco::AllReduceInFunction(s.best, disco::ReduceOp::kMax);
  timer.EndAllReduce();
  if (s.stepping) {
    for (int64_t i = 0; i < s.outs; ++i) s.next[i] = UnpackIndex(best[i]);
    return;
  }
  for (int64_t i = 0; i < b; ++i) s.tokens[i * s.max_new + s.step] = UnpackIndex(best[i]);
}

// A list of integers given as an int64 or int32 host tensor (any shape, flattened) or a Shape
// (a tuple of ints from Python; a Shape crosses the wire with at most 64 entries, so prompts go as
// tensors).
std::vector<int64_t> IntList(const disco::Any& a, const char* fn, const char* what) {
  if (std::optional<Shape> shape = a.as<Shape>()) return shape->dims();
  std::optional<Tensor> t = a.as<Tensor>();
  DISCO_CHECK(t && t->device().device_type == kDLCPU && t->dtype().code == kDLInt &&
                  (t->dtype().bits == 64 || t->dtype().bits == 32),
              TypeError)
      << fn << ": '" << what << "' must be an int64 or int32 host tensor (or a Shape), not a "
      << a.type_name();
  std::vector<int64_t> out(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) {
    out[i] = t->dtype().bits == 64 ? t->data_as<int64_t>()[i] : t->data_as<int32_t>()[i];
  }
  return out;
}

void BeginPrefill(State& s, const std::vector<int64_t>& tokens,
                  const std::vector<int64_t>& lengths) {
  const Config& c = s.m->config;
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  DISCO_CHECK(static_cast<int64_t>(lengths.size()) == s.batch, ValueError)
      << "llama.begin_prefill: " << lengths.size() << " prompt lengths for a batch of " << s.batch;
  int64_t total = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = lengths[b];
    DISCO_CHECK(len >= 1, ValueError) << "llama.begin_prefill: prompt " << b << " is empty";
    DISCO_CHECK(len + s.max_new - 1 <= s.max_len, ValueError)
        << "llama.begin_prefill: prompt " << b << " has " << len << " tokens; with " << s.max_new
        << " new tokens it needs " << len + s.max_new - 1 << " positions, but the KV cache holds "
        << s.max_len;
    total += len;
  }
  DISCO_CHECK(total == num_tokens && total <= s.max_rows, ValueError)
      << "llama.begin_prefill: " << num_tokens << " tokens for prompts of " << total
      << " in all (at most " << s.max_rows << ", llama.new_state's max_rows)";
  int64_t r = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    s.seq_len[b] = lengths[b];
    for (int64_t p = 0; p < lengths[b]; ++p, ++r) {
      const int64_t tok = tokens[r];
      DISCO_CHECK(tok >= 0 && tok < c.vocab_size, ValueError)
          << "llama.begin_prefill: token " << tok << " of prompt " << b
          << " is outside the vocabulary [0, " << c.vocab_size << ")";
      s.row_seq[r] = b;
      s.row_pos[r] = p;
      s.row_tok[r] = tok;
    }
    s.last_row[b] = r - 1;
  }
  s.rows = total;
  s.step = 0;
  s.head_step = -1;
  s.stepping = s.next_ready = false;
  s.heads = s.batch;
  std::fill(s.tokens.begin(), s.tokens.end(), -1);
  if (s.g != nullptr) {
    GpuState& g = *s.g;
    auto up = [&](const Tensor& dst, const std::vector<int64_t>& src, int64_t n) {
      g.ops.copy_async(dst.data(), src.data(), static_cast<size_t>(n) * sizeof(int64_t), g.stream);
    };
    up(g.row_seq, s.row_seq, total);
    up(g.row_pos, s.row_pos, total);
    up(g.row_tok, s.row_tok, total);
    up(g.last_row, s.last_row, s.batch);
    up(g.seq_len, s.seq_len, s.batch);
    g.ops.memset_async(g.tokens.data(), 0xFF, g.tokens.nbytes(), g.stream);
  }
}

void BeginDecode(State& s, int64_t step) {
  DISCO_CHECK(step >= 1 && step < s.max_new, ValueError)
      << "llama.begin_decode: step " << step << " is outside [1, " << s.max_new << ")";
  DISCO_CHECK(!s.stepping, ValueError)
      << "llama.begin_decode: the state runs slots (llama.begin_step); llama.begin_prefill first";
  DISCO_CHECK(s.batch <= s.max_rows, ValueError)
      << "llama.begin_decode: a step of the batch's " << s.batch << " rows; the state holds "
      << s.max_rows << " (llama.new_state's max_rows)";
  DISCO_CHECK(s.head_step == step - 1 || (s.g == nullptr && s.tokens[step - 1] >= 0), ValueError)
      << "llama.begin_decode: step " << step << " needs the token of step " << step - 1
      << " (llama.head) first";
  if (s.g != nullptr) {
    GpuState& g = *s.g;
    g.ops.decode_rows(Ptr<int64_t>(g.tokens), Ptr<int64_t>(g.seq_len), s.batch, s.max_new, step,
                      Ptr<int64_t>(g.row_seq), Ptr<int64_t>(g.row_pos), Ptr<int64_t>(g.row_tok),
                      Ptr<int64_t>(g.last_row), g.stream);
    s.rows = s.batch;
    s.step = step;
    return;
  }
  for (int64_t b = 0; b < s.batch; ++b) {
    s.row_seq[b] = b;
    s.row_pos[b] = s.seq_len[b] + step - 1;
    s.row_tok[b] = s.tokens[b * s.max_new + step - 1];
    s.last_row[b] = b;
  }
  s.rows = s.batch;
  s.step = step;
}

// The rows of one step in slot mode: entry j advances slot slots[j] by counts[j] tokens (its
// part of `tokens`, in order) from position positions[j]. Checked whole before anything changes.
void CheckStep(const State& s, const std::vector<int64_t>& slots,
               const std::vector<int64_t>& positions, const std::vector<int64_t>& counts,
               const std::vector<int64_t>& tokens) {
  const char* fn = "llama.begin_step: ";
  const size_t n = slots.size();
  DISCO_CHECK(
      n >= 1 && n <= static_cast<size_t>(s.batch) && positions.size() == n && counts.size() == n,
      ValueError)
      << fn << slots.size() << " slots, " << positions.size() << " positions and " << counts.size()
      << " counts: one of each per slot, 1 to " << s.batch << " slots";
  std::vector<bool> seen(static_cast<size_t>(s.batch), false);
  int64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    const int64_t slot = slots[j], pos = positions[j], count = counts[j];
    DISCO_CHECK(slot >= 0 && slot < s.batch && !seen[slot], ValueError)
        << fn << "slot " << slot << " is outside [0, " << s.batch << ") or listed twice";
    seen[slot] = true;
    DISCO_CHECK(count >= 1 && count <= s.max_rows, ValueError)
        << fn << "slot " << slot << ": " << count << " tokens (1 to max_rows, " << s.max_rows
        << ", a step)";
    DISCO_CHECK(pos >= 0 && pos <= s.max_len - count, ValueError)
        << fn << "slot " << slot << ": " << count << " tokens from position " << pos
        << " (the KV cache holds positions [0, " << s.max_len << "))";
    total += count;
  }
  DISCO_CHECK(total == static_cast<int64_t>(tokens.size()) && total <= s.max_rows, ValueError)
      << fn << tokens.size() << " tokens for counts of " << total << " in all (at most "
      << s.max_rows << " a step, llama.new_state's max_rows)";
  for (int64_t tok : tokens) {
    DISCO_CHECK(tok >= 0 && tok < s.m->config.vocab_size, ValueError)
        << fn << "token " << tok << " is outside the vocabulary [0, " << s.m->config.vocab_size
        << ")";
  }
}

// Slot mode: the KV cache's sequences are slots, each at a position of its own; a step advances
// the listed slots (a new prompt's chunk, or a decoding slot's last token) and the head picks
// each listed slot's next token from its last row. One row alone is doubled (the copy writes the
// same key and value to the same place), and so is one head row when the state has room: the
// CPU's one-row products round differently from the batched ones, and a slot's tokens must not
// depend on what else is in the step.
void BeginStep(State& s, const std::vector<int64_t>& slots, const std::vector<int64_t>& positions,
               const std::vector<int64_t>& counts, const std::vector<int64_t>& tokens) {
  CheckStep(s, slots, positions, counts, tokens);
  const int64_t n = static_cast<int64_t>(slots.size());
  int64_t r = 0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < counts[j]; ++i, ++r) {
      s.row_seq[r] = slots[j];
      s.row_pos[r] = positions[j] + i;
      s.row_tok[r] = tokens[r];
    }
    s.last_row[j] = r - 1;
  }
  s.rows = r;
  if (r == 1 && s.max_rows >= 2) {
    s.row_seq[1] = s.row_seq[0], s.row_pos[1] = s.row_pos[0], s.row_tok[1] = s.row_tok[0];
    s.rows = 2;
  }
  s.outs = n;
  s.heads = n;
  std::fill(s.temperature.begin(), s.temperature.end(), 0.0f);
  std::fill(s.top_p.begin(), s.top_p.end(), 1.0f);
  if (n == 1 && s.batch >= 2) s.last_row[1] = s.last_row[0], s.heads = 2;
  s.stepping = true;
  s.next_ready = false;
  s.step = 0;
  s.head_step = -1;
  if (s.g != nullptr) {
    GpuState& g = *s.g;
    auto up = [&](const Tensor& dst, const std::vector<int64_t>& src, int64_t count) {
      g.ops.copy_async(dst.data(), src.data(), static_cast<size_t>(count) * sizeof(int64_t),
                       g.stream);
    };
    up(g.row_seq, s.row_seq, s.rows);
    up(g.row_pos, s.row_pos, s.rows);
    up(g.row_tok, s.row_tok, s.rows);
    up(g.last_row, s.last_row, s.heads);
  }
}

// Sampling for the step begun last: each listed slot's temperature (0: greedy), seed and top_p.
void SetSampling(State& s, const Tensor& temperatures, const std::vector<int64_t>& seeds,
                 const Tensor& top_ps) {
  const char* fn = "llama.set_sampling: ";
  DISCO_CHECK(s.stepping && !s.next_ready, ValueError)
      << fn << "no step begun (llama.begin_step first)";
  auto floats = [&](const Tensor& t) {
    return t.device().device_type == kDLCPU && t.dtype().code == kDLFloat && t.dtype().bits == 32 &&
           t.numel() == s.outs;
  };
  DISCO_CHECK(
      floats(temperatures) && floats(top_ps) && static_cast<int64_t>(seeds.size()) == s.outs,
      ValueError)
      << fn << "float32 host tensors of temperatures and top_ps and one of seeds, one each per "
      << "slot of the step (" << s.outs << "), not " << temperatures.ToString() << ", "
      << top_ps.ToString() << " and " << seeds.size();
  for (int64_t j = 0; j < s.outs; ++j) {
    const float t = temperatures.data_as<float>()[j], p = top_ps.data_as<float>()[j];
    DISCO_CHECK(std::isfinite(t) && t >= 0, ValueError)
        << fn << "temperature " << t << " of slot " << s.row_seq[s.last_row[j]]
        << " is not a finite number >= 0";
    DISCO_CHECK(p > 0 && p <= 1, ValueError)
        << fn << "top_p " << p << " of slot " << s.row_seq[s.last_row[j]] << " is not in (0, 1]";
    DISCO_CHECK(t == 0 || s.g == nullptr, ValueError)
        << fn << "sampling runs on the host decoder only (this model is on "
        << disco::DeviceToString(s.m->device) << ")";
    s.temperature[j] = t;
    s.top_p[j] = p;
    s.seed[j] = static_cast<uint64_t>(seeds[j]);
  }
}

// The tokens the last step picked, one per listed slot, in its order.
Tensor NextTokens(State& s) {
  DISCO_CHECK(s.stepping && s.next_ready, ValueError)
      << "llama.next_tokens: no step has reached llama.head (llama.begin_step, the layers, "
      << "llama.head first)";
  Tensor t = Tensor::Empty(Shape{s.outs}, disco::DataType("int64"));
  auto* out = t.data_as<int64_t>();
  if (s.g == nullptr) {
    std::copy(s.next.begin(), s.next.begin() + s.outs, out);
    return t;
  }
  Tensor best = Tensor::Empty(Shape{s.batch}, disco::DataType("int64"));
  best.CopyFrom(s.best);  // waits for the GPU
  for (int64_t i = 0; i < s.outs; ++i) out[i] = UnpackIndex(best.data_as<int64_t>()[i]);
  return t;
}

// ---- Registration -------------------------------------------------------------------------------

// A host tensor of `shape` with the state's copy: from the GPU when it lives there, else `host`.
Tensor HostCopy(const Shape& shape, const char* dtype, const void* host, const Tensor* gpu) {
  Tensor t = Tensor::Empty(shape, disco::DataType(dtype));
  if (gpu != nullptr) {
    t.CopyFrom(*gpu);
  } else {
    std::memcpy(t.data(), host, t.nbytes());
  }
  return t;
}

const char* const kNames[] = {
    "llama.open",       "llama.new_model",    "llama.set_weight",    "llama.weight",
    "llama.config",     "llama.new_state",    "llama.begin_prefill", "llama.begin_decode",
    "llama.begin_step", "llama.set_sampling", "llama.embed",         "llama.attention",
    "llama.mlp",        "llama.head",         "llama.tokens",        "llama.next_tokens",
    "llama.logits",     "llama.reset_stats",  "llama.stats",         "llama.weight_plan"};

DISCO_REGISTER_GLOBAL("llama.open")
    .set_body_typed(
        [](std::string path, std::string dtype) {
          const disco::WorkerInfo& w = disco::ThisWorker();
          const RunDType dt = ParseRunDType(dtype);
          Checkpoint ck = Checkpoint::Open(path);
          ck.config().CheckSplit(w.num_workers);
          ck.CheckWeights();
          auto m = std::make_shared<Model>(ck.config(), dt, w.worker_id, w.num_workers, w.device);
          m->LoadFrom(ck);
          m->Finalize();
          return Object::Make(m, "llama.Model");
        },
        {"path", "dtype"});

DISCO_REGISTER_GLOBAL("llama.new_model")
    .set_body_typed(
        [](std::string config_json, std::string dtype) {
          const disco::WorkerInfo& w = disco::ThisWorker();
          const RunDType dt = ParseRunDType(dtype);
          Config c = Config::FromText(config_json, "llama.new_model: the config");
          return Object::Make(std::make_shared<Model>(c, dt, w.worker_id, w.num_workers, w.device),
                              "llama.Model");
        },
        {"config_json", "dtype"});

DISCO_REGISTER_GLOBAL("llama.set_weight")
    .set_body_typed(
        [](Object model, std::string name, Tensor shard) {
          std::shared_ptr<Model> m = ModelOf(model, "llama.set_weight");
          DISCO_CHECK(!m->finalized, ValueError)
              << "llama.set_weight: the model is in use (llama.new_state) and cannot change";
          m->SetWeight(name, shard);
        },
        {"model", "name", "shard"});

DISCO_REGISTER_GLOBAL("llama.weight")
    .set_body_typed(
        [](Object model, std::string name) {
          std::shared_ptr<Model> m = ModelOf(model, "llama.weight");
          m->Spec(name);
          auto it = m->weights.find(name);
          DISCO_CHECK(it != m->weights.end(), ValueError)
              << "llama.weight: '" << name << "' was never loaded";
          DISCO_CHECK(!(m->q8 && m->finalized && it->second.dtype().code == kDLUInt), ValueError)
              << "llama.weight: '" << name << "' is stored as int8 blocks (dtype int8); load the "
              << "model as float32 or bfloat16 to read it";
          return it->second;
        },
        {"model", "name"});

DISCO_REGISTER_GLOBAL("llama.config")
    .set_body_typed([](Object model) { return ModelOf(model, "llama.config")->config.ToJson(); },
                    {"model"});

// Every weight the model reads and its split, as JSON {"name": axis, ...} in checkpoint order (axis
// 0: by rows, 1: by columns, -1: whole): what a controller loads from a file of its own (HDF5).
DISCO_REGISTER_GLOBAL("llama.weight_plan")
    .set_body_typed(
        [](Object model) {
          std::shared_ptr<Model> m = ModelOf(model, "llama.weight_plan");
          std::string out = "{";
          for (const WeightSpec& w : WeightSpecs(m->config)) {
            const int axis = w.split == Split::kRows ? 0 : w.split == Split::kColumns ? 1 : -1;
            out += (out.size() > 1 ? ", \"" : "\"") + w.name + "\": " + std::to_string(axis);
          }
          return out + "}";
        },
        {"model"});

DISCO_REGISTER_GLOBAL("llama.new_state")
    .set_body_typed(
        [](Object model, int64_t batch, int64_t max_len, int64_t max_rows, int64_t max_new,
           bool keep_logits) {
          std::shared_ptr<Model> m = ModelOf(model, "llama.new_state");
          if (!m->finalized) m->Finalize();
          return Object::Make(
              std::make_shared<State>(m, batch, max_len, max_rows, max_new, keep_logits),
              "llama.State");
        },
        {"model", "batch", "max_len", "max_rows", "max_new_tokens", "keep_logits"});

DISCO_REGISTER_GLOBAL("llama.begin_prefill")
    .set_body_typed(
        [](Object state, disco::Any tokens, disco::Any lengths) {
          const char* fn = "llama.begin_prefill";
          BeginPrefill(StateOf(state, fn), IntList(tokens, fn, "tokens"),
                       IntList(lengths, fn, "lengths"));
        },
        {"state", "tokens", "lengths"});

DISCO_REGISTER_GLOBAL("llama.begin_decode")
    .set_body_typed([](Object state,
                       int64_t step) { BeginDecode(StateOf(state, "llama.begin_decode"), step); },
                    {"state", "step"});

DISCO_REGISTER_GLOBAL("llama.begin_step")
    .set_body_typed(
        [](Object state, disco::Any slots, disco::Any positions, disco::Any counts,
           disco::Any tokens) {
          const char* fn = "llama.begin_step";
          BeginStep(StateOf(state, fn), IntList(slots, fn, "slots"),
                    IntList(positions, fn, "positions"), IntList(counts, fn, "counts"),
                    IntList(tokens, fn, "tokens"));
        },
        {"state", "slots", "positions", "counts", "tokens"});

DISCO_REGISTER_GLOBAL("llama.set_sampling")
    .set_body_typed(
        [](Object state, Tensor temperatures, disco::Any seeds, Tensor top_ps) {
          const char* fn = "llama.set_sampling";
          SetSampling(StateOf(state, fn), temperatures, IntList(seeds, fn, "seeds"), top_ps);
        },
        {"state", "temperatures", "seeds", "top_ps"});

DISCO_REGISTER_GLOBAL("llama.next_tokens")
    .set_body_typed([](Object state) { return NextTokens(StateOf(state, "llama.next_tokens")); },
                    {"state"});

DISCO_REGISTER_GLOBAL("llama.embed")
    .set_body_typed([](Object state) { Embed(StateOf(state, "llama.embed")); }, {"state"})
    .mark_collective();

DISCO_REGISTER_GLOBAL("llama.attention")
    .set_body_typed([](Object state,
                       int64_t layer) { Attention(StateOf(state, "llama.attention"), layer); },
                    {"state", "layer"})
    .mark_collective();

DISCO_REGISTER_GLOBAL("llama.mlp")
    .set_body_typed([](Object state, int64_t layer) { Mlp(StateOf(state, "llama.mlp"), layer); },
                    {"state", "layer"})
    .mark_collective();

DISCO_REGISTER_GLOBAL("llama.head")
    .set_body_typed([](Object state) { Head(StateOf(state, "llama.head")); }, {"state"})
    .mark_collective();

DISCO_REGISTER_GLOBAL("llama.tokens")
    .set_body_typed(
        [](Object state) {
          State& s = StateOf(state, "llama.tokens");
          return HostCopy(Shape{s.batch, s.max_new}, "int64", s.tokens.data(),
                          s.g != nullptr ? &s.g->tokens : nullptr);
        },
        {"state"});

DISCO_REGISTER_GLOBAL("llama.logits")
    .set_body_typed(
        [](Object state) {
          State& s = StateOf(state, "llama.logits");
          DISCO_CHECK(s.keep_logits, ValueError)
              << "llama.logits: the state keeps no logits (llama.new_state with keep_logits)";
          return HostCopy(Shape{s.max_new, s.batch, s.m->vocab}, "float32", s.kept.data(),
                          s.g != nullptr ? &s.g->kept : nullptr);
        },
        {"state"});

DISCO_REGISTER_GLOBAL("llama.reset_stats")
    .set_body_typed(
        [](Object state) {
          State& s = StateOf(state, "llama.reset_stats");
          if (s.g != nullptr) {
            s.g->segments.clear();
            s.g->next_event = 0;
          }
          s.compute_s = s.allreduce_s = 0;
          s.calls = 0;
        },
        {"state"});

DISCO_REGISTER_GLOBAL("llama.stats")
    .set_body_typed(
        [](Object state) {
          State& s = StateOf(state, "llama.stats");
          if (s.g != nullptr) s.g->Fold(&s.compute_s, &s.allreduce_s);
          return Shape{static_cast<int64_t>(s.compute_s * 1e6),
                       static_cast<int64_t>(s.allreduce_s * 1e6),
                       s.calls,
                       PeakRssKib(),
                       s.m->WeightBytes(),
                       s.KvBytes(),
                       s.m->HugeBytes()};
        },
        {"state"});

}  // namespace

std::vector<std::string> WorkerFunctionNames() {
  return std::vector<std::string>(std::begin(kNames), std::end(kNames));
}

}  // namespace llama
