// A compiled regular expression of a tokenizer (libpcre2-8: PCRE2_UTF | PCRE2_UCP, so that \s,
// \w, \d and \p{L}, \p{N} are Unicode's; JIT-compiled where the platform has it). The patterns of
// GPT-2, Llama 3 and Qwen (case-insensitive groups, look-ahead \s+(?!\S)) are PCRE syntax.
#ifndef DISCO_MODELS_TOKENIZER_REGEX_H_
#define DISCO_MODELS_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tokenizer {

class Regex {
 public:
  /// Compiles `pattern`; throws disco::ValueError "<what>: <pcre2's message> at offset N", and
  /// refuses a pattern that can match the empty string (Hugging Face splits there; disco does not).
  Regex(const std::string& pattern, const std::string& what);
  /// A pattern that matches `literal` exactly.
  static Regex Literal(const std::string& literal, const std::string& what);

  /// The [begin, end) byte ranges of the non-overlapping, non-empty matches in valid UTF-8 `text`,
  /// left to right.
  std::vector<std::pair<size_t, size_t>> FindAll(const std::string& text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_REGEX_H_
