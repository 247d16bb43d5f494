// Text from programs, files and peers (function names, file paths, host names, a rank's state)
// shown in a log line or written into a JSON file: one policy per destination, each named for it.
//
//   ForLogLine(s)         a name inside a log line: every control character (C0 with newline and
//                         tab, DEL, C1) and every byte of ill-formed UTF-8 reads \xNN, so that a
//                         name can neither split nor forge a line, nor drive a terminal;
//                         well-formed UTF-8 ("répétition", "函数") stays as it is.
//   ForLogText(s)         a whole log message: as ForLogLine, but the message's own newlines and
//                         tabs stay, and every continuation line starts indented (two spaces
//                         unless it already starts with a space or tab): a line of the log that
//                         begins with the rank prefix is always a message's first line, whatever
//                         a name inside a message holds.
//   Quoted(s)             'name' inside a log line: ForLogLine, and a quote inside escaped (\'),
//                         so that a name cannot pass for the text around it.
//   ForJsonString(s)      the inside of a JSON string (RFC 8259): " and \ escaped; C0 controls,
//   JsonEscape(s, n, put)   DEL and C1 controls as \u00XX of their code point, U+2028 and U+2029
//                         as \u2028 and \u2029 (JSON that is also JavaScript); well-formed UTF-8
//                         kept as it is; each byte of ill-formed UTF-8 (a name cut inside a
//                         character) as \u00XX of the byte: the file stays valid JSON, and the
//                         byte can still be told. JsonEscape writes through `put(char)` and is
//                         async-signal-safe when `put` is (a failing rank's trace file).
//   SignalSafePrintable   ASCII only, for the lines signal handlers write: every byte that is
//                         not printable ASCII reads '?'. Async-signal-safe.
//   SignalSafePrintableUtf8  in place, for fixed-size fields (a rank's liveness state, its wait
//                         record, cut anywhere): every byte that is not part of a well-formed,
//                         non-control UTF-8 character reads '?'. Async-signal-safe.
//
// Well-formed UTF-8 is RFC 3629's: no overlong forms, no surrogates, nothing above U+10FFFF.
#ifndef DISCO_CORE_TEXT_H_
#define DISCO_CORE_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace disco {
namespace text {

// ---- Async-signal-safe: no allocation, no locks, no stdio.

/// `c` when it is printable ASCII, else '?'.
inline char SignalSafePrintable(char c) { return c < 0x20 || c > 0x7e ? '?' : c; }

/// Makes the NUL-terminated text in `text` (`cap` bytes) printable ASCII in place, and
/// terminates it at `cap` - 1 at the latest.
inline void SignalSafePrintable(char* text, size_t cap) {
  if (cap == 0) return;
  text[cap - 1] = '\0';
  for (size_t i = 0; text[i] != '\0'; ++i) text[i] = SignalSafePrintable(text[i]);
}

/// The length (1 to 4) of the well-formed UTF-8 character that starts `s` (`n` > 0 bytes), or 0
/// when no well-formed character starts there (a stray continuation byte, a cut or overlong
/// sequence, a surrogate, a code point above U+10FFFF).
inline size_t Utf8Length(const char* s, size_t n) {
  const auto b = [s](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = b(0);
  if (lead < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range (RFC 3629's table)
  if (lead >= 0xc2 && lead <= 0xdf) {
    len = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    len = 3;
    if (lead == 0xe0) lo = 0xa0;  // overlong
    if (lead == 0xed) hi = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    len = 4;
    if (lead == 0xf0) lo = 0x90;  // overlong
    if (lead == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return 0;
  }
  if (n < len || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (b(i) < 0x80 || b(i) > 0xbf) return 0;
  }
  return len;
}

/// How many of the `n` bytes of `s` to keep, at most `max`: a cut at `max` moves back to the start
/// of the UTF-8 character it would split (by at most 3 bytes, a character's continuation bytes),
/// so that a name cut short still ends in a whole character.
inline size_t Utf8Cut(const char* s, size_t n, size_t max) {
  if (n <= max) return n;
  size_t cut = max;
  while (cut > 0 && max - cut < 3 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  return (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80 ? max : cut;
}

/// The code point of the well-formed character of `len` bytes (Utf8Length) at `s`.
inline unsigned CodePoint(const char* s, size_t len) {
  const auto b = [s](size_t i) { return static_cast<unsigned>(static_cast<unsigned char>(s[i])); };
  if (len == 1) return b(0);
  unsigned cp = b(0) & (0x7fu >> len);
  for (size_t i = 1; i < len; ++i) cp = cp << 6 | (b(i) & 0x3f);
  return cp;
}

/// A control character: C0 (below U+0020), DEL or C1 (U+0080 to U+009F).
inline bool IsControl(unsigned cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

/// Writes `s` (`n` bytes) as the inside of a JSON string through `put(char)` (the policy above).
template <typename Put>
void JsonEscape(const char* s, size_t n, Put&& put) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto escape = [&put](unsigned v) {  // \uXXXX
    put('\\');
    put('u');
    for (int shift = 12; shift >= 0; shift -= 4) put(kHex[(v >> shift) & 15]);
  };
  for (size_t i = 0; i < n;) {
    const size_t len = Utf8Length(s + i, n - i);
    if (len == 0) {  // a byte of ill-formed UTF-8
      escape(static_cast<unsigned char>(s[i++]));
      continue;
    }
    const unsigned cp = CodePoint(s + i, len);
    if (cp == '"' || cp == '\\') {
      put('\\');
      put(s[i]);
    } else if (IsControl(cp) || cp == 0x2028 || cp == 0x2029) {
      escape(cp);
    } else {
      for (size_t k = 0; k < len; ++k) put(s[i + k]);
    }
    i += len;
  }
}

/// Makes the NUL-terminated text in `text` (`cap` bytes) printable in place, keeping well-formed
/// UTF-8 (SignalSafePrintableUtf8 above), and terminates it at `cap` - 1 at the latest.
inline void SignalSafePrintableUtf8(char* text, size_t cap) {
  if (cap == 0) return;
  text[cap - 1] = '\0';
  size_t n = 0;
  while (text[n] != '\0') ++n;
  for (size_t i = 0; i < n;) {
    const size_t len = Utf8Length(text + i, n - i);
    if (len == 0 || IsControl(CodePoint(text + i, len))) {
      text[i++] = '?';
    } else {
      i += len;
    }
  }
}

// ---- These allocate.

std::string ForLogLine(std::string_view s);
std::string ForLogText(std::string_view s);
std::string Quoted(std::string_view s);
std::string ForJsonString(std::string_view s);

}  // namespace text
}  // namespace disco

#endif  // DISCO_CORE_TEXT_H_
