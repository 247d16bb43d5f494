// One request's output as its tokens come: text by the tokenizer's streaming decoder, cut at the
// first stop string (text that may still become one is held back), and the pieces to send.
#ifndef DISCO_MODELS_LLAMA_SERVER_OUTPUT_H_
#define DISCO_MODELS_LLAMA_SERVER_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "llama/server/api.h"
#include "tokenizer/tokenizer.h"

namespace llm_server {

class Output {
 public:
  /// `max_tokens` tokens at most; any of `eos` ends the output ("stop").
  Output(const tokenizer::Tokenizer& tok, std::vector<std::string> stop, int64_t max_tokens,
         std::vector<int64_t> eos);
  /// The next generated token: the piece to send now (its finish reason set when it is the last).
  Piece Add(int64_t id);
  bool done() const { return done_; }
  int64_t count() const { return count_; }

 private:
  // Text in text_ from sent_ on that may be sent: up to a stop string (then done), else all but
  // the longest tail that begins a stop string.
  size_t Sendable(bool final);

  tokenizer::StreamDecoder decoder_;
  std::vector<std::string> stop_;
  int64_t max_tokens_;
  std::vector<int64_t> eos_;
  int64_t count_ = 0;
  std::string text_;
  size_t sent_ = 0;
  bool done_ = false;
};

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_OUTPUT_H_
