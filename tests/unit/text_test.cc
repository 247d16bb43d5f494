// The text policies (core/text.h): names stay readable in log lines and JSON when they are UTF-8
// ("répétition", "函数"), while control characters cannot split or forge a line nor drive a
// terminal, and ill-formed UTF-8 cannot make a JSON file invalid.
#include "core/text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace disco {
namespace text {
namespace {

const std::string kUtf8 = "répétition 函数 \xf0\x9f\x98\x80";  // 2-, 3- and 4-byte characters

TEST(TextTest, LogLineKeepsUtf8AndShowsControlsAndBadBytes) {
  EXPECT_EQ(ForLogLine(kUtf8), kUtf8);
  EXPECT_EQ(ForLogLine("a\nb\tc\x1b[2J\x7f"), "a\\x0ab\\x09c\\x1b[2J\\x7f");
  EXPECT_EQ(ForLogLine("csi \xc2\x9b"), "csi \\xc2\\x9b");  // a C1 control (U+009B)
  EXPECT_EQ(ForLogLine("cut \xe5\x87"), "cut \\xe5\\x87");  // "函" cut short
  EXPECT_EQ(ForLogLine("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(ForLogLine("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(ForLogLine("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(ForLogLine("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(ForLogLine(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(ForLogLine(""), "");
}

TEST(TextTest, LogTextKeepsItsOwnLines) {
  EXPECT_EQ(ForLogText("one\n\ttwo \x1b[0m" + kUtf8), "one\n\ttwo \\x1b[0m" + kUtf8);
  EXPECT_EQ(ForLogText("one\n  indented\n"), "one\n  indented\n");
}

// A name with a newline inside a message (an outside attack made a worker function named so):
// the rest cannot read as a line of its own with the rank prefix.
TEST(TextTest, LogTextIndentsContinuationLines) {
  EXPECT_EQ(ForLogText("failed in 'evil\n[rank 0/2 vm] error: forged'"),
            "failed in 'evil\n  [rank 0/2 vm] error: forged'");
  EXPECT_EQ(ForLogText("a\nb\n\nc"), "a\n  b\n\n  c");
}

TEST(TextTest, QuotedEscapesTheQuote) {
  EXPECT_EQ(Quoted("it's"), "'it\\'s'");
  EXPECT_EQ(Quoted("函数\n"), "'函数\\x0a'");
}

TEST(TextTest, JsonStringFollowsRfc8259) {
  EXPECT_EQ(ForJsonString(kUtf8), kUtf8);
  EXPECT_EQ(ForJsonString("\"q\" \\"), "\\\"q\\\" \\\\");
  EXPECT_EQ(ForJsonString("a\nb\x1f\x7f"), "a\\u000ab\\u001f\\u007f");
  EXPECT_EQ(ForJsonString("\xc2\x85|\xe2\x80\xa8|\xe2\x80\xa9"), "\\u0085|\\u2028|\\u2029");
  EXPECT_EQ(ForJsonString("cut \xe5\x87"), "cut \\u00e5\\u0087");  // each bad byte, as \u00XX
  EXPECT_EQ(ForJsonString(std::string("\0", 1)), "\\u0000");
}

// Any bytes give a JSON string a strict parser (nlohmann checks UTF-8) reads, and well-formed
// UTF-8 reads back as it was.
TEST(TextTest, AnyBytesMakeValidJson) {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005u + 1442695040888963407u;
    return static_cast<char>(state >> 56);
  };
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (int n = i % 24; n > 0; --n) s += next();
    const std::string doc = "\"" + ForJsonString(s) + "\"";
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(doc)) << doc;
    if (ForLogLine(s) == s) {  // no control character, no bad byte: read back as it was
      EXPECT_EQ(parsed.get<std::string>(), s);
    }
  }
  EXPECT_EQ(nlohmann::json::parse("\"" + ForJsonString(kUtf8) + "\"").get<std::string>(), kUtf8);
}

TEST(TextTest, SignalSafePrintableIsAsciiOnly) {
  char buf[] = "a\n\xc3\xa9z";
  SignalSafePrintable(buf, sizeof buf);
  EXPECT_STREQ(buf, "a???z");
  char cut[] = "abcdef";
  SignalSafePrintable(cut, 4);
  EXPECT_STREQ(cut, "abc");
  EXPECT_EQ(SignalSafePrintable('\x1b'), '?');
  EXPECT_EQ(SignalSafePrintable('~'), '~');
}

TEST(TextTest, SignalSafePrintableUtf8KeepsWholeCharacters) {
  char buf[] = "函数\n\xc2\x9b\xff é \xe5\x87";  // a C1 control, a bad byte, a cut "函"
  SignalSafePrintableUtf8(buf, sizeof buf);
  EXPECT_STREQ(buf, "函数???? é ??");
  char cut[] = "ab函";
  SignalSafePrintableUtf8(cut, 4);  // "ab" and the first byte of "函"
  EXPECT_STREQ(cut, "ab?");
}

TEST(TextTest, Utf8CutEndsInAWholeCharacter) {
  const std::string s = "ab函数";  // 2 + 3 + 3 bytes
  EXPECT_EQ(Utf8Cut(s.data(), s.size(), 100), 8u);
  EXPECT_EQ(Utf8Cut(s.data(), s.size(), 8), 8u);
  EXPECT_EQ(Utf8Cut(s.data(), s.size(), 7), 5u);
  EXPECT_EQ(Utf8Cut(s.data(), s.size(), 5), 5u);
  EXPECT_EQ(Utf8Cut(s.data(), s.size(), 4), 2u);
  EXPECT_EQ(Utf8Cut(s.data(), s.size(), 3), 2u);
  const std::string junk(10, '\x80');  // no character starts anywhere: cut where asked
  EXPECT_EQ(Utf8Cut(junk.data(), junk.size(), 6), 6u);
}

}  // namespace
}  // namespace text
}  // namespace disco
