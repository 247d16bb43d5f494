// The flight recorder (session/flight_recorder.h, session/flight_record.h): the thread running
// commands writes its records while another thread reads them (the watchdog's dump, a hang
// verdict's state). Under ThreadSanitizer (./launch/test's TSan stage) a read that races the writer
// fails the test; in any build, every record read names the function of its own command, or says it
// was being recorded.
#include "session/flight_record.h"

#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <string>
#include <thread>

#include "session/flight_recorder.h"
#include "session/watchdog.h"

namespace disco {
namespace watchdog {
namespace {

TEST(FlightRecordTest, DumpsWhileTheCommandThreadRecordsReadWholeRecords) {
  constexpr int kDumps = 100;
  std::atomic<int> dumps{0};
  std::atomic<bool> recording{false};
  testing::internal::CaptureStderr();
  std::thread commands([&] {
    for (uint64_t seq = 1; dumps.load(std::memory_order_relaxed) < kDumps; ++seq) {
      Begin(seq, "call", "fn." + std::to_string(seq));
      End();
      recording.store(true, std::memory_order_relaxed);
    }
  });
  while (!recording.load(std::memory_order_relaxed)) std::this_thread::yield();
  for (int i = 0; i < kDumps; ++i) {
    Dump("SIGUSR1");
    dumps.fetch_add(1, std::memory_order_relaxed);
  }
  commands.join();
  const std::string out = testing::internal::GetCapturedStderr();
  const std::regex line(R"(command #(\d+) \(call 'fn\.(\d+)'(, being recorded)?\))");
  int records = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it, ++records) {
    const std::smatch& m = *it;
    if (!m[3].matched) {
      EXPECT_EQ(m[1].str(), m[2].str()) << m.str();
    }
  }
  EXPECT_GT(records, 0) << out.substr(0, 2000);
}

TEST(FlightRecordTest, ReadGivesWhatWasWrittenAndCutNamesSaySo) {
  FlightRecord slot;
  const std::string long_name(100, 'f');
  slot.Write(7, "call", 4, long_name.data(), long_name.size(), 1000);
  CommandRecord r = slot.Read();
  EXPECT_EQ(r.seq, 7u);
  EXPECT_STREQ(r.action, "call");
  EXPECT_EQ(std::string(r.function), std::string(60, 'f') + "...");
  EXPECT_EQ(r.start_ns, 1000);
  EXPECT_EQ(r.duration_ns, -1);
  EXPECT_FALSE(r.torn);
  slot.SetDuration(250);
  r = slot.Read();
  EXPECT_EQ(r.duration_ns, 250);
  slot.Write(8, "shutdown", 8, "", 0, 2000);
  r = slot.Read();
  EXPECT_EQ(r.seq, 8u);
  EXPECT_STREQ(r.function, "");
  EXPECT_EQ(r.duration_ns, -1);
}

// A record in a log line: a UTF-8 name stays readable; a newline or a terminal's escape in a name
// cannot split or forge the line, and a quote in it cannot close the quoted name.
TEST(FlightRecordTest, DescribeKeepsUtf8AndOneLine) {
  Begin(7, "call", "répétition.函数");
  EXPECT_EQ(recorder::Describe(recorder::Last()), "command #7 (call 'répétition.函数')");
  End();
  Begin(8, "call", "f'\n[rank 1] error: \x1b[2Jx");
  EXPECT_EQ(recorder::Describe(recorder::Last()),
            "command #8 (call 'f\\'\\x0a[rank 1] error: \\x1b[2Jx')");
  End();
}

}  // namespace
}  // namespace watchdog
}  // namespace disco
