#include "core/text.h"

namespace disco {
namespace text {
namespace {

void AppendHex(unsigned char byte, std::string* out) {  // \xNN
  static constexpr char kHex[] = "0123456789abcdef";
  *out += "\\x";
  *out += kHex[byte >> 4];
  *out += kHex[byte & 15];
}

// The log policies (text.h): control characters and ill-formed bytes as \xNN; newlines and tabs
// kept only when `keep_lines` (a continuation line then indented); `quote`, when not '\0', escaped
// with a backslash.
void AppendForLog(std::string_view s, bool keep_lines, char quote, std::string* out) {
  out->reserve(out->size() + s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8Length(s.data() + i, s.size() - i);
    if (len == 0) {  // a byte of ill-formed UTF-8: it would read as binary
      AppendHex(static_cast<unsigned char>(s[i++]), out);
      continue;
    }
    const unsigned cp = CodePoint(s.data() + i, len);
    if (keep_lines && (cp == '\n' || cp == '\t')) {
      *out += s[i];
      // A continuation line starts indented: only the message's first line begins with the rank
      // prefix, so a name with a newline inside cannot pass off its rest as a line of its own.
      if (cp == '\n' && i + 1 < s.size() && s[i + 1] != ' ' && s[i + 1] != '\t' &&
          s[i + 1] != '\n') {
        *out += "  ";
      }
    } else if (IsControl(cp)) {  // a terminal's escapes, a line break: every byte of it visible
      for (size_t k = 0; k < len; ++k) AppendHex(static_cast<unsigned char>(s[i + k]), out);
    } else {
      if (quote != '\0' && cp == static_cast<unsigned char>(quote)) *out += '\\';
      out->append(s.data() + i, len);
    }
    i += len;
  }
}

}  // namespace

std::string ForLogLine(std::string_view s) {
  std::string out;
  AppendForLog(s, false, '\0', &out);
  return out;
}

std::string ForLogText(std::string_view s) {
  std::string out;
  AppendForLog(s, true, '\0', &out);
  return out;
}

std::string Quoted(std::string_view s) {
  std::string out = "'";
  AppendForLog(s, false, '\'', &out);
  out += '\'';
  return out;
}

std::string ForJsonString(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  JsonEscape(s.data(), s.size(), [&out](char c) { out += c; });
  return out;
}

}  // namespace text
}  // namespace disco
