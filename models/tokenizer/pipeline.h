// The stages of a tokenizer.json pipeline, each built from its JSON node (unknown types are
// refused naming their path): normalizers (normalizers.cc), pre-tokenizers (pre_tokenizers.cc) and
// decoders (decoders.cc), with the semantics of Hugging Face's `tokenizers`.
#ifndef DISCO_MODELS_TOKENIZER_PIPELINE_H_
#define DISCO_MODELS_TOKENIZER_PIPELINE_H_

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/json_node.h"
#include "tokenizer/regex.h"

namespace tokenizer {

/// A piece of the text between pre-tokenization steps; at_start: it begins at offset 0 of the
/// text given to Encode (Metaspace's prepend_scheme "first" looks at it).
struct Piece {
  std::string text;
  bool at_start = false;
};

using Normalizer = std::function<void(std::string*)>;
using PreTokenizer = std::function<void(std::vector<Piece>*)>;
using Decoder = std::function<void(std::vector<std::string>*)>;

/// Each is empty (a no-op) when the node is null.
Normalizer MakeNormalizer(const JsonNode& node);
PreTokenizer MakePreTokenizer(const JsonNode& node);
Decoder MakeDecoder(const JsonNode& node);

/// How the matches of a split pattern are kept (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// Splits `piece` at the [begin, end) `matches` (ordered, non-overlapping) as `behavior` says,
/// appending the non-empty parts to `out` (tokenizers' NormalizedString::split).
void SplitPiece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                bool invert, SplitBehavior behavior, std::vector<Piece>* out);

/// The pattern of a Replace or a Split: {"String": "..."} (literal) or {"Regex": "..."}.
Regex PatternOf(const JsonNode& node);

/// GPT-2's map of the 256 byte values to printable characters (UTF-8), and back.
const std::vector<std::string>& ByteToChar();
/// The byte of a character of ByteToChar, or -1.
int CharToByte(char32_t cp);

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_PIPELINE_H_
