// Tokenizer: which file of a checkpoint directory, the check against the model's vocabulary, and
// the streaming decoder.
#include "tokenizer/tokenizer.h"

#include <disco/error.h>
#include <sys/stat.h>

#include "tokenizer/engine.h"
#include "tokenizer/utf8.h"

namespace tokenizer {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string Tokenizer::FileIn(const std::string& dir) {
  for (const char* name : {"/tokenizer.json", "/tokenizer.model"}) {
    struct stat st;
    if (::stat((dir + name).c_str(), &st) == 0) return dir + name;
  }
  return "";
}

Tokenizer Tokenizer::FromDirectory(const std::string& dir, int64_t vocab_size) {
  const std::string path = FileIn(dir);
  DISCO_CHECK(!path.empty(), ValueError)
      << dir << ": no tokenizer (looked for tokenizer.json and tokenizer.model)";
  return FromFile(path, vocab_size);
}

Tokenizer Tokenizer::FromFile(const std::string& path, int64_t vocab_size) {
  DISCO_CHECK(vocab_size >= 0, ValueError)
      << path << ": vocab_size " << vocab_size << " is negative (0: not checked)";
  Tokenizer t;
  t.path_ = path;
  t.engine_ = EndsWith(path, ".model") ? LoadSentencePiece(path) : LoadHfTokenizer(path);
  std::string token;
  const int64_t max_id = t.engine_->MaxId(&token);
  DISCO_CHECK(vocab_size <= 0 || max_id < vocab_size, ValueError)
      << path << ": token '" << OneLine(token) << "' has id " << max_id
      << ", beyond the model's vocabulary (config.json's vocab_size " << vocab_size
      << "): this tokenizer is not the model's";
  return t;
}

std::vector<int64_t> Tokenizer::Encode(const std::string& text, bool add_special_tokens) const {
  return engine_->Encode(Utf8Lossy(text), add_special_tokens);
}

std::string Tokenizer::Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return engine_->Decode(ids, skip_special_tokens);
}

bool Tokenizer::IsByte(int64_t id) const { return engine_->IsByte(id); }

std::string StreamDecoder::Next(bool final) {
  const std::string all = tok_.Decode(ids_, skip_);
  // Text that did not come from what was shown (it cannot, but for a decoder that rewrites earlier
  // text) is left out rather than shown twice.
  if (all.compare(0, shown_.size(), shown_) != 0) return "";
  if (!final && EndsWith(all, kReplacement)) return "";
  std::string out = all.substr(shown_.size());
  shown_ = all;
  return out;
}

std::string StreamDecoder::Push(int64_t id) {
  ids_.push_back(id);
  return tok_.IsByte(id) ? "" : Next(false);
}

std::string StreamDecoder::Finish() { return Next(true); }

}  // namespace tokenizer
