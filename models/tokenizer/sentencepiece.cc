// tokenizer.model through libsentencepiece: encoding, decoding, and BOS (when the model has one)
// for add_special_tokens, as transformers' LlamaTokenizer adds it.
#include <disco/error.h>
#include <sentencepiece_processor.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "tokenizer/engine.h"

namespace tokenizer {
namespace {

class SentencePiece : public Engine {
 public:
  explicit SentencePiece(const std::string& path)
      : path_(path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
    struct stat st;
    DISCO_CHECK(::stat(path.c_str(), &st) == 0, ValueError)
        << path << ": cannot read it: " << std::strerror(errno);
    DISCO_CHECK(S_ISREG(st.st_mode), ValueError) << path << ": not a regular file";
    const auto status = sp_->Load(path);
    DISCO_CHECK(status.ok(), ValueError)
        << path << ": not a SentencePiece model that loads: " << status.ToString();
  }

  std::vector<int64_t> Encode(const std::string& text, bool add_special) const override {
    std::vector<int> ids;
    const auto status = sp_->Encode(text, &ids);
    DISCO_CHECK(status.ok(), ValueError) << path_ << ": cannot encode: " << status.ToString();
    std::vector<int64_t> out;
    if (add_special && sp_->bos_id() >= 0) out.push_back(sp_->bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string Decode(const std::vector<int64_t>& ids, bool skip_special) const override {
    std::vector<int> known;
    for (int64_t id : ids) {
      if (id < 0 || id >= sp_->GetPieceSize()) continue;
      const int i = static_cast<int>(id);
      if (skip_special && (sp_->IsControl(i) || sp_->IsUnknown(i))) continue;
      known.push_back(i);
    }
    std::string text;
    const auto status = sp_->Decode(known, &text);
    DISCO_CHECK(status.ok(), ValueError) << path_ << ": cannot decode: " << status.ToString();
    return text;
  }

  bool IsByte(int64_t id) const override {
    return id >= 0 && id < sp_->GetPieceSize() && sp_->IsByte(static_cast<int>(id));
  }

  int64_t MaxId(std::string* token) const override {
    const int n = sp_->GetPieceSize();
    if (n > 0) *token = sp_->IdToPiece(n - 1);
    return n - 1;
  }

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace

std::unique_ptr<Engine> LoadSentencePiece(const std::string& path) {
  return std::make_unique<SentencePiece>(path);
}

}  // namespace tokenizer
