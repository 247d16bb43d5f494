// What a tokenizer file gives Tokenizer (tokenizer.h): tokenizer.json's pipeline (hf_tokenizer.cc)
// or a SentencePiece model (sentencepiece.cc).
#ifndef DISCO_MODELS_TOKENIZER_ENGINE_H_
#define DISCO_MODELS_TOKENIZER_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tokenizer {

class Engine {
 public:
  virtual ~Engine() = default;
  /// `text` is valid UTF-8.
  virtual std::vector<int64_t> Encode(const std::string& text, bool add_special_tokens) const = 0;
  /// Ids without a token are left out (as tokenizers does).
  virtual std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const = 0;
  /// Whether the token of `id` is one byte of a character (tokenizer.json's <0xNN>, a
  /// SentencePiece byte piece): text before it may still change with the next token.
  virtual bool IsByte(int64_t id) const = 0;
  /// The largest id of any token (or -1), and the token's text in *token.
  virtual int64_t MaxId(std::string* token) const = 0;
};

/// tokenizer.json at `path` (its errors name `path`).
std::unique_ptr<Engine> LoadHfTokenizer(const std::string& path);
/// A SentencePiece model (tokenizer.model) at `path`.
std::unique_ptr<Engine> LoadSentencePiece(const std::string& path);

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_ENGINE_H_
