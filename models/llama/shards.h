// This rank's shards of a model's weights: the Model object llama.open and llama.new_model make.
// Which rows and columns of each checkpoint tensor the rank holds (Megatron's split: config.h's
// WeightSpecs), loading them from a checkpoint or from llama.set_weight, int8 quantization (q8.h),
// the 2 MiB-page arena a decode step streams (weight_arena.h), and the pointers the layers read
// (Finalize). Private to libdisco_llama: model.cc's worker functions use it.
#ifndef DISCO_MODELS_LLAMA_SHARDS_H_
#define DISCO_MODELS_LLAMA_SHARDS_H_

#include <disco/error.h>
#include <disco/tensor.h>
#include <dlpack/dlpack.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llama/config.h"
#include "llama/cuda_kernels.h"
#include "llama/kernels.h"
#include "llama/q8.h"
#include "llama/safetensors.h"
#include "llama/weight_arena.h"

namespace llama {

// A run's dtype: the weights' storage dtype, and whether the linear layers' weights are int8
// (q8.h: "int8" keeps the embedding, norms and biases in float32).
struct RunDType {
  DType dtype;
  bool q8;
};
RunDType ParseRunDType(const std::string& s);
DLDataType ToDL(DType d);
DType FromDL(DLDataType t);

// The GPU path's functions: libdisco_llama_cuda.so, next to this library (or on the library
// path), loaded on first use.
const cuda::Ops& CudaOps();
// A host copy of a (host or device) tensor.
disco::Tensor OnHost(const disco::Tensor& t);
// A copy of host tensor `t` on `device` (itself on the host).
disco::Tensor OnDevice(const disco::Tensor& t, DLDevice device);

// A small vector of weights (a norm; a bias, this rank's shard of it): a float32 copy on the host,
// and on a GPU one there. Empty when the config has none (biases, q/k norms).
struct Floats {
  std::vector<float> host;
  disco::Tensor gpu;
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

  void SetWeight(const std::string& name, const disco::Tensor& shard) {
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
      disco::Tensor t = disco::Tensor::Empty(shard.shape(), ToDL(dtype));
      ConvertElements(from, shard.data(), shard.numel(), dtype, t.data());
      weights[name] = OnDevice(t, device);
    }
  }

  // With int8, each linear layer's float32 shard is read into one buffer and quantized into the
  // arena at once: the load holds one such shard in float32 at a time, not the whole model.
  void LoadFrom(const Checkpoint& ck) {
    if (!gpu) arena = WeightArena::Make(StreamedBytes());
    disco::Tensor staged;  // int8: the float32 shard being quantized
    for (const WeightSpec& w : WeightSpecs(config)) {
      const TensorInfo* info = ck.Find(w.name);
      DISCO_CHECK(info != nullptr, ValueError) << "tensor '" << w.name << "' is missing";
      const disco::Shape shard(ShardShape(w, ranks));
      const bool quantized = q8 && QuantizedLinear(w);
      if (quantized && (!staged.defined() || staged.numel() < shard.Numel())) {
        staged = disco::Tensor::Empty(disco::Shape{shard.Numel()}, ToDL(dtype));
      }
      disco::Tensor t = quantized ? staged
                        : arena && !q8 && Streamed(w.name)
                            ? arena->Take(shard, ToDL(dtype))
                            : disco::Tensor::Empty(shard, ToDL(dtype));
      int64_t r0, r1, c0, c1;
      Range(w, &r0, &r1, &c0, &c1);
      ck.ReadSlice(*info, r0, r1, c0, c1, dtype, t.data());
      weights[w.name] = quantized ? QuantizeShard(w, "", t.data_as<float>(), shard[0], shard[1])
                                  : OnDevice(t, device);
    }
    ck.CheckUnchanged();
  }

  // With dtype int8: every linear layer's float32 shard replaced by its int8 blocks (q8.h), and a
  // tied LM head's quantized copy of the embedding (which stays float32 for the embedding).
  // Shards LoadFrom quantized are int8 already.
  void Quantize() {
    for (const WeightSpec& w : WeightSpecs(config)) {
      auto it = weights.find(w.name);
      if (!QuantizedLinear(w) || it == weights.end() || it->second.dtype().code == kDLUInt) {
        continue;
      }
      const disco::Tensor& f = it->second;
      it->second = QuantizeShard(w, "", f.data_as<float>(), f.shape()[0], f.shape()[1]);
    }
    auto embed_it = weights.find("model.embed_tokens.weight");
    if (config.tie_word_embeddings && embed_it != weights.end()) {
      const disco::Tensor& f = embed_it->second;
      tied_head_q8 = QuantizeShard(Spec("model.embed_tokens.weight"), " (as the LM head)",
                                   f.data_as<float>(), f.shape()[0], f.shape()[1]);
    }
  }
  // Whether int8 quantizes weight `w`: the linear layers' matrices, not the embedding.
  static bool QuantizedLinear(const WeightSpec& w) {
    return w.shape.size() == 2 && w.name != "model.embed_tokens.weight";
  }
  // The Q8_0 blocks of this rank's shard of `w` (float32 rows x cols; in the arena when there is
  // one), packed for Linear. Its errors name the row and column in the full tensor.
  disco::Tensor QuantizeShard(const WeightSpec& w, const char* as, const float* f, int64_t rows,
                              int64_t cols) {
    int64_t r0, r1, c0, c1;
    Range(w, &r0, &r1, &c0, &c1);
    const disco::Shape shape{rows, q8::RowBytes(cols)};
    disco::Tensor t = arena ? arena->Take(shape, disco::DataType("uint8"))
                            : disco::Tensor::Empty(shape, disco::DataType("uint8"));
    const std::string what =
        "weight '" + w.name + "'" + as +
        (r0 == 0 && c0 == 0 ? std::string()
                            : " (this worker's shard: its row 0 is row " + std::to_string(r0) +
                                  ", its column 0 column " + std::to_string(c0) + ")");
    q8::Quantize(f, rows, cols, t.data_as<uint8_t>(), what);
    PackQ8(t.data_as<uint8_t>(), rows, cols);
    return t;
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
                         : static_cast<size_t>(disco::Shape(shard).Numel() * DTypeSize(dtype)));
    }
    return ArenaBytes(bytes);
  }
  // The host bytes this rank's weights take while LoadFrom loads them: the arena, the shards
  // outside it in the run's dtype and, with int8, the largest linear shard in float32 (LoadFrom's
  // buffer). None on a GPU, whose weights pass through the host one at a time.
  size_t HostLoadBytes() const {
    if (gpu) return 0;
    size_t bytes = StreamedBytes(), staged = 0;
    for (const WeightSpec& w : WeightSpecs(config)) {
      const auto shard = static_cast<size_t>(disco::Shape(ShardShape(w, ranks)).Numel());
      if (q8 && QuantizedLinear(w)) {
        staged = std::max(staged, shard * DTypeSize(dtype));
      } else if (q8 || !Streamed(w.name)) {
        bytes += shard * DTypeSize(dtype);
      }
    }
    return bytes + staged;
  }
  // The streamed weights given by llama.set_weight, copied into an arena in the order LoadFrom
  // would have loaded them (a model LoadFrom loaded has its arena: llama.open finalizes it at
  // once).
  void PackStreamed() {
    if (arena) return;
    std::vector<disco::Tensor*> streamed;
    for (const WeightSpec& w : WeightSpecs(config)) {
      auto it = weights.find(w.name);
      if (it != weights.end() && Streamed(w.name)) streamed.push_back(&it->second);
    }
    if (tied_head_q8.defined()) streamed.push_back(&tied_head_q8);
    std::vector<size_t> bytes;
    for (const disco::Tensor* t : streamed) bytes.push_back(t->nbytes());
    arena = WeightArena::Make(ArenaBytes(bytes));
    for (disco::Tensor* t : streamed) *t = arena->Copy(*t);
  }

  // float32 and bfloat16 on a CPU: the streamed matrices (in the arena, never a caller's tensor)
  // rearranged for the kernel (kernels.h's PackF32 and PackBf16; nothing changes where the chosen
  // kernel reads rows as given); llama.weight and a tied embedding read them through Unpacked.
  void PackPanels() {
    for (const WeightSpec& w : WeightSpecs(config)) {
      auto it = weights.find(w.name);
      if (it == weights.end() || !Streamed(w.name)) continue;
      disco::Tensor& t = it->second;
      if (dtype == DType::kBF16) {
        PackBf16(t.data_as<uint16_t>(), t.shape()[0], t.shape()[1]);
      } else {
        PackF32(t.data_as<float>(), t.shape()[0], t.shape()[1]);
      }
    }
    panels = true;
  }
  // Rows [r0, r0 + count) of the weight `name` as loaded, into out (count rows in its dtype).
  void Unpacked(const std::string& name, int64_t r0, int64_t count, void* out) const {
    const disco::Tensor& t = weights.at(name);
    if (dtype == DType::kBF16) {
      UnpackBf16(t.data_as<uint16_t>(), t.shape()[0], t.shape()[1], r0, count,
                 static_cast<uint16_t*>(out));
    } else {
      UnpackF32(t.data_as<float>(), t.shape()[0], t.shape()[1], r0, count,
                static_cast<float*>(out));
    }
  }
  bool Packed(const std::string& name) const { return panels && Streamed(name); }

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
    if (!gpu && !q8) PackPanels();
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
      disco::Tensor host = OnHost(weights[name]);
      f.host.resize(static_cast<size_t>(host.numel()));
      ConvertElements(dtype, host.data(), host.numel(), DType::kF32, f.host.data());
      if (gpu) {
        disco::Tensor t =
            disco::Tensor::Empty(disco::Shape{host.numel()}, disco::DataType("float32"));
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
  bool panels = false;  // float32 and bfloat16 on a CPU: streamed matrices as PackPanels left them
  int rank, ranks;
  DLDevice device;  // the worker's device when the model was made: CPU or its GPU
  bool gpu = false;
  int64_t heads = 0, kv_heads = 0, ffn = 0, vocab = 0, vocab_start = 0;
  std::map<std::string, WeightSpec> specs;
  std::map<std::string, disco::Tensor> weights;  // this rank's shards, by Hugging Face name
  disco::Tensor tied_head_q8;                    // q8 with tied embeddings: the LM head's int8 copy
  // On a CPU: the streamed matrices (LoadFrom and Quantize, or PackStreamed).
  std::shared_ptr<WeightArena> arena;
  std::vector<LayerWeights> layers;
  const void* embed = nullptr;
  const void* lm_head = nullptr;
  Floats final_norm;
  bool finalized = false;
};

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_SHARDS_H_
