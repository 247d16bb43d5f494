// Logging: warnings are on by default, and a repeated warning is rate-limited, counting what it
// held back.
#include <disco/log.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace disco {
namespace {

TEST(LogTest, WarningsAreShownByDefault) {
  const char* set = std::getenv("DISCO_LOG_LEVEL");
  if (set != nullptr && *set != '\0') GTEST_SKIP() << "DISCO_LOG_LEVEL is set";
  EXPECT_EQ(GetLogLevel(), LogLevel::kWarn);
}

TEST(LogTest, RateLimitHoldsBackAndCounts) {
  detail::LogRateLimit slow(3600);  // one line an hour: every later call is held back
  uint64_t held = 99;
  EXPECT_TRUE(slow.Allow(&held));
  EXPECT_EQ(held, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(slow.Allow(&held));
  detail::LogRateLimit fast(0.001);
  EXPECT_TRUE(fast.Allow(&held));
  fast.Allow(&held);  // held back, or allowed on a slow machine: either way counted correctly
  usleep(20 * 1000);  // past the period, whatever the load
  held = 99;
  EXPECT_TRUE(fast.Allow(&held));
  EXPECT_LE(held, 1u);
}

TEST(LogTest, ControlCharactersAreEscaped) {
  testing::internal::CaptureStderr();
  LogLine(LogLevel::kError, std::string("name \x1b[2J\x07 bell\x7f end\tok"));
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("name \\x1b[2J\\x07 bell\\x7f end\tok"), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
}

// UTF-8 stays readable; a byte of ill-formed UTF-8 is shown, not written as binary.
TEST(LogTest, Utf8IsKeptAndBadBytesAreShown) {
  testing::internal::CaptureStderr();
  LogLine(LogLevel::kError, std::string("répétition 函数 cut \xe5\x87 \xff"));
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("répétition 函数 cut \\xe5\\x87 \\xff\n"), std::string::npos) << out;
}

TEST(LogTest, TheMacroWritesOneLinePerPeriodFromEachPlace) {
  testing::internal::CaptureStderr();
  for (int i = 0; i < 100; ++i) DISCO_LOG_EVERY_N_SEC(WARN, 3600) << "repeated warning " << i;
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("warn: repeated warning 0"), std::string::npos) << out;
  EXPECT_EQ(out.find("repeated warning 1"), std::string::npos) << out;
}

}  // namespace
}  // namespace disco
