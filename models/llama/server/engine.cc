#include "llama/server/engine.h"

#include <algorithm>
#include <cstring>

#include "llama/server/output.h"

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
               std::vector<int64_t> eos)
    : s_(s), model_(std::move(model)), c_(c), tok_(std::move(tok)), eos_(std::move(eos)) {
  for (const char* name :
       {"llama.new_state", "llama.begin_prefill", "llama.begin_decode", "llama.embed",
        "llama.attention", "llama.mlp", "llama.head", "llama.tokens"}) {
    f_[name] = s.GetGlobalFunc(name);
  }
}

void Engine::Forward(const DRef& state) {
  s_.CallPacked(f_["llama.embed"], state);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    s_.CallPacked(f_["llama.attention"], state, l);
    s_.CallPacked(f_["llama.mlp"], state, l);
  }
  s_.CallPacked(f_["llama.head"], state);
}

std::vector<int64_t> Engine::Tokens(const DRef& state) {
  Tensor t = s_.CallPacked(f_["llama.tokens"], state).DebugGetFromRemote(0).cast<Tensor>();
  return std::vector<int64_t>(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
}

void Engine::RunBatch(const std::vector<std::shared_ptr<Job>>& jobs) {
  const int64_t b = static_cast<int64_t>(jobs.size());
  int64_t steps = 0, longest = 0;
  std::vector<int64_t> tokens, lengths;
  std::vector<Output> out;
  for (const auto& job : jobs) {
    const CompletionRequest& r = job->request();
    steps = std::max(steps, r.max_tokens);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(job->prompt().size()));
    tokens.insert(tokens.end(), job->prompt().begin(), job->prompt().end());
    lengths.push_back(static_cast<int64_t>(job->prompt().size()));
    out.emplace_back(tok_, r.stop, r.max_tokens, eos_);
  }
  DRef state = s_.CallPacked(f_["llama.new_state"], model_, b, longest + steps - 1,
                             static_cast<int64_t>(tokens.size()), steps, false);
  s_.CallPacked(f_["llama.begin_prefill"], state, Int64Tensor(tokens), Int64Tensor(lengths));
  Forward(state);
  // A decode step as one graph: its input is the step number.
  disco::Graph step = s_.Capture(1, [&](const std::vector<Any>& in) {
    s_.CallPacked(f_["llama.begin_decode"], state, in[0]);
    Forward(state);
  });
  for (int64_t k = 0; k < steps; ++k) {
    if (k > 0) step.Replay({Any(k)});
    const std::vector<int64_t> t = Tokens(state);  // waits for the step
    bool running = false;
    for (int64_t i = 0; i < b; ++i) {
      if (out[i].done()) continue;
      if (jobs[i]->cancelled()) {
        jobs[i]->Fail(499, "the client went away");
        continue;
      }
      jobs[i]->Push(out[i].Add(t[i * steps + k]));
      running = running || !out[i].done();
    }
    if (!running) break;
  }
}

void Engine::Serve(JobQueue* queue, size_t max_batch, const std::atomic<bool>& stop,
                   const std::function<void()>& idle) {
  while (!stop.load()) {
    if (idle && queue->empty()) idle();
    std::vector<std::shared_ptr<Job>> jobs = queue->Take(max_batch);
    if (jobs.empty()) continue;
    try {
      RunBatch(jobs);
    } catch (const disco::Error& e) {
      // A failed batch fails its jobs; the session goes on (an error poisons only its registers).
      for (const auto& job : jobs) job->Fail(500, std::string("the decoder failed: ") + e.what());
    }
  }
  for (const auto& job : queue->Close()) job->Fail(503, "the server is shutting down");
}

}  // namespace llm_server
