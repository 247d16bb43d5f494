// tokenizer.json's "added_tokens": found in the text before the model sees it, as tokenizers'
// AddedVocabulary does: those with normalized false in the raw text, the others in each remaining
// piece after normalization; leftmost-longest matches, single_word (no word character on either
// side), lstrip and rstrip (the white space before / after goes with the token).
#ifndef DISCO_MODELS_TOKENIZER_ADDED_TOKENS_H_
#define DISCO_MODELS_TOKENIZER_ADDED_TOKENS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_node.h"

namespace tokenizer {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  std::string match;  // what is found in the text: content, normalized when `normalized`
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

/// A part of the text: an added token's id, or text (id -1) for the model.
struct Segment {
  int64_t id = -1;
  std::string text;
  bool at_start = false;  // text that begins at offset 0 of the input
};

class AddedTokens {
 public:
  /// The tokens of tokenizer.json's "added_tokens" (null: none).
  static AddedTokens FromJson(const JsonNode& node);

  /// Passes the content of the tokens with `normalized` through `normalizer` (as tokenizers
  /// does: a normalized token is found in normalized text as it normalizes).
  void Normalize(const std::function<void(std::string*)>& normalizer);

  /// Splits `text` at the added tokens whose `normalized` flag is `normalized`.
  std::vector<Segment> Split(const std::string& text, bool at_start, bool normalized) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  /// The token of `id`, or nullptr.
  const AddedToken* Find(int64_t id) const;

 private:
  void Index();

  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by the first byte of `match`, longest match first (equal lengths in file
  // order): a position of the text is tried against the tokens that can start there only.
  std::vector<std::vector<uint32_t>> by_first_byte_;
  std::unordered_map<int64_t, size_t> by_id_;  // the first token of each id
};

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_ADDED_TOKENS_H_
