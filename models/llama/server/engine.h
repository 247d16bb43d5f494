// The scheduler of disco-llm-server, on the controller's thread: continuous batching over the
// decoder's slots (llama.begin_step). The state holds --max-batch slots of --max-len positions;
// a waiting job takes a free slot at a step boundary, its prompt goes in in chunks while the
// others decode (chunked prefill), and it leaves its slot when done or when its client goes away.
// A step is one or more passes of at most kPassRows rows: decoding slots first (one row each),
// then the chunks of new prompts in the room left. Each pass is one replayed frame of one graph
// captured at start (llama.begin_step, the layers, llama.head, llama.next_tokens), whose inputs
// are the pass's slots, positions, counts and tokens as tensors: one capture serves every
// shape. At most kPassRows rows a pass keeps every product on the CPU's streaming kernels, which
// compute a row the same whatever the other rows are: a greedy job's tokens do not depend on
// what else runs.
#ifndef DISCO_MODELS_LLAMA_SERVER_ENGINE_H_
#define DISCO_MODELS_LLAMA_SERVER_ENGINE_H_

#include <disco/disco.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "llama/config.h"
#include "llama/server/job.h"
#include "llama/server/output.h"
#include "tokenizer/tokenizer.h"

namespace llm_server {

/// Rows in one pass (llama/kernels.h's kStreamingRows: above it products go to sgemm).
constexpr int64_t kPassRows = 16;

class Engine {
 public:
  /// Makes the decoder's state, `max_batch` slots of `max_len` positions (raises when the
  /// workers cannot; its KV cache in `kv_dtype`, float32 or float16), and captures a pass.
  Engine(disco::Session& s, disco::DRef model, const llama::Config& c, tokenizer::Tokenizer tok,
         std::vector<int64_t> eos, size_t max_batch, int64_t max_len,
         const std::string& kv_dtype = "float32");
  /// Runs jobs from `queue` until `stop` is set and the running jobs have ended; then fails the
  /// jobs still waiting (503). `idle` (may be empty) runs first whenever nothing runs and no job
  /// waits.
  void Serve(JobQueue* queue, const std::atomic<bool>& stop, const std::function<void()>& idle);

 private:
  // A running job in its slot: `pos` positions in the KV cache, `fed` of its prompt's tokens.
  struct Slot {
    std::shared_ptr<Job> job;
    std::optional<Output> out;
    int64_t pos = 0, fed = 0, last = -1, order = 0;
    float temperature = 0;  // 0: greedy
    float top_p = 1;
    int64_t seed = 0;
  };
  // One slot's rows in a pass; `emits`: its last row's token is the job's next.
  struct Entry {
    size_t slot;
    int64_t pos, count;
    std::vector<int64_t> tokens;
    bool emits;
  };

  void Forward();
  void Admit(JobQueue* queue, bool wait);
  bool Running() const;
  void DropCancelled();
  std::vector<std::vector<Entry>> Plan();
  void Step();
  void RunPass(const std::vector<Entry>& pass);
  void Free(size_t slot);

  disco::Session& s_;
  disco::DRef model_;
  const llama::Config c_;
  tokenizer::Tokenizer tok_;
  std::vector<int64_t> eos_;
  std::map<std::string, disco::DRef> f_;
  disco::DRef state_, next_;
  disco::Graph pass_;
  std::vector<Slot> slots_;
  int64_t max_len_ = 0, admitted_ = 0;
  std::mt19937_64 random_{std::random_device{}()};  // seeds of requests that give none
};

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_ENGINE_H_
