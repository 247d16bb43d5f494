// UTF-8 helpers of the tokenizers: the lossy conversion of bytes to valid UTF-8 (each maximal
// invalid subpart becomes U+FFFD, as Rust's String::from_utf8_lossy and Python's
// bytes.decode("utf-8", "replace") do) and the code points of valid UTF-8 text.
#ifndef DISCO_MODELS_TOKENIZER_UTF8_H_
#define DISCO_MODELS_TOKENIZER_UTF8_H_

#include <cstddef>
#include <string>
#include <vector>

namespace tokenizer {

/// "\xEF\xBF\xBD": U+FFFD, the replacement character.
inline constexpr const char* kReplacement = "\xEF\xBF\xBD";

/// `bytes` as valid UTF-8: every maximal invalid subpart replaced by one U+FFFD.
std::string Utf8Lossy(const std::string& bytes);

/// Whether `bytes` is valid UTF-8.
bool IsValidUtf8(const std::string& bytes);

/// The length of the UTF-8 character starting at text[i] (valid UTF-8 assumed; 1 past an error).
size_t CharLength(const std::string& text, size_t i);

/// The code point of the valid UTF-8 character at text[i].
char32_t CodePointAt(const std::string& text, size_t i);

/// The UTF-8 encoding of `cp`.
std::string EncodeUtf8(char32_t cp);

/// `text` with its control characters written as escapes (\n, \t, \xNN): an error message with
/// a token in it stays one line.
std::string OneLine(const std::string& text);

/// Whether `cp` is white space as Rust's char::is_whitespace (Unicode White_Space).
bool IsWhiteSpace(char32_t cp);

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_UTF8_H_
