// TextPrompts: the checkpoint's tokenizer for --text (without disco_tokenizer, a clear refusal).
#include "llama/text.h"

#include <disco/error.h>

#include <cstdio>

#ifdef DISCO_LLAMA_TOKENIZER
#include "tokenizer/tokenizer.h"
#endif

namespace llama {

#ifdef DISCO_LLAMA_TOKENIZER

struct TextPrompts::State {
  std::vector<tokenizer::StreamDecoder> decoders;
  std::vector<std::string> held;  // the text of prompts 2.. until the end
};

TextPrompts::TextPrompts(const std::string& model, const std::vector<std::string>& texts,
                         int64_t vocab_size, int64_t max_new_tokens)
    : state_(std::make_unique<State>()), max_new_(max_new_tokens) {
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::FromDirectory(model, vocab_size);
  for (size_t i = 0; i < texts.size(); ++i) {
    ids_.push_back(tok.Encode(texts[i]));
    DISCO_CHECK(!ids_.back().empty(), ValueError)
        << "--text " << i + 1 << " is no tokens for " << tok.path() << ": give some text";
    state_->decoders.emplace_back(tok);
  }
  state_->held.resize(texts.size());
}

void TextPrompts::OnStep(int64_t step, const std::vector<int64_t>& tokens) {
  if (step == 0) std::printf("--- text 1 ---\n");
  for (size_t i = 0; i < ids_.size(); ++i) {
    const std::string text = state_->decoders[i].Push(tokens[i * max_new_ + step]);
    if (i == 0) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    } else {
      state_->held[i] += text;
    }
  }
}

void TextPrompts::Finish() {
  for (size_t i = 0; i < ids_.size(); ++i) {
    const std::string text = state_->held[i] + state_->decoders[i].Finish();
    if (i > 0) std::printf("--- text %zu ---\n", i + 1);
    std::fwrite(text.data(), 1, text.size(), stdout);  // the whole text, NUL bytes too
    std::fputc('\n', stdout);
  }
  std::printf("--- end of text ---\n");
  std::fflush(stdout);
}

#else

struct TextPrompts::State {};

TextPrompts::TextPrompts(const std::string&, const std::vector<std::string>&, int64_t, int64_t) {
  DISCO_THROW(ValueError) << "--text needs disco built with its tokenizer library "
                          << "(libpcre2-dev, libsentencepiece-dev, libutf8proc-dev)";
}
void TextPrompts::OnStep(int64_t, const std::vector<int64_t>&) {}
void TextPrompts::Finish() {}

#endif

TextPrompts::~TextPrompts() = default;

}  // namespace llama
