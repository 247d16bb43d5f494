// Regex over libpcre2-8, every handle owned by a unique_ptr.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <disco/error.h>
#include <pcre2.h>

#include <cstdint>

#include "tokenizer/utf8.h"

namespace tokenizer {

struct Regex::Code {
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code{nullptr, pcre2_code_free};
  std::string what;  // where the pattern comes from, for errors
};

namespace {

using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& what) {
  auto code = std::make_shared<Code>();
  code->what = OneLine(what + ": the regular expression '" + pattern + "'");
  int err = 0;
  PCRE2_SIZE offset = 0;
  code->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr));
  if (code->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    DISCO_THROW(ValueError) << code->what
                            << " does not compile: " << reinterpret_cast<const char*>(msg)
                            << " at offset " << offset;
  }
  // Hugging Face's tokenizers split at an empty match too (a pattern such as `x*` splits between
  // every character); disco does not, so such a pattern would give other tokens: refused. (0 is
  // also PCRE2's answer where it cannot tell, e.g. with back references: refused alike.)
  uint32_t min_length = 0;
  pcre2_pattern_info(code->code.get(), PCRE2_INFO_MINLENGTH, &min_length);
  DISCO_CHECK(min_length > 0, ValueError)
      << code->what << " can match the empty string, which disco does not split on as Hugging "
      << "Face's tokenizers do";
  pcre2_jit_compile(code->code.get(), PCRE2_JIT_COMPLETE);  // interpreted where JIT fails
  code_ = std::move(code);
}

Regex Regex::Literal(const std::string& literal, const std::string& what) {
  return Regex("\\Q" + literal + "\\E", what);
}

std::vector<std::pair<size_t, size_t>> Regex::FindAll(const std::string& text) const {
  std::vector<std::pair<size_t, size_t>> out;
  MatchData md(pcre2_match_data_create_from_pattern(code_->code.get(), nullptr),
               pcre2_match_data_free);
  DISCO_CHECK(md != nullptr, RuntimeError) << "pcre2: out of memory";
  const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc =
        pcre2_match(code_->code.get(), s, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {  // e.g. the match limit, against catastrophic backtracking
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      DISCO_THROW(ValueError) << code_->what << " fails on a text of " << text.size()
                              << " bytes: " << reinterpret_cast<const char*>(msg);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[1] > ov[0]) {
      out.emplace_back(ov[0], ov[1]);
      pos = ov[1];
    } else {  // an empty match: on to the next character
      if (ov[0] >= text.size()) break;
      pos = ov[0] + CharLength(text, ov[0]);
    }
  }
  return out;
}

}  // namespace tokenizer
