#include "llama/state.h"

#include <chrono>
#include <optional>

#include "llama/sampling.h"

namespace llama {

using disco::Object;
using disco::Shape;
using disco::Tensor;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

namespace {

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

}  // namespace

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
    s.temperature[j] = t < kGreedyBelowTemperature ? 0.0f : t;
    s.top_p[j] = p;
    s.seed[j] = static_cast<uint64_t>(seeds[j]);
  }
}

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

}  // namespace llama
