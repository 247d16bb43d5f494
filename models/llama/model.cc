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
// The code follows the algorithm in four files: this rank's shards of the weights (shards.h:
// Model), the state of a generation and the functions that begin a batch (state.h: State), the
// layers on a GPU (gpu_layers.cc), and here the layers on the host and the worker functions. The
// parts that are not the model (the checkpoint's files, the config, the kernels, the driver) are
// files of their own beside them.
#include "llama/model.h"

#include <cblas.h>
#include <disco/any.h>
#include <disco/ccl.h>
#include <disco/error.h>
#include <disco/function.h>
#include <disco/tensor.h>
#include <disco/worker.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
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
#include "llama/host_memory.h"
#include "llama/json.h"
#include "llama/kernels.h"
#include "llama/q8.h"
#include "llama/safetensors.h"
#include "llama/sampling.h"
#include "llama/shards.h"
#include "llama/state.h"
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

// The peak resident set of this process (VmHWM), in KiB.
int64_t PeakRssKib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

// ---- The layers ---------------------------------------------------------------------------------

void Embed(State& s) {
  if (s.g != nullptr) return GpuEmbed(s);
  Timer timer(&s);
  const Model& m = *s.m;
  const int64_t h = m.config.hidden_size;
  float* x = s.x.data();
  const bool packed = m.Packed("model.embed_tokens.weight");
  std::vector<char> unpacked(packed ? static_cast<size_t>(h * DTypeSize(m.dtype)) : 0);
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t local = s.row_tok[r] - m.vocab_start;
    if (local >= 0 && local < m.vocab) {
      const char* row = static_cast<const char*>(m.embed) + local * h * DTypeSize(m.dtype);
      if (packed) {  // a tied LM head's panels
        m.Unpacked("model.embed_tokens.weight", local, 1, unpacked.data());
        row = unpacked.data();
      }
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
template <typename T>
void AttendRow(State& s, const float* q, int64_t rep, const T* kc, const T* vc, int64_t pos,
               float* out) {
  const int64_t hd = s.m->config.head_dim, window = s.m->config.sliding_window;
  const int64_t first = window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0;
  Attend(q, rep, kc + first * hd, vc + first * hd, pos + 1 - first, hd,
         1.0f / std::sqrt(static_cast<float>(hd)), s.scores.data(), out);
}

// Row r's keys and values (after the rotation) into its sequence's cache at its position. In
// float16 (kv16), the first key or value past float16's range (infinity there, NaN after) is
// described in *overflow: Attention raises it after its allreduce, which every rank must join
// (another rank's heads may all fit).
void CacheRow(State& s, int64_t layer, int64_t r, std::string* overflow) {
  const int64_t hd = s.m->config.head_dim, kvw = s.m->kv_heads * hd;
  const int64_t pos = s.row_pos[r], seq = s.row_seq[r];
  if (layer == 0 && pos == 0) s.past_half[seq] = 0;  // the sequence's cache written anew
  for (int64_t g = 0; g < s.m->kv_heads; ++g) {
    const float* k = s.k.data() + r * kvw + g * hd;
    const float* v = s.v.data() + r * kvw + g * hd;
    if (!s.kv16) {
      std::memcpy(s.KCache<float>(layer, seq, g) + pos * hd, k, static_cast<size_t>(hd) * 4);
      std::memcpy(s.VCache<float>(layer, seq, g) + pos * hd, v, static_cast<size_t>(hd) * 4);
      continue;
    }
    const bool k_fits = ToHalf(k, hd, s.KCache<uint16_t>(layer, seq, g) + pos * hd);
    const bool v_fits = ToHalf(v, hd, s.VCache<uint16_t>(layer, seq, g) + pos * hd);
    if (!k_fits || !v_fits) s.past_half[seq] = 1;
    if ((!k_fits || !v_fits) && overflow->empty()) {
      *overflow = "llama.attention: layer " + std::to_string(layer) + ", sequence " +
                  std::to_string(seq) + ", position " + std::to_string(pos) + ": a key or value " +
                  "of kv head " + std::to_string(s.m->rank * s.m->kv_heads + g) +
                  " is past float16's range (|x| >= 65520), which a float16 kv cache holds as " +
                  "infinity (a float32 one, kv_dtype 'float32', holds finite values to 3.4e38)";
    }
  }
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
  std::string overflow;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = s.row_pos[r];
    Rope(s.q.data() + r * qw, m.heads, hd, s.cos.data() + pos * half, s.sin.data() + pos * half);
    Rope(s.k.data() + r * kvw, m.kv_heads, hd, s.cos.data() + pos * half,
         s.sin.data() + pos * half);
    CacheRow(s, layer, r, &overflow);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = s.row_pos[r], seq = s.row_seq[r];
    for (int64_t g = 0; g < m.kv_heads; ++g) {
      const float* q = s.q.data() + r * qw + g * rep * hd;
      float* out = s.attn.data() + r * qw + g * rep * hd;
      if (s.kv16) {
        AttendRow(s, q, rep, s.KCache<uint16_t>(layer, seq, g), s.VCache<uint16_t>(layer, seq, g),
                  pos, out);
      } else {
        AttendRow(s, q, rep, s.KCache<float>(layer, seq, g), s.VCache<float>(layer, seq, g), pos,
                  out);
      }
    }
  }
  Linear(s.attn.data(), rows, qw, w.o, wf, h, s.part.data(), h, &s.scratch);
  timer.StartAllReduce();
  s.part.AllReduce(rows);
  timer.EndAllReduce();
  Add(s.part.data(), x, rows * h);
  if (!w.o_bias.empty()) AddBias(w.o_bias.host.data(), x, rows, h);  // once: after the sum
  // Slot mode leaves it to the head (past_half): that slot's next token is -2 while the other
  // slots of the step go on (disco-llm-server fails that request alone).
  DISCO_CHECK(overflow.empty() || s.stepping, ValueError) << overflow;
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

// Keys no finite pick packs (PackBest of a finite value stays below 0x7F800000 << 32): a
// sequence whose cached keys or values passed float16's range (known on the rank that
// holds them), and one whose row or logits are NaN or infinite (a rank's slice of the
// vocabulary). The allreduce(max) of the picks makes either every rank's.
constexpr int64_t kPastHalf = std::numeric_limits<int64_t>::max();
constexpr int64_t kNotFinite = kPastHalf - 1;

void MarkBroken(const State& s, int64_t b, int64_t vl, int64_t* best) {
  const int64_t h = s.m->config.hidden_size;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t r = s.last_row[i];
    if (s.past_half[s.row_seq[r]] != 0) {
      best[i] = kPastHalf;
      continue;
    }
    const float* xi = s.x.data() + r * h;
    const float* li = s.logits.data() + i * vl;
    bool finite = true;
    for (int64_t j = 0; j < h; ++j) finite = finite && std::isfinite(xi[j]);
    for (int64_t j = 0; j < vl; ++j) finite = finite && std::isfinite(li[j]);
    if (!finite) best[i] = kNotFinite;
  }
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
  MarkBroken(s, b, vl, best);
  if (s.keep_logits) {  // slot mode: the step's listed slots, at the start
    std::memcpy(s.kept.data() + s.step * b * vl, s.logits.data(),
                static_cast<size_t>((s.stepping ? s.outs : b) * vl) * sizeof(float));
  }
  timer.StartAllReduce();
  disco::AllReduceInFunction(s.best, disco::ReduceOp::kMax);
  timer.EndAllReduce();
  if (s.stepping) {
    for (int64_t i = 0; i < s.outs; ++i) {
      s.next[i] = best[i] == kPastHalf ? -2 : best[i] == kNotFinite ? -1 : UnpackIndex(best[i]);
    }
    return;
  }
  for (int64_t i = 0; i < b; ++i) {
    const int64_t seq = s.row_seq[s.last_row[i]], pos = s.row_pos[s.last_row[i]];
    DISCO_CHECK(best[i] != kPastHalf, ValueError)
        << "llama.head: sequence " << seq << ": a cached key or value passed float16's range "
        << "(kv_dtype 'float16'; llama.attention names where, on the rank that holds it; a "
        << "float32 kv cache holds it)";
    DISCO_CHECK(best[i] != kNotFinite, ValueError)
        << "llama.head: sequence " << seq << "'s hidden state or logits at position " << pos
        << " are NaN or infinite (the checkpoint's weights, or activations past their dtype's "
        << "range): it has no next token";
    s.tokens[i * s.max_new + s.step] = UnpackIndex(best[i]);
  }
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

// A caller's string as an error message may show it: its first 40 bytes, each outside printable
// ASCII as '?' (no NUL cuts the message short, no newline forges a line of it).
std::string Shown(const std::string& v) {
  std::string out = v.substr(0, 40);
  for (char& c : out) c = c < 0x20 || c > 0x7e ? '?' : c;
  return v.size() > 40 ? out + "... (" + std::to_string(v.size()) + " bytes)" : out;
}

// What the workers must agree on about a checkpoint: its config (parsed, so whitespace does not
// count) and each weight's dtype, shape and a few values, hashed (FNV-1a, 62 bits).
int64_t Fingerprint(const Checkpoint& ck) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const std::string& s) {
    for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ 0xFF) * 1099511628211ull;  // a separator no text byte of UTF-8 is
  };
  add(Json::Parse(ck.config_text(), "config.json").Dump());
  for (const WeightSpec& w : WeightSpecs(ck.config())) {
    const TensorInfo* t = ck.Find(w.name);
    add(w.name + " " + t->dtype_name + " " + ShapeString(t->shape));
    // And a few of its values: its first row's first and its last row's last (two small reads),
    // where a copy of other weights or an unfinished download (zeros at the end) differs.
    const int64_t rows = t->shape.size() == 2 ? t->shape[0] : 1, cols = t->shape.back();
    const int64_t k = std::min<int64_t>(4, cols);
    float v[8] = {};
    if (k > 0) {
      ck.ReadSlice(*t, 0, 1, 0, k, DType::kF32, v);
      ck.ReadSlice(*t, rows - 1, rows, cols - k, cols, DType::kF32, v + 4);
    }
    add(std::string(reinterpret_cast<const char*>(v), sizeof v));
  }
  return static_cast<int64_t>(h >> 2);
}

// Collective: whether every worker opened the same checkpoint (`fingerprint`, -1 where `failed`).
// A worker that failed rethrows its own error; the others raise one that points at it, so none
// waits in a collective after this for a worker that never comes. Workers whose checkpoint is not
// the one most opened (a relative path, another version on some node) are refused on every worker.
void AgreeOnCheckpoint(const std::exception_ptr& failed, int64_t fingerprint,
                       const std::string& what) {
  const disco::WorkerInfo& w = disco::ThisWorker();
  const int64_t n = w.num_workers;
  Tensor t = Tensor::Empty(disco::Shape{n}, disco::DataType("int64"));
  int64_t* all = t.data_as<int64_t>();
  std::fill(all, all + n, 0);
  all[w.worker_id] = failed ? -1 : fingerprint;
  if (n > 1) disco::AllReduceInFunction(t, disco::ReduceOp::kSum);
  if (failed) std::rethrow_exception(failed);
  const int64_t* bad = std::find(all, all + n, -1);
  DISCO_CHECK(bad == all + n, ValueError)
      << what << ": worker " << bad - all << " failed (its error says why)";
  // Named against the checkpoint most workers opened (worker 0's on a tie).
  int64_t common = all[0], most = 0;
  for (int64_t r = 0; r < n; ++r) {
    const auto count = std::count(all, all + n, all[r]);
    if (count > most) most = count, common = all[r];
  }
  auto workers = [&](bool same) {
    std::string list;
    int64_t count = 0;
    for (int64_t r = 0; r < n; ++r) {
      if ((all[r] == common) != same) continue;
      if (++count <= 8) list += (count == 1 ? "" : ", ") + std::to_string(r);
    }
    return (count == 1 ? "worker " : "workers ") + list + (count > 8 ? ", ..." : "");
  };
  DISCO_CHECK(most == n, ValueError)
      << what << ": the workers did not open the same checkpoint: " << workers(false)
      << " found a config.json or weights (dtypes, shapes, values) other than " << workers(true)
      << " (a relative path, or another version of the checkpoint on some node)";
}

DISCO_REGISTER_GLOBAL("llama.open")
    .set_body_typed(
        [](std::string path, std::string dtype) {
          const disco::WorkerInfo& w = disco::ThisWorker();
          const std::string what =
              "llama.open('" + ControlBytesShown(path) + "', '" + Shown(dtype) + "')";
          std::optional<Checkpoint> ck;
          std::shared_ptr<Model> m;
          std::exception_ptr failed;
          int64_t fingerprint = 0;
          try {
            DISCO_CHECK(path.find('\0') == std::string::npos, ValueError)
                << what << ": the path holds a NUL byte (at byte " << path.find('\0') << ")";
            const RunDType dt = ParseRunDType(dtype);
            ck.emplace(Checkpoint::Open(path));
            ck->config().CheckSplit(w.num_workers);
            ck->CheckWeights();
            fingerprint = Fingerprint(*ck);
            m = std::make_shared<Model>(ck->config(), dt, w.worker_id, w.num_workers, w.device);
          } catch (...) {
            failed = std::current_exception();
          }
          // A checkpoint one node cannot read fails there alone; every worker then meets the
          // memory check, which sums what the workers of a node will hold: a model too large
          // for the node is a message here, not the OOM killer in the middle of the load.
          AgreeOnCheckpoint(failed, fingerprint, what);
          CheckHostMemory(m->HostLoadBytes(),
                          what + " (the weights of 1 of " + std::to_string(w.num_workers) +
                              " worker" + (w.num_workers == 1 ? "" : "s") + ")",
                          "run more ranks (each holds 1/N of the weights), on more nodes, or "
                          "give a smaller dtype (bfloat16 holds half of float32, int8 a quarter)");
          m->LoadFrom(*ck);
          // Written in place with its size and time put back (cp -p, rsync): the values sampled
          // for the agreement, read again, tell most such loads.
          DISCO_CHECK(Fingerprint(*ck) == fingerprint, ValueError)
              << what << ": the checkpoint changed while the weights were read from it (values "
              << "read before and after differ): a copy or download still writing it? Load it "
              << "again once it is done";
          m->Finalize();
          return Object::Make(m, "llama.Model");
        },
        {"path", "dtype"})
    .mark_collective();  // the agreement and the host memory check

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
          if (!m->Packed(name)) return it->second;
          Tensor t = Tensor::Empty(it->second.shape(), it->second.dtype());  // as loaded
          m->Unpacked(name, 0, t.shape()[0], t.data());
          return t;
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

// llama.new_state's argument i as a T, or a TypeError naming it.
template <typename T>
T NewStateArg(const disco::Args& args, size_t i, const char* type) {
  static const char* const kNames[] = {"model",          "batch",       "max_len", "max_rows",
                                       "max_new_tokens", "keep_logits", "kv_dtype"};
  std::optional<T> v = args[i].as<T>();
  DISCO_CHECK(v.has_value(), TypeError)
      << "llama.new_state: argument " << i << " (" << kNames[i] << "): expected " << type
      << ", got " << args[i].type_name();
  return std::move(*v);
}

// kv_dtype (the 7th argument) may be left out: float32.
DISCO_REGISTER_GLOBAL("llama.new_state")
    .set_body_packed([](const disco::Args& args) -> disco::Any {
      DISCO_CHECK(args.size() == 6 || args.size() == 7, TypeError)
          << "llama.new_state: expected 6 or 7 arguments (model, batch, max_len, max_rows, "
             "max_new_tokens, keep_logits[, kv_dtype]), got "
          << args.size();
      const std::string kv =
          args.size() == 7 ? NewStateArg<std::string>(args, 6, "string") : "float32";
      DISCO_CHECK(kv == "float32" || kv == "float16", ValueError)
          << "llama.new_state: kv_dtype is 'float32' or 'float16', not '" << Shown(kv) << "'";
      std::shared_ptr<Model> m = ModelOf(NewStateArg<Object>(args, 0, "Object"), "llama.new_state");
      if (!m->finalized) m->Finalize();
      return Object::Make(
          std::make_shared<State>(
              m, NewStateArg<int64_t>(args, 1, "int"), NewStateArg<int64_t>(args, 2, "int"),
              NewStateArg<int64_t>(args, 3, "int"), NewStateArg<int64_t>(args, 4, "int"),
              NewStateArg<bool>(args, 5, "bool"), kv == "float16"),
          "llama.State");
    })
    .mark_collective();  // the host memory check (host_memory.h)

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
                       s.m->HugeBytes(),
                       s.KvHugeBytes()};
        },
        {"state"});

}  // namespace

std::vector<std::string> WorkerFunctionNames() {
  return std::vector<std::string>(std::begin(kNames), std::end(kNames));
}

}  // namespace llama
