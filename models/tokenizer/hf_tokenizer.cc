// tokenizer.json: the file read (within bounds, strict JSON), its stages built, and encoding and
// decoding as tokenizers' Tokenizer does: added tokens, normalizer, pre-tokenizer, BPE model,
// post-processor (TemplateProcessing, ByteLevel, Sequence); decoder.
#include <disco/error.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/engine.h"
#include "tokenizer/pipeline.h"

namespace tokenizer {
namespace {

constexpr off_t kMaxFileBytes = off_t{1} << 30;
constexpr int kMaxDepth = 64;

// The ids a post-processor puts around the encoded text when add_special_tokens.
struct Template {
  std::vector<int64_t> before, after;
};

void AddProcessor(const JsonNode& node, Template* t) {
  if (node.is_null()) return;
  const std::string type = node.Type();
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    for (const JsonNode& n : node.At("processors").Items()) AddProcessor(n, t);
    return;
  }
  if (type != "TemplateProcessing") {
    node.Unsupported("post-processor", "TemplateProcessing, ByteLevel, Sequence");
  }
  std::map<std::string, std::vector<int64_t>> special;
  for (const auto& [name, n] : node.At("special_tokens").Members()) {
    for (const JsonNode& id : n.At("ids").Items()) special[name].push_back(id.AsId());
  }
  Template mine;
  bool seen_a = false;
  for (const JsonNode& piece : node.At("single").Items()) {
    if (piece.Has("Sequence")) {
      const std::string id = piece.At("Sequence").String("id");
      if (id != "A" || seen_a)
        piece.Fail("a single template has sequence A once, not '" + id + "'");
      seen_a = true;
    } else if (piece.Has("SpecialToken")) {
      const std::string name = piece.At("SpecialToken").String("id");
      auto it = special.find(name);
      if (it == special.end()) piece.Fail("'" + name + "' is not in special_tokens");
      auto& side = seen_a ? mine.after : mine.before;
      side.insert(side.end(), it->second.begin(), it->second.end());
    } else {
      piece.Fail("a template piece must be a Sequence or a SpecialToken");
    }
  }
  if (!seen_a) node.At("single").Fail("has no sequence A");
  t->before.insert(t->before.end(), mine.before.begin(), mine.before.end());
  t->after.insert(t->after.begin(), mine.after.begin(), mine.after.end());
}

class HfTokenizer : public Engine {
 public:
  explicit HfTokenizer(const JsonNode& root)
      : added_(AddedTokens::FromJson(root.At("added_tokens"))),
        normalizer_(MakeNormalizer(root.At("normalizer"))),
        pre_tokenizer_(MakePreTokenizer(root.At("pre_tokenizer"))),
        model_(Bpe::FromJson(root.At("model"))),
        decoder_(MakeDecoder(root.At("decoder"))) {
    for (const char* key : {"truncation", "padding"}) {
      if (root.Has(key)) root.At(key).Fail("is not supported (it must be null)");
    }
    AddProcessor(root.At("post_processor"), &template_);
    added_.Normalize(normalizer_);
  }

  std::vector<int64_t> Encode(const std::string& text, bool add_special) const override {
    std::vector<int64_t> ids;
    if (add_special) ids = template_.before;
    for (const Segment& raw : added_.Split(text, true, false)) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      std::string normalized = raw.text;
      if (normalizer_) normalizer_(&normalized);
      for (const Segment& seg : added_.Split(normalized, raw.at_start, true)) {
        if (seg.id >= 0) {
          ids.push_back(seg.id);
          continue;
        }
        std::vector<Piece> pieces = {{seg.text, seg.at_start}};
        if (pre_tokenizer_) pre_tokenizer_(&pieces);
        for (const Piece& p : pieces) model_.Encode(p.text, &ids);
      }
    }
    if (add_special) ids.insert(ids.end(), template_.after.begin(), template_.after.end());
    return ids;
  }

  std::string Decode(const std::vector<int64_t>& ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    for (int64_t id : ids) {
      if (const AddedToken* a = added_.Find(id)) {
        if (!(skip_special && a->special)) tokens.push_back(a->match);  // as tokenizers: normalized
      } else if (const std::string* t = model_.IdToToken(id)) {
        tokens.push_back(*t);
      }
    }
    if (decoder_) {
      decoder_(&tokens);
      std::string out;
      for (const std::string& t : tokens) out += t;
      return out;
    }
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }

  bool IsByte(int64_t id) const override {
    const std::string* t = added_.Find(id) != nullptr ? nullptr : model_.IdToToken(id);
    return t != nullptr && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
  }

  int64_t MaxId(std::string* token) const override {
    int64_t best = -1;
    if (const std::string* t = model_.IdToToken(model_.size() - 1)) {
      best = model_.size() - 1;
      *token = *t;
    }
    for (const AddedToken& a : added_.tokens()) {
      if (a.id > best) best = a.id, *token = a.content;
    }
    for (int64_t id : template_.before) {
      if (id > best) best = id, *token = "(a post_processor id)";
    }
    for (int64_t id : template_.after) {
      if (id > best) best = id, *token = "(a post_processor id)";
    }
    return best;
  }

 private:
  AddedTokens added_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  Bpe model_;
  Decoder decoder_;
  Template template_;
};

std::string ReadFile(const std::string& path) {
  struct stat st;
  DISCO_CHECK(::stat(path.c_str(), &st) == 0, ValueError)
      << path << ": cannot read it: " << std::strerror(errno);
  DISCO_CHECK(S_ISREG(st.st_mode), ValueError) << path << ": not a regular file";
  DISCO_CHECK(st.st_size <= kMaxFileBytes, ValueError)
      << path << ": " << st.st_size << " bytes, more than a tokenizer file may have (1 GiB)";
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  DISCO_CHECK(in.good() || in.eof(), ValueError) << path << ": cannot read it";
  return text.str();
}

}  // namespace

std::unique_ptr<Engine> LoadHfTokenizer(const std::string& path) {
  const std::string text = ReadFile(path);
  nlohmann::json j;
  try {
    // Nesting within bounds: the stages are built recursively.
    j = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      DISCO_CHECK(depth <= kMaxDepth, ValueError)
          << path << ": nested deeper than " << kMaxDepth << " levels";
      return true;
    });
  } catch (const nlohmann::json::parse_error& e) {
    DISCO_THROW(ValueError) << path << ": malformed JSON at byte " << e.byte << ": "
                            << std::string(e.what()).substr(std::string(e.what()).rfind(": ") + 2);
  } catch (const nlohmann::json::exception& e) {  // a number out of range (1e999), and others
    const std::string what = e.what();
    DISCO_THROW(ValueError) << path << ": malformed JSON: " << what.substr(what.find("] ") + 2);
  }
  JsonNode root(j, path, "");
  if (!j.is_object()) root.Fail(std::string("is a ") + j.type_name() + ", not an object");
  return std::make_unique<HfTokenizer>(root);
}

}  // namespace tokenizer
