// AddedTokens: reading tokenizer.json's added tokens and splitting text at them.
#include "tokenizer/added_tokens.h"

#include <disco/error.h>

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tokenizer {
namespace {

// Whether the character before `end` / at `begin` is a word character (\w: letters, digits, _).
bool WordCharBefore(const std::string& s, size_t end) {
  if (end == 0) return false;
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  static const Regex word("^\\w$", "single_word");
  return !word.FindAll(s.substr(k, end - k)).empty();
}

bool WordCharAt(const std::string& s, size_t begin) {
  if (begin >= s.size()) return false;
  static const Regex word("^\\w$", "single_word");
  return !word.FindAll(s.substr(begin, CharLength(s, begin))).empty();
}

// The start of the white space that ends s[0, end).
size_t WhiteSpaceStart(const std::string& s, size_t end) {
  while (end > 0) {
    size_t k = end - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    if (!IsWhiteSpace(CodePointAt(s, k))) break;
    end = k;
  }
  return end;
}

}  // namespace

AddedTokens AddedTokens::FromJson(const JsonNode& node) {
  AddedTokens a;
  if (node.is_null()) return a;
  for (const JsonNode& n : node.Items()) {
    AddedToken t;
    t.id = n.At("id").AsId();
    t.content = n.String("content");
    if (t.content.empty()) n.At("content").Fail("an added token cannot be empty");
    t.match = t.content;
    t.single_word = n.Bool("single_word", false);
    t.lstrip = n.Bool("lstrip", false);
    t.rstrip = n.Bool("rstrip", false);
    t.special = n.Bool("special", false);
    t.normalized = n.Bool("normalized", !t.special);
    a.tokens_.push_back(std::move(t));
  }
  a.Index();
  return a;
}

void AddedTokens::Index() {
  by_first_byte_.assign(256, {});
  by_id_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_id_.emplace(tokens_[i].id, i);
    const std::string& m = tokens_[i].match;
    if (!m.empty()) by_first_byte_[static_cast<unsigned char>(m[0])].push_back(i);
  }
  for (auto& v : by_first_byte_) {
    std::stable_sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].match.size() > tokens_[b].match.size();
    });
  }
}

void AddedTokens::Normalize(const std::function<void(std::string*)>& normalizer) {
  if (!normalizer) return;
  for (AddedToken& t : tokens_) {
    if (t.normalized) normalizer(&t.match);
  }
  Index();
}

const AddedToken* AddedTokens::Find(int64_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::vector<Segment> AddedTokens::Split(const std::string& text, bool at_start,
                                        bool normalized) const {
  std::vector<Segment> out;
  size_t prev = 0;  // the end of the last match
  auto text_until = [&](size_t end) {
    if (end > prev) out.push_back({-1, text.substr(prev, end - prev), at_start && prev == 0});
  };
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* best = nullptr;  // the longest token at pos (the first of equal ones)
    const size_t first = static_cast<unsigned char>(text[pos]);
    const size_t candidates = first < by_first_byte_.size() ? by_first_byte_[first].size() : 0;
    for (size_t c = 0; c < candidates; ++c) {
      const AddedToken& t = tokens_[by_first_byte_[first][c]];
      if (t.normalized == normalized && text.compare(pos, t.match.size(), t.match) == 0) {
        best = &t;
        break;
      }
    }
    if (best == nullptr) {
      pos += CharLength(text, pos);
      continue;
    }
    size_t begin = pos, end = pos + best->match.size();
    pos = end;
    if (best->single_word && (WordCharBefore(text, begin) || WordCharAt(text, end))) continue;
    if (best->lstrip) begin = std::max(WhiteSpaceStart(text, begin), prev);
    if (best->rstrip) {
      while (end < text.size() && IsWhiteSpace(CodePointAt(text, end)))
        end += CharLength(text, end);
    }
    text_until(begin);
    out.push_back({best->id, "", false});
    prev = end;
    pos = std::max(pos, end);
  }
  text_until(text.size());
  return out;
}

}  // namespace tokenizer
