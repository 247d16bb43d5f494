#include "llama/server/engine.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace llm_server {

using disco::Any;
using disco::DRef;
using disco::Shape;
using disco::Tensor;

namespace {

Tensor Int64Tensor(const std::vector<int64_t>& v) {
  // Tensors, not Shapes: a Shape crosses the wire with at most 64 entries.
  Tensor t = Tensor::Empty(Shape{static_cast<int64_t>(v.size())}, disco::DataType("int64"));
  std::memcpy(t.data(), v.data(), t.nbytes());
  return t;
}

}  // namespace

Engine::Engine(disco::Session& s, DRef model, const llama::Config& c, tokenizer::Tokenizer tok,
               std::vector<int64_t> eos, size_t max_batch, int64_t max_len,
               const std::string& kv_dtype)
    : s_(s),
      model_(std::move(model)),
      c_(c),
      tok_(std::move(tok)),
      eos_(std::move(eos)),
      max_len_(max_len) {
  for (const char* name :
       {"llama.new_state", "llama.begin_step", "llama.set_sampling", "llama.embed",
        "llama.attention", "llama.mlp", "llama.head", "llama.next_tokens"}) {
    f_[name] = s.GetGlobalFunc(name);
  }
  slots_.assign(max_batch, Slot());
  state_ = s_.CallPacked(f_["llama.new_state"], model_, static_cast<int64_t>(max_batch), max_len,
                         kPassRows, int64_t{1}, false, kv_dtype);
  try {
    s_.SyncAll();  // a KV cache past what a node can hold is refused here, at start
  } catch (const disco::RemoteError& e) {
    // The memory check's refusal said in the server's flags (the figures from its first line);
    // any other failure as it came.
    const std::string what = e.what();
    const size_t from = what.find(" needs "), to = what.find("; lower them");
    const std::string flags = "--max-batch " + std::to_string(max_batch) + " x --max-len " +
                              std::to_string(max_len) + " (kv cache " + kv_dtype + ")";
    DISCO_CHECK(from == std::string::npos || to == std::string::npos || to < from, ValueError)
        << flags << what.substr(from, to - from) << "; lower --max-batch or --max-len"
        << (kv_dtype == "float16" ? "" : ", or give --kv-dtype float16 (half the bytes)");
    DISCO_CHECK(false, ValueError) << flags << ": " << what;
  }
  // One pass: its inputs are the slots, positions, counts and tokens (tensors of any length), and
  // the slots' temperatures, seeds and top_ps.
  pass_ = s_.Capture(7, [&](const std::vector<Any>& in) {
    s_.CallPacked(f_["llama.begin_step"], state_, in[0], in[1], in[2], in[3]);
    s_.CallPacked(f_["llama.set_sampling"], state_, in[4], in[5], in[6]);
    Forward();
    next_ = s_.CallPacked(f_["llama.next_tokens"], state_);
  });
  s_.SyncAll();
}

void Engine::Forward() {
  s_.CallPacked(f_["llama.embed"], state_);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    s_.CallPacked(f_["llama.attention"], state_, l);
    s_.CallPacked(f_["llama.mlp"], state_, l);
  }
  s_.CallPacked(f_["llama.head"], state_);
}

bool Engine::Running() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& x) { return x.job != nullptr; });
}

void Engine::Free(size_t slot) { slots_[slot] = Slot(); }

void Engine::Admit(JobQueue* queue, bool wait) {
  const size_t free = static_cast<size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& x) { return x.job == nullptr; }));
  if (free == 0) return;
  std::vector<std::shared_ptr<Job>> jobs = wait ? queue->Take(free) : queue->TakeNow(free);
  size_t i = 0;
  for (Slot& slot : slots_) {
    if (i == jobs.size()) break;
    if (slot.job != nullptr) continue;
    const CompletionRequest& r = jobs[i]->request();
    if (jobs[i]->prompt().empty()) {
      jobs[i++]->Fail(400, "the prompt has no tokens");
      continue;
    }
    slot.job = jobs[i++];
    slot.out.emplace(tok_, r.stop, r.max_tokens, r.ignore_eos ? std::vector<int64_t>{} : eos_);
    slot.order = admitted_++;
    slot.temperature = static_cast<float>(r.temperature);
    // The request's top_p is a double in (0, 1]: one under float's least normal would round to
    // 0, which the decoder refuses for the whole step (every slot in it). A nucleus that small
    // is the likeliest token, as at float's least normal.
    slot.top_p = std::max(static_cast<float>(r.top_p), std::numeric_limits<float>::min());
    slot.seed = r.seed_given ? r.seed : static_cast<int64_t>(random_());
  }
}

void Engine::DropCancelled() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].job != nullptr && slots_[i].job->cancelled()) {
      slots_[i].job->Fail(499, "the client went away");
      Free(i);
    }
  }
}

// Decoding slots first, a row each, kPassRows to a pass; then prompts' chunks, oldest job first,
// in the last pass's room (a pass of their own when it has less than half a pass).
std::vector<std::vector<Engine::Entry>> Engine::Plan() {
  std::vector<std::vector<Entry>> passes(1);
  int64_t room = kPassRows;
  std::vector<size_t> filling;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& x = slots_[i];
    if (x.job == nullptr) continue;
    if (x.fed < static_cast<int64_t>(x.job->prompt().size())) {
      filling.push_back(i);
      continue;
    }
    if (room == 0) passes.emplace_back(), room = kPassRows;
    passes.back().push_back({i, x.pos, 1, {x.last}, true});
    --room;
  }
  if (filling.empty()) return passes;
  std::sort(filling.begin(), filling.end(),
            [&](size_t a, size_t b) { return slots_[a].order < slots_[b].order; });
  int64_t budget = room >= kPassRows / 2 ? room : room + kPassRows;
  for (size_t i : filling) {
    const Slot& x = slots_[i];
    const std::vector<int64_t>& prompt = x.job->prompt();
    int64_t fed = x.fed;
    while (budget > 0 && fed < static_cast<int64_t>(prompt.size())) {
      if (room == 0) passes.emplace_back(), room = kPassRows;
      const int64_t n = std::min({room, budget, static_cast<int64_t>(prompt.size()) - fed});
      const bool last = fed + n == static_cast<int64_t>(prompt.size());
      passes.back().push_back({i, fed, n, {prompt.begin() + fed, prompt.begin() + fed + n}, last});
      fed += n, room -= n, budget -= n;
    }
  }
  return passes;
}

void Engine::RunPass(const std::vector<Entry>& pass) {
  std::vector<int64_t> slots, positions, counts, tokens, seeds;
  const Shape shape{static_cast<int64_t>(pass.size())};
  Tensor temperatures = Tensor::Empty(shape, disco::DataType("float32"));
  Tensor top_ps = Tensor::Empty(shape, disco::DataType("float32"));
  for (const Entry& e : pass) {
    temperatures.data_as<float>()[slots.size()] = slots_[e.slot].temperature;
    top_ps.data_as<float>()[slots.size()] = slots_[e.slot].top_p;
    seeds.push_back(slots_[e.slot].seed);
    slots.push_back(static_cast<int64_t>(e.slot));
    positions.push_back(e.pos);
    counts.push_back(e.count);
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
  }
  pass_.Replay({Any(Int64Tensor(slots)), Any(Int64Tensor(positions)), Any(Int64Tensor(counts)),
                Any(Int64Tensor(tokens)), Any(temperatures), Any(Int64Tensor(seeds)), Any(top_ps)});
  Tensor next = next_.DebugGetFromRemote(0).cast<Tensor>();  // waits for the pass
  for (size_t j = 0; j < pass.size(); ++j) {
    const Entry& e = pass[j];
    Slot& x = slots_[e.slot];
    x.pos += e.count;
    if (x.fed < static_cast<int64_t>(x.job->prompt().size())) x.fed += e.count;
    if (!e.emits) continue;
    x.last = next.data_as<int64_t>()[j];
    if (x.last < 0) {      // this request's values went past what the cache or weights hold
      if (x.last == -2) {  // past float16's range: the request's own tokens, the client's to change
        x.job->Fail(400,
                    "the request's keys or values pass float16's range (the server runs "
                    "--kv-dtype float16; --kv-dtype float32 holds them)");
      } else {  // the model's weights (NaN, infinite or huge): the server's
        x.job->Fail(500, "the model's values went NaN or infinite on this request");
      }
      Free(e.slot);
      continue;
    }
    x.job->Push(x.out->Add(x.last));
    // A next row past --max-len: the front refuses such requests before they are queued.
    if (!x.out->done() && x.pos >= max_len_) {
      x.job->Fail(400, "the request passes --max-len " + std::to_string(max_len_));
    }
    if (x.out->done() || x.pos >= max_len_) Free(e.slot);
  }
}

void Engine::Step() {
  DropCancelled();
  if (!Running()) return;
  for (const std::vector<Entry>& pass : Plan()) RunPass(pass);
}

void Engine::Serve(JobQueue* queue, const std::atomic<bool>& stop,
                   const std::function<void()>& idle) {
  while (!stop.load() || Running()) {
    if (!stop.load()) {
      const bool running = Running();
      if (!running && idle && queue->empty()) idle();
      Admit(queue, !running);
    }
    try {
      Step();
    } catch (const disco::Error& e) {
      // A failed step fails its jobs; the session goes on (an error poisons only its registers).
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].job == nullptr) continue;
        slots_[i].job->Fail(500, std::string("the decoder failed: ") + e.what());
        Free(i);
      }
    }
  }
  for (const auto& job : queue->Close()) job->Fail(503, "the server is shutting down");
}

}  // namespace llm_server
