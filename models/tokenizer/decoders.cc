// tokenizer.json's decoders, each a step on the list of token strings as in tokenizers'
// decode_chain: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence. Anything
// else is refused naming its path.
#include <disco/error.h>

#include <memory>

#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tokenizer {
namespace {

// Each token through `f`.
Decoder EachToken(std::function<std::string(const std::string&, size_t)> f) {
  return [f](std::vector<std::string>* tokens) {
    for (size_t i = 0; i < tokens->size(); ++i) (*tokens)[i] = f((*tokens)[i], i);
  };
}

// GPT-2's characters back to bytes; a token with a character outside the map keeps its own bytes.
// The result is one string, its invalid UTF-8 replaced by U+FFFD.
void ByteLevel(std::vector<std::string>* tokens) {
  std::string bytes;
  for (const std::string& t : *tokens) {
    std::string b;
    bool mapped = true;
    for (size_t i = 0; i < t.size() && mapped; i += CharLength(t, i)) {
      const int v = CharToByte(CodePointAt(t, i));
      mapped = v >= 0;
      b += static_cast<char>(v);
    }
    bytes += mapped ? b : t;
  }
  *tokens = {Utf8Lossy(bytes)};
}

// <0xNN> tokens in a row become their bytes: the text when valid UTF-8, else one U+FFFD a byte.
void ByteFallback(std::vector<std::string>* tokens) {
  std::vector<std::string> out;
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (IsValidUtf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out.push_back(kReplacement);
    }
    bytes.clear();
  };
  for (const std::string& t : *tokens) {
    const bool hex = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                     std::isxdigit(static_cast<unsigned char>(t[3])) &&
                     std::isxdigit(static_cast<unsigned char>(t[4]));
    if (hex) {
      bytes += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
    } else {
      flush();
      out.push_back(t);
    }
  }
  flush();
  *tokens = std::move(out);
}

Decoder Metaspace(const JsonNode& node) {
  const std::string rep = node.String("replacement", "\xE2\x96\x81");
  std::string scheme = node.Bool("add_prefix_space", true) ? "always" : "never";
  scheme = node.String("prepend_scheme", scheme);
  const bool strip_first = scheme != "never";
  return EachToken([rep, strip_first](const std::string& t, size_t i) {
    std::string out;
    for (size_t k = 0; k < t.size();) {
      if (!rep.empty() && t.compare(k, rep.size(), rep) == 0) {
        if (!(i == 0 && strip_first)) out += ' ';
        k += rep.size();
      } else {
        out += t[k++];
      }
    }
    return out;
  });
}

Decoder Strip(const JsonNode& node) {
  const std::string content = node.String("content");
  if (content.empty() || CharLength(content, 0) != content.size()) {
    node.At("content").Fail("must be one character, not '" + content + "'");
  }
  const int64_t start = node.Int("start", 0), stop = node.Int("stop", 0);
  return EachToken([=](const std::string& t, size_t) {
    std::vector<std::string> chars;
    for (size_t k = 0; k < t.size(); k += CharLength(t, k))
      chars.push_back(t.substr(k, CharLength(t, k)));
    size_t b = 0, e = chars.size();
    while (b < chars.size() && static_cast<int64_t>(b) < start && chars[b] == content) ++b;
    for (int64_t i = 0; i < stop && e > b && chars[e - 1] == content; ++i) --e;
    std::string out;
    for (size_t k = b; k < e; ++k) out += chars[k];
    return out;
  });
}

}  // namespace

Decoder MakeDecoder(const JsonNode& node) {
  if (node.is_null()) return {};
  const std::string type = node.Type();
  if (type == "Sequence") {
    std::vector<Decoder> parts;
    for (const JsonNode& n : node.At("decoders").Items()) {
      if (Decoder f = MakeDecoder(n)) parts.push_back(std::move(f));
    }
    return [parts](std::vector<std::string>* tokens) {
      for (const Decoder& f : parts) f(tokens);
    };
  }
  if (type == "ByteLevel") return ByteLevel;
  if (type == "ByteFallback") return ByteFallback;
  if (type == "Fuse") {
    return [](std::vector<std::string>* tokens) {
      std::string all;
      for (const std::string& t : *tokens) all += t;
      *tokens = {all};
    };
  }
  if (type == "Metaspace") return Metaspace(node);
  if (type == "Strip") return Strip(node);
  if (type == "Replace") {
    auto re = std::make_shared<Regex>(PatternOf(node.At("pattern")));
    const std::string content = node.String("content");
    return EachToken([re, content](const std::string& t, size_t) {
      std::string out;
      size_t prev = 0;
      for (const auto& [b, e] : re->FindAll(t)) {
        out.append(t, prev, b - prev);
        out += content;
        prev = e;
      }
      return out.append(t, prev, std::string::npos);
    });
  }
  node.Unsupported("decoder", "Sequence, ByteLevel, ByteFallback, Fuse, Metaspace, Strip, Replace");
}

}  // namespace tokenizer
