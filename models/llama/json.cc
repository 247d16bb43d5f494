#include "llama/json.h"

#include <disco/error.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace llama {

Json Json::Bool(bool v) {
  Json j;
  j.kind_ = Kind::kBool;
  j.bool_ = v;
  return j;
}
Json Json::Number(double v) {
  Json j;
  j.kind_ = Kind::kNumber;
  j.number_ = v;
  j.is_int_ = std::isfinite(v) && std::floor(v) == v && std::fabs(v) <= 9007199254740992.0;
  j.int_ = j.is_int_ ? static_cast<int64_t>(v) : 0;
  return j;
}
Json Json::Int(int64_t v) {
  Json j;
  j.kind_ = Kind::kNumber;
  j.number_ = static_cast<double>(v);
  j.is_int_ = true;
  j.int_ = v;
  return j;
}
Json Json::String(std::string v) {
  Json j;
  j.kind_ = Kind::kString;
  j.string_ = std::move(v);
  return j;
}
Json Json::Array(std::vector<Json> v) {
  Json j;
  j.kind_ = Kind::kArray;
  j.array_ = std::move(v);
  return j;
}
Json Json::Object(std::map<std::string, Json> v) {
  Json j;
  j.kind_ = Kind::kObject;
  j.object_ = std::move(v);
  return j;
}

const char* Json::kind_name() const {
  switch (kind_) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "bool";
    case Kind::kNumber:
      return "number";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return "array";
    case Kind::kObject:
      return "object";
  }
  return "?";
}

const Json* Json::Find(const std::string& key) const {
  if (kind_ != Kind::kObject) return nullptr;
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &it->second;
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  Json ParseDocument() {
    SkipSpace();
    Json v = ParseValue(0);
    SkipSpace();
    if (pos_ != s_.size()) Fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& why) const {
    DISCO_THROW(ValueError) << what_ << ": byte " << pos_ << ": " << why;
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Literal(const char* word) {
    for (const char* p = word; *p != '\0'; ++p) {
      if (pos_ >= s_.size() || s_[pos_] != *p) Fail(std::string("expected '") + word + "'");
      ++pos_;
    }
  }

  Json ParseValue(int depth) {
    if (depth > kMaxDepth) Fail("nested deeper than 64 levels");
    if (pos_ >= s_.size()) Fail("unexpected end of the text (a value was expected)");
    char c = s_[pos_];
    switch (c) {
      case '{':
        return ParseObject(depth);
      case '[':
        return ParseArray(depth);
      case '"':
        return Json::String(ParseString());
      case 't':
        Literal("true");
        return Json::Bool(true);
      case 'f':
        Literal("false");
        return Json::Bool(false);
      case 'n':
        Literal("null");
        return Json();
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
        Fail(std::string("unexpected character '") + c + "'");
    }
  }

  Json ParseObject(int depth) {
    ++pos_;  // '{'
    std::map<std::string, Json> members;
    SkipSpace();
    if (Eat('}')) return Json::Object(std::move(members));
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') Fail("expected a string key in an object");
      const size_t key_pos = pos_;
      std::string key = ParseString();
      SkipSpace();
      if (!Eat(':')) Fail("expected ':' after an object key");
      SkipSpace();
      Json v = ParseValue(depth + 1);
      if (members.count(key) != 0) {
        pos_ = key_pos;
        Fail("duplicate key \"" + key + "\"");
      }
      members.emplace(std::move(key), std::move(v));
      SkipSpace();
      if (Eat('}')) break;
      if (!Eat(',')) Fail("expected ',' or '}' in an object");
    }
    return Json::Object(std::move(members));
  }

  Json ParseArray(int depth) {
    ++pos_;  // '['
    std::vector<Json> items;
    SkipSpace();
    if (Eat(']')) return Json::Array(std::move(items));
    while (true) {
      SkipSpace();
      items.push_back(ParseValue(depth + 1));
      SkipSpace();
      if (Eat(']')) break;
      if (!Eat(',')) Fail("expected ',' or ']' in an array");
    }
    return Json::Array(std::move(items));
  }

  unsigned Hex4() {
    if (pos_ + 4 > s_.size()) Fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        --pos_;
        Fail("bad hex digit in a \\u escape");
      }
    }
    return v;
  }

  static void AppendUtf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) Fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        Fail("control character in a string");
      }
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) Fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          unsigned cp = Hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!(pos_ + 2 <= s_.size() && s_[pos_] == '\\' && s_[pos_ + 1] == 'u')) {
              Fail("a high surrogate without its low surrogate");
            }
            pos_ += 2;
            unsigned lo = Hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) Fail("a high surrogate without its low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            Fail("a lone low surrogate");
          }
          AppendUtf8(cp, &out);
          break;
        }
        default:
          --pos_;
          Fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  Json ParseNumber() {
    const size_t start = pos_;
    bool integral = true;
    Eat('-');
    if (pos_ >= s_.size()) Fail("truncated number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else if (s_[pos_] >= '1' && s_[pos_] <= '9') {
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    } else {
      Fail("bad number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') Fail("bad fraction");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') Fail("bad exponent");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    const std::string literal = s_.substr(start, pos_ - start);
    if (integral) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(literal.c_str(), &end, 10);  // NOLINT(runtime/int)
      if (errno == 0 && end != nullptr && *end == '\0') return Json::Int(v);
    }
    double d = std::strtod(literal.c_str(), nullptr);
    if (!std::isfinite(d)) {
      pos_ = start;
      Fail("number out of range: " + literal);
    }
    return Json::Number(d);
  }

  const std::string& s_;
  const std::string& what_;
  size_t pos_ = 0;
};

void DumpString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void DumpTo(const Json& j, std::string* out) {
  switch (j.kind()) {
    case Json::Kind::kNull:
      *out += "null";
      break;
    case Json::Kind::kBool:
      *out += j.as_bool() ? "true" : "false";
      break;
    case Json::Kind::kNumber: {
      if (j.is_int()) {
        *out += std::to_string(j.as_int());
      } else {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", j.as_double());
        *out += buf;
      }
      break;
    }
    case Json::Kind::kString:
      DumpString(j.as_string(), out);
      break;
    case Json::Kind::kArray: {
      out->push_back('[');
      bool first = true;
      for (const Json& v : j.items()) {
        if (!first) out->push_back(',');
        first = false;
        DumpTo(v, out);
      }
      out->push_back(']');
      break;
    }
    case Json::Kind::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, v] : j.members()) {
        if (!first) out->push_back(',');
        first = false;
        DumpString(k, out);
        out->push_back(':');
        DumpTo(v, out);
      }
      out->push_back('}');
      break;
    }
  }
}

}  // namespace

Json Json::Parse(const std::string& text, const std::string& what) {
  return Parser(text, what).ParseDocument();
}

std::string Json::Dump() const {
  std::string out;
  DumpTo(*this, &out);
  return out;
}

}  // namespace llama
