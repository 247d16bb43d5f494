#include "llama/server/output.h"

#include <algorithm>

namespace llm_server {

Output::Output(const tokenizer::Tokenizer& tok, std::vector<std::string> stop, int64_t max_tokens,
               std::vector<int64_t> eos)
    : decoder_(tok), stop_(std::move(stop)), max_tokens_(max_tokens), eos_(std::move(eos)) {}

size_t Output::Sendable(bool final) {
  size_t first = std::string::npos;
  for (const std::string& s : stop_) {
    // A stop string ends in the new text: search from where it could begin.
    const size_t from = sent_ >= s.size() ? sent_ - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) first = std::min(first, at);
  }
  if (first != std::string::npos) {
    done_ = true;
    text_.resize(std::max(first, sent_));
    return text_.size();
  }
  if (final) return text_.size();
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, text_.size() - sent_); k > hold; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return text_.size() - hold;
}

Piece Output::Add(int64_t id) {
  Piece p;
  if (done_) return p;
  ++count_;
  p.ids.push_back(id);
  const bool eos = std::find(eos_.begin(), eos_.end(), id) != eos_.end();
  const bool last = eos || count_ >= max_tokens_;
  if (!eos) text_ += decoder_.Push(id);
  if (last) text_ += decoder_.Finish();
  const size_t end = Sendable(last);
  p.text = text_.substr(sent_, end - sent_);
  sent_ = end;
  if (done_ || eos) {
    p.finish_reason = "stop";
  } else if (last) {
    p.finish_reason = "length";
  }
  done_ = !p.finish_reason.empty();
  return p;
}

}  // namespace llm_server
