// Text in, text out for a checkpoint: the tokenizer of a Hugging Face checkpoint directory,
// tokenizer.json (BPE: byte-level as in Llama 3 and Qwen, or SentencePiece-style with byte
// fallback as in Llama 2, TinyLlama and Mistral) or else tokenizer.model (SentencePiece, by
// libsentencepiece), encoding and decoding token-exact as Hugging Face's `tokenizers` and
// `sentencepiece` do; and a streaming decoder that shows text as tokens arrive. A file that is
// malformed, uses a stage this library does not implement, or has ids beyond the model's
// vocabulary is refused with one disco::ValueError naming the file and what is wrong.
#ifndef DISCO_MODELS_TOKENIZER_TOKENIZER_H_
#define DISCO_MODELS_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tokenizer {

class Engine;

class Tokenizer {
 public:
  /// The tokenizer of checkpoint directory `dir`: tokenizer.json, else tokenizer.model. With
  /// vocab_size > 0 (config.json's), every id of the tokenizer must be below it.
  static Tokenizer FromDirectory(const std::string& dir, int64_t vocab_size = 0);
  /// One file: tokenizer.json's format unless the name ends in ".model".
  static Tokenizer FromFile(const std::string& path, int64_t vocab_size = 0);
  /// The file FromDirectory would read, or "" when `dir` has neither.
  static std::string FileIn(const std::string& dir);

  /// The ids of `text` (bytes that are not valid UTF-8 are read as U+FFFD first, as Python's
  /// bytes.decode("utf-8", "replace") does); with add_special_tokens, the post-processor's tokens
  /// (BOS) too.
  std::vector<int64_t> Encode(const std::string& text, bool add_special_tokens = true) const;
  /// The text of `ids` (ids without a token are left out; invalid UTF-8 comes out as U+FFFD).
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;
  /// The file it was read from.
  const std::string& path() const { return path_; }
  /// Whether `id` is a token for one byte (see StreamDecoder).
  bool IsByte(int64_t id) const;

 private:
  std::string path_;
  std::shared_ptr<const Engine> engine_;
};

/// Decodes ids as they arrive: Push returns the text that is final so far, holding back what a
/// later token may still change (a byte token's character, an incomplete UTF-8 sequence that
/// decodes to U+FFFD); Finish returns the rest. The pieces put together are the Decode of all the
/// ids. Each Push decodes every id so far (generation lengths: thousands of tokens at most).
class StreamDecoder {
 public:
  explicit StreamDecoder(Tokenizer tokenizer, bool skip_special_tokens = false)
      : tok_(std::move(tokenizer)), skip_(skip_special_tokens) {}
  std::string Push(int64_t id);
  std::string Finish();

 private:
  std::string Next(bool final);

  Tokenizer tok_;
  bool skip_;
  std::vector<int64_t> ids_;
  std::string shown_;  // what Push and Finish returned so far
};

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_TOKENIZER_H_
