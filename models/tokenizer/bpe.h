// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}) as tokenizers' BPE has it:
// merges given as "a b" strings or ["a", "b"] pairs, applied lowest rank first (leftmost among
// equals); characters outside the vocabulary become <0xNN> byte tokens (byte_fallback), else the
// unk token (consecutive ones fused with fuse_unk), else are dropped; ignore_merges takes a word
// that is itself a token whole. Dropout, continuing_subword_prefix and end_of_word_suffix are
// refused.
#ifndef DISCO_MODELS_TOKENIZER_BPE_H_
#define DISCO_MODELS_TOKENIZER_BPE_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_node.h"

namespace tokenizer {

class Bpe {
 public:
  /// The model of `node` (tokenizer.json's "model"); refuses tokens, ids and merges that do not
  /// fit, naming their path.
  static Bpe FromJson(const JsonNode& node);

  /// Appends the ids of one pre-tokenized word.
  void Encode(const std::string& word, std::vector<int64_t>* ids) const;

  /// The token of `id`, or nullptr.
  const std::string* IdToToken(int64_t id) const;
  /// The id of `token`, or -1.
  int64_t TokenToId(const std::string& token) const;
  /// The largest id + 1.
  int64_t size() const { return max_id_ + 1; }

 private:
  void InitialSymbols(const std::string& word, std::vector<int64_t>* symbols) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> tokens_;  // by id
  int64_t max_id_ = -1;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;
  int64_t unk_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int64_t byte_ids_[256];
};

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_BPE_H_
