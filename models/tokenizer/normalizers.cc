// tokenizer.json's normalizers: Sequence, Prepend, Replace, Strip and the Unicode normal forms
// (NFC, NFD, NFKC, NFKD by libutf8proc). Anything else is refused naming its path.
#include <disco/error.h>
#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tokenizer {
namespace {

Normalizer UnicodeForm(const JsonNode& node, utf8proc_option_t options) {
  (void)node;
  return [options](std::string* s) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s->data()),
                     static_cast<utf8proc_ssize_t>(s->size()), &out,
                     static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, std::free);
    DISCO_CHECK(n >= 0, ValueError) << "Unicode normalization failed: " << utf8proc_errmsg(n);
    s->assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  };
}

Normalizer Strip(const JsonNode& node) {
  const bool left = node.Bool("strip_left", true), right = node.Bool("strip_right", true);
  return [left, right](std::string* s) {
    size_t b = 0, e = s->size();
    while (left && b < e && IsWhiteSpace(CodePointAt(*s, b))) b += CharLength(*s, b);
    while (right && e > b) {
      size_t k = e - 1;
      while (k > b && (static_cast<unsigned char>((*s)[k]) & 0xC0) == 0x80) --k;
      if (!IsWhiteSpace(CodePointAt(*s, k))) break;
      e = k;
    }
    *s = s->substr(b, e - b);
  };
}

}  // namespace

Normalizer MakeNormalizer(const JsonNode& node) {
  if (node.is_null()) return {};
  const std::string type = node.Type();
  if (type == "Sequence") {
    std::vector<Normalizer> parts;
    for (const JsonNode& n : node.At("normalizers").Items()) {
      if (Normalizer f = MakeNormalizer(n)) parts.push_back(std::move(f));
    }
    return [parts](std::string* s) {
      for (const Normalizer& f : parts) f(s);
    };
  }
  if (type == "Prepend") {
    const std::string prefix = node.String("prepend");
    return [prefix](std::string* s) {
      if (!s->empty()) s->insert(0, prefix);
    };
  }
  if (type == "Replace") {
    auto re = std::make_shared<Regex>(PatternOf(node.At("pattern")));
    const std::string content = node.String("content");
    return [re, content](std::string* s) {
      std::string out;
      size_t prev = 0;
      for (const auto& [b, e] : re->FindAll(*s)) {
        out.append(*s, prev, b - prev);
        out += content;
        prev = e;
      }
      out.append(*s, prev, std::string::npos);
      *s = std::move(out);
    };
  }
  if (type == "Strip") return Strip(node);
  if (type == "NFC") return UnicodeForm(node, UTF8PROC_COMPOSE);
  if (type == "NFD") return UnicodeForm(node, UTF8PROC_DECOMPOSE);
  if (type == "NFKC")
    return UnicodeForm(node, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD")
    return UnicodeForm(node, static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  node.Unsupported("normalizer", "Sequence, Prepend, Replace, Strip, NFC, NFD, NFKC, NFKD");
}

}  // namespace tokenizer
