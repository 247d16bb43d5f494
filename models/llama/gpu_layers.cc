// The layers on a GPU: model.cc's steps, queued on the worker's stream (cuda_kernels.h's
// functions and cuBLAS products in libdisco_llama_cuda.so), allreduces included.
#include <disco/ccl.h>

#include <cmath>

#include "llama/sampling.h"
#include "llama/state.h"

namespace llama {

using disco::Tensor;

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

}  // namespace llama
