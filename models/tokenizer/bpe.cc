// Bpe: loading tokenizer.json's model and merging words.
#include "tokenizer/bpe.h"

#include <disco/error.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>
#include <tuple>

#include "tokenizer/utf8.h"

namespace tokenizer {
namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 24;

uint64_t PairKey(int64_t a, int64_t b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
}

// A merge's two tokens: "a b" or ["a", "b"].
std::pair<std::string, std::string> MergeOf(const JsonNode& n) {
  if (n.json().is_string()) {
    const std::string s = n.AsString();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
      n.Fail("merge '" + s + "' is not two tokens separated by one space");
    }
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  std::vector<JsonNode> items = n.Items();
  if (items.size() != 2) n.Fail("a merge must be two tokens, not " + std::to_string(items.size()));
  return {items[0].AsString(), items[1].AsString()};
}

void RefuseUnsupported(const JsonNode& node) {
  const JsonNode dropout = node.At("dropout");
  if (!dropout.is_null() && !(dropout.json().is_number() && dropout.json().get<double>() == 0.0)) {
    dropout.Fail("BPE dropout " + dropout.json().dump() +
                 " is not supported (encoding is "
                 "deterministic here)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!node.String(key, "").empty()) {
      node.At(key).Fail(std::string("is not supported (") + key + " must be null)");
    }
  }
}

}  // namespace

Bpe Bpe::FromJson(const JsonNode& node) {
  if (node.is_null()) node.Fail("is missing");
  if (node.Type() != "BPE") node.Unsupported("model", "BPE");
  RefuseUnsupported(node);
  Bpe m;
  for (const auto& [token, id_node] : node.At("vocab").Members()) {
    const int64_t id = id_node.AsId();
    if (id >= kMaxVocab) id_node.Fail("id " + std::to_string(id) + " is beyond 2^24");
    auto [it, added] = m.tokens_.emplace(id, token);
    if (!added) id_node.Fail("id " + std::to_string(id) + " is also '" + it->second + "'s");
    m.max_id_ = std::max(m.max_id_, id);
    m.vocab_[token] = id;
  }
  int64_t rank = 0;
  for (const JsonNode& n :
       node.At("merges").is_null() ? std::vector<JsonNode>{} : node.At("merges").Items()) {
    const auto [a, b] = MergeOf(n);
    const int64_t ia = m.TokenToId(a), ib = m.TokenToId(b), iab = m.TokenToId(a + b);
    if (ia < 0 || ib < 0 || iab < 0) {
      n.Fail("merge '" + a + " " + b + "': '" +
             (ia < 0   ? a
              : ib < 0 ? b
                       : a + b) +
             "' is not in model.vocab");
    }
    m.merges_.emplace(PairKey(ia, ib), std::make_pair(rank++, iab));
  }
  const std::string unk = node.String("unk_token", "");
  if (!unk.empty()) {
    m.unk_ = m.TokenToId(unk);
    if (m.unk_ < 0) node.At("unk_token").Fail("'" + unk + "' is not in model.vocab");
  }
  m.byte_fallback_ = node.Bool("byte_fallback", false);
  m.fuse_unk_ = node.Bool("fuse_unk", false);
  m.ignore_merges_ = node.Bool("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.byte_ids_[b] = m.TokenToId(name);
  }
  return m;
}

const std::string* Bpe::IdToToken(int64_t id) const {
  auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

int64_t Bpe::TokenToId(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void Bpe::InitialSymbols(const std::string& word, std::vector<int64_t>* symbols) const {
  bool last_unk = false;
  for (size_t i = 0; i < word.size(); i += CharLength(word, i)) {
    const std::string c = word.substr(i, CharLength(word, i));
    if (const int64_t id = TokenToId(c); id >= 0) {
      symbols->push_back(id);
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : c) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : c) symbols->push_back(byte_ids_[b]);
        last_unk = false;
        continue;
      }
    }
    if (unk_ < 0) continue;  // tokenizers drops the character
    if (!(fuse_unk_ && last_unk)) symbols->push_back(unk_);
    last_unk = true;
  }
}

// Merges as tokenizers' Word::merge_all: a queue of candidate pairs, lowest rank first, then
// leftmost; a candidate whose pair has changed since it was queued is skipped. O(n log n).
void Bpe::Encode(const std::string& word, std::vector<int64_t>* ids) const {
  if (ignore_merges_) {
    if (const int64_t id = TokenToId(word); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  std::vector<int64_t> s;
  InitialSymbols(word, &s);
  const auto n = static_cast<int64_t>(s.size());
  std::vector<int64_t> prev(s.size()), next(s.size());
  std::vector<bool> alive(s.size(), true);
  for (int64_t i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  using Candidate = std::tuple<int64_t, int64_t, int64_t>;  // rank, position, merged id
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int64_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(s[pos], s[next[pos]]));
    if (it != merges_.end()) queue.emplace(it->second.first, pos, it->second.second);
  };
  for (int64_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const auto [rank, pos, merged] = queue.top();
    queue.pop();
    if (!alive[pos] || next[pos] < 0) continue;
    auto it = merges_.find(PairKey(s[pos], s[next[pos]]));
    if (it == merges_.end() || it->second.second != merged) continue;
    const int64_t right = next[pos];
    s[pos] = merged;
    alive[right] = false;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    consider(prev[pos]);
    consider(pos);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (alive[i]) ids->push_back(s[i]);
  }
}

}  // namespace tokenizer
