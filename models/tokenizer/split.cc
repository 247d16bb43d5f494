// SplitPiece (tokenizers' NormalizedString::split) and GPT-2's byte-to-character map.
#include "tokenizer/pipeline.h"

#include <disco/error.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace tokenizer {

// A pattern: {"String": "..."} (literal) or {"Regex": "..."}.
Regex PatternOf(const JsonNode& node) {
  const std::string what = node.file() + ": " + node.path();
  if (node.Has("String")) return Regex::Literal(node.String("String"), what);
  if (node.Has("Regex")) return Regex(node.String("Regex"), what);
  node.Fail("a pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

void SplitPiece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                bool invert, SplitBehavior behavior, std::vector<Piece>* out) {
  struct Part {
    size_t begin, end;
    bool match;
  };
  const std::string& s = piece.text;
  std::vector<Part> parts;  // covers s, matches and the text between them
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b != prev) parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size() || s.empty()) parts.push_back({prev, s.size(), invert});

  std::vector<Part> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.match) kept.push_back(p);
      }
      break;
    case SplitBehavior::kIsolated:
      kept = parts;
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back(*it);
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Part& p : parts) {
        if (p.match == previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.match;
      }
      break;
  }
  for (const Part& p : kept) {
    if (p.end > p.begin)
      out->push_back({s.substr(p.begin, p.end - p.begin), piece.at_start && p.begin == 0});
  }
}

const std::vector<std::string>& ByteToChar() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      t[b] = EncodeUtf8(printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

int CharToByte(char32_t cp) {
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) {
    return static_cast<int>(cp);
  }
  if (cp < 256 || cp >= 256 + 68) return -1;
  // The others, in byte order: 0..32, 127..160, 173.
  int k = static_cast<int>(cp - 256);
  if (k <= 32) return k;
  k -= 33;
  if (k <= 160 - 127) return 127 + k;
  return 173;
}

}  // namespace tokenizer
