// tokenizer.json's pre-tokenizers: ByteLevel (GPT-2's regex, add_prefix_space, use_regex),
// Split (a String or Regex pattern, every behavior, invert), Digits, Metaspace (prepend_scheme,
// split) and Sequence. Anything else is refused naming its path.
#include <disco/error.h>

#include <memory>

#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tokenizer {
namespace {

// GPT-2's pre-tokenization, as tokenizers' ByteLevel has it.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Applies `split` to every piece.
PreTokenizer EachPiece(std::function<void(const Piece&, std::vector<Piece>*)> split) {
  return [split](std::vector<Piece>* pieces) {
    std::vector<Piece> out;
    for (const Piece& p : *pieces) split(p, &out);
    *pieces = std::move(out);
  };
}

SplitBehavior BehaviorOf(const JsonNode& node) {
  const std::string b = node.String("behavior");
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  node.At("behavior").Fail("unknown split behavior '" + b + "'");
}

PreTokenizer ByteLevel(const JsonNode& node) {
  const bool prefix = node.Bool("add_prefix_space", true);
  const bool use_regex = node.Bool("use_regex", true);
  auto re = std::make_shared<Regex>(kGpt2Pattern, "ByteLevel");
  const std::vector<std::string>& map = ByteToChar();
  return EachPiece([=, &map](const Piece& in, std::vector<Piece>* out) {
    Piece p = in;
    if (prefix && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
    std::vector<Piece> parts;
    if (use_regex) {
      SplitPiece(p, re->FindAll(p.text), false, SplitBehavior::kIsolated, &parts);
    } else if (!p.text.empty()) {
      parts.push_back(p);
    }
    for (Piece& part : parts) {
      std::string mapped;
      for (unsigned char c : part.text) mapped += map[c];
      out->push_back({std::move(mapped), part.at_start});
    }
  });
}

PreTokenizer Metaspace(const JsonNode& node) {
  const std::string rep = node.String("replacement", "\xE2\x96\x81");
  if (rep.empty() || CharLength(rep, 0) != rep.size()) {
    node.At("replacement").Fail("must be one character, not '" + rep + "'");
  }
  std::string scheme = node.Bool("add_prefix_space", true) ? "always" : "never";
  scheme = node.String("prepend_scheme", scheme);
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    node.At("prepend_scheme").Fail("unknown prepend_scheme '" + scheme + "'");
  }
  const bool split = node.Bool("split", true);
  auto re = std::make_shared<Regex>(Regex::Literal(rep, "Metaspace"));
  return EachPiece([=](const Piece& in, std::vector<Piece>* out) {
    Piece p{"", in.at_start};
    for (char c : in.text) {
      if (c == ' ') {
        p.text += rep;
      } else {
        p.text += c;
      }
    }
    const bool starts = p.text.compare(0, rep.size(), rep) == 0;
    if (!starts && (scheme == "always" || (scheme == "first" && p.at_start))) p.text.insert(0, rep);
    if (split) {
      SplitPiece(p, re->FindAll(p.text), false, SplitBehavior::kMergedWithNext, out);
    } else if (!p.text.empty()) {
      out->push_back(p);
    }
  });
}

PreTokenizer Digits(const JsonNode& node) {
  const bool individual = node.Bool("individual_digits", false);
  auto re = std::make_shared<Regex>(individual ? "\\p{N}" : "\\p{N}+", "Digits");
  return EachPiece([=](const Piece& p, std::vector<Piece>* out) {
    SplitPiece(p, re->FindAll(p.text), false, SplitBehavior::kIsolated, out);
  });
}

}  // namespace

PreTokenizer MakePreTokenizer(const JsonNode& node) {
  if (node.is_null()) return {};
  const std::string type = node.Type();
  if (type == "Sequence") {
    std::vector<PreTokenizer> parts;
    for (const JsonNode& n : node.At("pretokenizers").Items()) {
      if (PreTokenizer f = MakePreTokenizer(n)) parts.push_back(std::move(f));
    }
    return [parts](std::vector<Piece>* pieces) {
      for (const PreTokenizer& f : parts) f(pieces);
    };
  }
  if (type == "ByteLevel") return ByteLevel(node);
  if (type == "Metaspace") return Metaspace(node);
  if (type == "Digits") return Digits(node);
  if (type == "Split") {
    auto re = std::make_shared<Regex>(PatternOf(node.At("pattern")));
    const SplitBehavior behavior = BehaviorOf(node);
    const bool invert = node.Bool("invert", false);
    return EachPiece([=](const Piece& p, std::vector<Piece>* out) {
      SplitPiece(p, re->FindAll(p.text), invert, behavior, out);
    });
  }
  node.Unsupported("pre-tokenizer", "Sequence, ByteLevel, Split, Digits, Metaspace");
}

}  // namespace tokenizer
