// The timeline's event serializer (core/trace.h): the merged file's events and a failing rank's
// own file (async-signal-safe) are written by one serializer, and names of any bytes stay JSON.
#include "core/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace disco {
namespace trace {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TraceTest, BothWritersWriteTheSameEvents) {
  char dir[] = "/tmp/disco-trace-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/t.json";
  Start(0, path, 16);
  Record(Kind::kCollective, std::string("allreduce \"x\"\n\xff"), 1000, 3500, 4096, 250);
  Record(Kind::kH5Read, std::string("read w"), 5000, 1005000, 2000000, 1);
  Record(Kind::kSync, std::string("SyncAll"), 2000000, 2000001, -1);
  const std::string merged = EventsJson(0, 0, 0, 0, /*origin_ns=*/1000, /*pid=*/0, nullptr);
  EXPECT_NE(merged.find("\"name\":\"allreduce \\\"x\\\"\\u000a\\u00ff\""), std::string::npos)
      << merged;
  EXPECT_NE(merged.find("\"ts\":0.000,\"dur\":2.500,\"args\":{\"bytes\":4096,\"wait_us\":0.250}"),
            std::string::npos)
      << merged;
  // 2 MB in 1 ms: 2000 MB/s.
  EXPECT_NE(merged.find("\"bytes\":2000000,\"datasets\":1,\"MB_per_s\":2000.000"),
            std::string::npos)
      << merged;
  EXPECT_NE(merged.find("\"args\":{\"worker\":-1}"), std::string::npos) << merged;
  WriteRankFile("a test");
  const std::string own = Slurp(path + ".rank0.json");
  // The rank file's origin is its first event's start (1000 ns), as the merged file's above.
  EXPECT_NE(own.find(merged), std::string::npos) << own << "\n---\n" << merged;
  EXPECT_NE(own.find("\"why\":\"a test\""), std::string::npos) << own;
  std::remove((path + ".rank0.json").c_str());
  rmdir(dir);
  Stop();
}

// Names in UTF-8 stay readable in both writers' JSON (a strict parser reads them back as they
// were, where a name cut at kNameBytes - 1 ends in a whole character); ill-formed UTF-8 and control
// characters still give valid JSON.
TEST(TraceTest, Utf8NamesSurviveAndAnyBytesStayJson) {
  char dir[] = "/tmp/disco-trace-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/t.json";
  std::string long_name;
  while (long_name.size() < kNameBytes) long_name += "数";  // cut at 47 bytes: inside a "数"
  const std::string names[] = {"répétition", "函数", long_name, "bad \xff\xe5\x87 \x1b[2J\n"};
  Start(0, path, 16);
  for (const std::string& name : names) Record(Kind::kRun, name, 1000, 2000, 1);
  const std::string merged = EventsJson(0, 0, 0, 0, 0, 0, nullptr);
  ASSERT_GT(merged.size(), 2u);
  WriteRankFile("répétition");
  Stop();
  const std::string own = Slurp(path + ".rank0.json");
  std::remove((path + ".rank0.json").c_str());
  rmdir(dir);
  const std::string cut = long_name.substr(0, (kNameBytes - 1) / 3 * 3);
  for (const std::string& doc : {"[" + merged.substr(0, merged.size() - 2) + "]", own}) {
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(doc)) << doc;
    const nlohmann::json& events = parsed.is_array() ? parsed : parsed["traceEvents"];
    std::vector<std::string> got;
    for (const auto& e : events) {
      if (e.value("ph", "") == "X") got.push_back(e["name"].get<std::string>());
    }
    ASSERT_EQ(got.size(), 4u) << doc;
    EXPECT_EQ(got[0], "répétition");
    EXPECT_EQ(got[1], "函数");
    EXPECT_EQ(got[2], cut);
    EXPECT_EQ(got[3],
              "bad \u00ff\u00e5\u0087 \x1b[2J\n");  // each bad byte: the character of its value
  }
  EXPECT_NE(own.find("\"why\":\"répétition\""), std::string::npos) << own;
}

// A failing rank's file is written (the watchdog's thread) while another thread still records:
// each event in it is one whole event, and under ThreadSanitizer (./launch/test's TSan stage) the
// reads race no write.
TEST(TraceTest, ARankFileWrittenWhileAThreadRecordsHasWholeEvents) {
  char dir[] = "/tmp/disco-trace-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/t.json";
  Start(0, path, 1024);
  std::atomic<int64_t> recorded{0};
  std::atomic<bool> written{false};
  std::thread recorder([&] {
    for (int64_t i = 1; !written.load(std::memory_order_relaxed); ++i) {
      const std::string name = "ev." + std::to_string(i);
      Record(Kind::kRun, name.data(), name.size(), i, i + 1, i);
      recorded.store(i, std::memory_order_relaxed);
    }
  });
  while (recorded.load(std::memory_order_relaxed) < 2048) std::this_thread::yield();
  WriteRankFile("a test");
  written.store(true, std::memory_order_relaxed);
  recorder.join();
  const std::string own = Slurp(path + ".rank0.json");
  const std::regex event(R"re("name":"ev\.(\d+)"[^}]*"args":\{"seq":(\d+)\})re");
  int events = 0;
  for (auto it = std::sregex_iterator(own.begin(), own.end(), event); it != std::sregex_iterator();
       ++it, ++events) {
    EXPECT_EQ((*it)[1].str(), (*it)[2].str()) << it->str();
  }
  EXPECT_GT(events, 0) << own.substr(0, 2000);
  std::remove((path + ".rank0.json").c_str());
  rmdir(dir);
  Stop();
}

}  // namespace
}  // namespace trace
}  // namespace disco
