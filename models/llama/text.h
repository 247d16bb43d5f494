// disco-demo --text: prompts as text, encoded by the checkpoint's own tokenizer
// (models/tokenizer: tokenizer.json or tokenizer.model), and the generated text printed as the
// tokens arrive, one block per prompt:
//   --- text 1 ---
//   <the text generated for prompt 1, streamed>
//   --- text 2 ---
//   ...
//   --- end of text ---
// The first prompt's text is printed as each step's tokens come; the others' when all are done.
#ifndef DISCO_MODELS_LLAMA_TEXT_H_
#define DISCO_MODELS_LLAMA_TEXT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llama {

class TextPrompts {
 public:
  /// The tokenizer of checkpoint directory `model` (its ids checked against vocab_size) and the
  /// ids of `texts`, with the tokenizer's special tokens (BOS). Throws disco::ValueError naming
  /// the directory and the files looked for when there is no tokenizer.
  TextPrompts(const std::string& model, const std::vector<std::string>& texts, int64_t vocab_size,
              int64_t max_new_tokens);
  ~TextPrompts();
  TextPrompts(const TextPrompts&) = delete;
  TextPrompts& operator=(const TextPrompts&) = delete;

  /// The prompts' ids.
  const std::vector<std::vector<int64_t>>& ids() const { return ids_; }
  /// Step `step`'s tokens have come: `tokens` is [batch][max_new_tokens], filled up to `step`.
  void OnStep(int64_t step, const std::vector<int64_t>& tokens);
  /// Prints what is left.
  void Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::vector<std::vector<int64_t>> ids_;
  int64_t max_new_ = 0;
};

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_TEXT_H_
