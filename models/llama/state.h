// The state of a generation on a rank: the State object llama.new_state makes. Its KV cache, the
// batch's rows, the buffers (on the host, or on the worker's GPU: GpuState), slot mode's
// sampling, the timing of the worker functions (Timer); the functions that begin a batch
// (prefill, a decode step, a slot step: state.cc) and the layers on a GPU (gpu_layers.cc). Private
// to libdisco_llama: model.cc's worker functions use it.
#ifndef DISCO_MODELS_LLAMA_STATE_H_
#define DISCO_MODELS_LLAMA_STATE_H_

#include <disco/any.h>
#include <disco/ccl.h>
#include <disco/error.h>
#include <disco/tensor.h>
#include <disco/worker.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llama/host_memory.h"
#include "llama/shards.h"
#include "llama/weight_arena.h"

namespace llama {

// Seconds on a steady clock.
double Now();

// A [rows, cols] tensor over the first rows of `master` (which it keeps alive): the allreduce of
// a batch smaller than the buffers moves only the batch.
disco::Tensor RowsView(const disco::Tensor& master, int64_t rows);

// A float32 buffer of [max_rows, cols] (on the host, or on a GPU with its stream) that allreduces
// its first rows.
class RowBuffer {
 public:
  void Allocate(int64_t max_rows, int64_t cols, DLDevice device = disco::CPU(),
                void* stream = nullptr) {
    master_ =
        disco::Tensor::Empty(disco::Shape{max_rows, cols}, disco::DataType("float32"), device);
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
  disco::Tensor master_;
  std::vector<std::pair<int64_t, disco::Tensor>> views_;
};

// ---- The state of a generation: KV cache, batch, buffers -----------------------------------

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
  disco::Tensor hbuf, hbuf16, q, k, v, attn, attn16, gate, gate16, up, scores, hsel, hsel16, logits;
  disco::Tensor kcache, vcache, cos, sin, kept;
  // int64: the batch's rows, each sequence's output row and prompt length, the tokens.
  disco::Tensor row_seq, row_pos, row_tok, last_row, seq_len, tokens;
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
T* Ptr(const disco::Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

class State {
 public:
  // kv16: the KV cache in float16 (new_state's kv_dtype "float16"; CPU only).
  State(std::shared_ptr<Model> model, int64_t batch, int64_t max_len, int64_t max_rows,
        int64_t max_new, bool keep_logits, bool kv16 = false)
      : m(std::move(model)),
        batch(batch),
        max_len(max_len),
        max_rows(max_rows),
        max_new(max_new),
        keep_logits(keep_logits),
        kv16(kv16) {
    DISCO_CHECK(batch >= 1 && max_len >= 1 && max_rows >= 1 && max_new >= 1, ValueError)
        << "llama.new_state: batch " << batch << ", max_len " << max_len << ", max_rows "
        << max_rows << ", max_new_tokens " << max_new << ": each must be positive";
    DISCO_CHECK(!kv16 || !m->gpu, ValueError)
        << "llama.new_state: kv_dtype 'float16' is for CPU workers; the model is on "
        << disco::DeviceToString(m->device) << ", whose kv cache is float32";
    const Config& c = m->config;
    const int64_t h = c.hidden_size, hd = c.head_dim;
    CheckSizes();
    cache_stride = max_len * hd;
    const size_t cache = static_cast<size_t>(c.num_hidden_layers * batch * m->kv_heads) *
                         static_cast<size_t>(cache_stride);
    if (!m->gpu) {
      // In 2 MiB pages, as the weights (weight_arena.h): attention at long prompts reads the
      // cache as a decode step reads the weights, and in 4 KiB pages a 1000-token prompt's
      // decode read it at half the speed.
      cache_elems = cache;
      CheckHostMemory(HostBytes(cache),
                      "llama.new_state (batch " + std::to_string(batch) + ", max_len " +
                          std::to_string(max_len) + ", max_rows " + std::to_string(max_rows) +
                          ", max_new_tokens " + std::to_string(max_new) +
                          (keep_logits ? ", logits kept" : "") + (kv16 ? ", kv float16" : "") + ")",
                      "lower them (the kv cache grows with batch x max_len, the activations "
                      "with max_rows, the kept logits with batch x max_new_tokens x vocab)");
      kv_arena = WeightArena::Make(2 * cache * KvElemBytes(), "the kv cache");
      kcache = kv_arena->data();
      vcache = kcache + cache * KvElemBytes();
      // Written now, as llama.cpp and torch clear theirs: a cache the memory cannot hold ends the
      // job here, not in the middle of a generation.
      std::memset(kcache, 0, 2 * cache * KvElemBytes());
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
    past_half.assign(static_cast<size_t>(batch), 0);
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
    best = disco::Tensor::Empty(disco::Shape{batch}, disco::DataType("int64"));
    if (keep_logits) kept.assign(static_cast<size_t>(max_new * batch * m->vocab), 0.0f);
  }

  // The bytes of every host buffer the constructor makes (a kv cache of `cache` elements for
  // keys and for values), counted before any is: what the host memory check weighs.
  size_t HostBytes(size_t cache) const {
    const Config& c = m->config;
    const double h = static_cast<double>(c.hidden_size), hd = static_cast<double>(c.head_dim);
    const double rows = static_cast<double>(max_rows), b = static_cast<double>(batch);
    const double len = static_cast<double>(max_len), vocab = static_cast<double>(m->vocab);
    const double floats =
        2.0 * static_cast<double>(cache * KvElemBytes()) / 4 + len * hd +  // kv; rotary tables
        rows * (3 * h + 2 * static_cast<double>(m->heads) * hd +
                2 * static_cast<double>(m->kv_heads) * hd + 2 * static_cast<double>(m->ffn)) +
        static_cast<double>(m->heads / m->kv_heads) * len + b * (h + vocab + 2) +
        (keep_logits ? static_cast<double>(max_new) * b * vocab : 0);
    const double int64s = b * static_cast<double>(max_new) + 3 * rows + 6 * b;
    return static_cast<size_t>(4 * floats + 8 * int64s);
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
      return disco::Tensor::Empty(disco::Shape{n}, disco::DataType(dtype), dev);
    };
    auto f32 = [&](int64_t n) { return make(n, "float32"); };
    auto half = [&](int64_t n) { return bf16 ? make(n, "bfloat16") : disco::Tensor(); };
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
    best = disco::Tensor::Empty(disco::Shape{batch}, disco::DataType("int64"), dev);
    x.Allocate(max_rows, h, dev, stream);
    part.Allocate(max_rows, h, dev, stream);
    g->ops.synchronize(stream);  // the host tables above are copied before they may change
  }

  int64_t KvBytes() const {
    if (g != nullptr) return static_cast<int64_t>(g->kcache.nbytes() + g->vcache.nbytes());
    return static_cast<int64_t>(2 * cache_elems * KvElemBytes());
  }
  size_t KvElemBytes() const { return kv16 ? 2 : 4; }
  int64_t KvHugeBytes() const { return static_cast<int64_t>(kv_arena ? kv_arena->HugeBytes() : 0); }
  // A kv head's keys (values) of one sequence in one layer: max_len rows of head_dim elements,
  // float (T = float) or float16 bits (T = uint16_t, kv16).
  template <typename T>
  T* KCache(int64_t layer, int64_t seq, int64_t kv_head) {
    return reinterpret_cast<T*>(kcache) + CacheOffset(layer, seq, kv_head);
  }
  template <typename T>
  T* VCache(int64_t layer, int64_t seq, int64_t kv_head) {
    return reinterpret_cast<T*>(vcache) + CacheOffset(layer, seq, kv_head);
  }
  int64_t CacheOffset(int64_t layer, int64_t seq, int64_t kv_head) const {
    return ((layer * batch + seq) * m->kv_heads + kv_head) * cache_stride;
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
  const bool kv16;
  int64_t cache_stride = 0;
  // [layer][sequence][kv head][position][head_dim], keys then values in one arena (host only).
  std::shared_ptr<WeightArena> kv_arena;
  char* kcache = nullptr;
  char* vcache = nullptr;
  size_t cache_elems = 0;
  std::vector<float> cos, sin;   // [position][head_dim / 2]
  std::vector<int64_t> seq_len;  // prompt lengths
  std::vector<int64_t> tokens;   // [sequence][step]: the generated tokens
  // The batch: its rows' sequence, position and token, and the row whose output picks each
  // sequence's next token.
  int64_t rows = 0, step = 0;
  std::vector<int64_t> row_seq, row_pos, row_tok, last_row;
  // Buffers.
  RowBuffer x, part;  // the residual stream, and the partial sums each allreduce adds to it
  std::vector<float> hbuf, q, k, v, attn, gate, up, scores, hsel, logits, kept, scratch;
  disco::Tensor best;           // packed (value, index) of each sequence's best token
  std::unique_ptr<GpuState> g;  // on a GPU: everything there
  int64_t head_step = -1;       // the step whose tokens llama.head made last (-1: none)
  // Slot mode (llama.begin_step): the head reads `heads` rows (last_row), the first `outs` of
  // them a listed slot's, and its tokens go to `next` (llama.next_tokens), not to `tokens`.
  bool stepping = false, next_ready = false;
  int64_t heads = 0, outs = 0;
  std::vector<int64_t> next;
  // The sequences whose cached keys or values passed float16's range, on this rank (kv16): set
  // as they are written, cleared when position 0 is written again, read by llama.head.
  std::vector<uint8_t> past_half;
  std::vector<float> temperature;  // each listed slot's (0: greedy), llama.set_sampling's
  std::vector<float> top_p;        // each listed slot's nucleus (1: the whole vocabulary)
  std::vector<uint64_t> seed;
  // Time spent in the worker functions since the last llama.reset_stats.
  double compute_s = 0, allreduce_s = 0;
  int64_t calls = 0;
};

std::shared_ptr<Model> ModelOf(const disco::Object& o, const char* fn);
State& StateOf(const disco::Object& o, const char* fn);

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

// ---- Beginning a batch (state.cc) ---------------------------------------------------------------

// A list of integers given as an int64 or int32 host tensor (any shape, flattened) or a Shape
// (a tuple of ints from Python; a Shape crosses the wire with at most 64 entries, so prompts go as
// tensors).
std::vector<int64_t> IntList(const disco::Any& a, const char* fn, const char* what);
// A prompt batch: `tokens` holds the prompts one after another, `lengths` their lengths.
void BeginPrefill(State& s, const std::vector<int64_t>& tokens,
                  const std::vector<int64_t>& lengths);
// Decode step `step` (1 ..): every sequence's last token at its next position.
void BeginDecode(State& s, int64_t step);
// Slot mode: entry j advances slot slots[j] by counts[j] of `tokens` from positions[j].
void BeginStep(State& s, const std::vector<int64_t>& slots, const std::vector<int64_t>& positions,
               const std::vector<int64_t>& counts, const std::vector<int64_t>& tokens);
// Sampling for the step begun last: each listed slot's temperature (0: greedy), seed and top_p.
void SetSampling(State& s, const disco::Tensor& temperatures, const std::vector<int64_t>& seeds,
                 const disco::Tensor& top_ps);
// The tokens the last step picked, one per listed slot, in its order.
disco::Tensor NextTokens(State& s);

// ---- The layers on a GPU (gpu_layers.cc): the same steps, queued on the worker's stream ---------

void GpuEmbed(State& s);
void GpuAttention(State& s, int64_t layer);
void GpuMlp(State& s, int64_t layer);
void GpuHead(State& s);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_STATE_H_
