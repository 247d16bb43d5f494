// The scheduler of disco-llm-server, on the controller's thread: takes the waiting jobs (up to
// --max-batch) and runs them as one batch of the decoder (static batching: the next batch starts
// when this one ends): one prefill of every prompt, then each decode step one replayed frame (a
// graph captured for the batch), each job's new token sent as it comes. A job leaves the batch's
// output when it finishes or its client goes away; the batch ends when every job has.
#ifndef DISCO_MODELS_LLAMA_SERVER_ENGINE_H_
#define DISCO_MODELS_LLAMA_SERVER_ENGINE_H_

#include <disco/disco.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llama/config.h"
#include "llama/server/job.h"
#include "tokenizer/tokenizer.h"

namespace llm_server {

class Engine {
 public:
  Engine(disco::Session& s, disco::DRef model, const llama::Config& c, tokenizer::Tokenizer tok,
         std::vector<int64_t> eos);
  /// Runs batches from `queue` until `stop` is set and the running batch has ended; then fails the
  /// jobs still waiting (503).
  /// `idle` (may be empty) runs first whenever no job waits.
  void Serve(JobQueue* queue, size_t max_batch, const std::atomic<bool>& stop,
             const std::function<void()>& idle);
  /// Runs one batch to its end.
  void RunBatch(const std::vector<std::shared_ptr<Job>>& jobs);

 private:
  void Forward(const disco::DRef& state);
  std::vector<int64_t> Tokens(const disco::DRef& state);

  disco::Session& s_;
  disco::DRef model_;
  const llama::Config c_;
  tokenizer::Tokenizer tok_;
  std::vector<int64_t> eos_;
  std::map<std::string, disco::DRef> f_;
};

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_ENGINE_H_
