// The checkpoint JSON reader (models/llama/json.h): valid documents, every refusal with its
// message, the bounds, Dump, and the peak memory of reading a safetensors header (measured in a
// child process by its peak resident set, /proc/self/status's VmHWM; no timing).
#include <disco/error.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "llama/json.h"
#include "llama/safetensors.h"

namespace {

using llama::Json;
using llama::JsonLimits;

// An error's message without the "[rank -/- host] " before it (a user's error has no place after).
std::string Message(const disco::Error& e) {
  std::string s = e.what();
  return s.substr(s.find("] ") + 2);
}

// The message Parse throws for `text`, or "" when it parses.
std::string ParseError(const std::string& text, const JsonLimits& limits = JsonLimits()) {
  try {
    Json::Parse(text, "doc.json", limits);
  } catch (const disco::ValueError& e) {
    return Message(e);
  }
  return "";
}

std::string HeaderError(const std::string& text) {
  try {
    Json::ParseSafetensorsHeader(text, "m.safetensors (safetensors header)");
  } catch (const disco::ValueError& e) {
    return Message(e);
  }
  return "";
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonTest, ParsesDocuments) {
  Json j = Json::Parse(
      R"( {"a": [1, -2, 3.5, true, false, null], "b": {"c": "x\"y\\z\n\u00e9\ud83d\ude00"},
           "e": 1e3, "f": -0, "g": 4096.0, "h": ""} )",
      "doc.json");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.members().size(), 6u);
  const Json* a = j.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->is_array());
  ASSERT_EQ(a->items().size(), 6u);
  EXPECT_TRUE(a->items()[0].is_int());
  EXPECT_EQ(a->items()[1].as_int(), -2);
  EXPECT_FALSE(a->items()[2].is_int());
  EXPECT_DOUBLE_EQ(a->items()[2].as_double(), 3.5);
  EXPECT_EQ(a->items()[3].kind(), Json::Kind::kBool);
  EXPECT_TRUE(a->items()[3].as_bool());
  EXPECT_FALSE(a->items()[4].as_bool());
  EXPECT_TRUE(a->items()[5].is_null());
  EXPECT_EQ(j.Find("b")->Find("c")->as_string(), "x\"y\\z\n\xC3\xA9\xF0\x9F\x98\x80");
  // Written with an exponent or a fraction: a double, integral or not (a size in config.json
  // must be written as an integer).
  EXPECT_FALSE(j.Find("e")->is_int());
  EXPECT_DOUBLE_EQ(j.Find("e")->as_double(), 1000);
  EXPECT_EQ(j.Find("f")->as_int(), 0);
  EXPECT_FALSE(j.Find("g")->is_int());
  EXPECT_EQ(j.Find("g")->Dump(), "4096.0");
  EXPECT_EQ(j.Find("h")->as_string(), "");
  EXPECT_EQ(j.Find("missing"), nullptr);
  EXPECT_EQ(a->Find("a"), nullptr);  // not an object
  EXPECT_EQ(Json::Parse("7", "doc.json").as_int(), 7);
  EXPECT_EQ(Json::Parse("\"s\"", "doc.json").kind_name(), std::string("string"));
}

TEST(JsonTest, IntegersThatInt64DoesNotHoldAreNotInts) {
  EXPECT_EQ(Json::Parse("9223372036854775807", "d").as_int(), INT64_MAX);
  EXPECT_EQ(Json::Parse("-9223372036854775808", "d").as_int(), INT64_MIN);
  for (const char* big :
       {"9223372036854775808", "18446744073709551616", "1e19", "2.5", "9007199254740994.0"}) {
    Json j = Json::Parse(big, "d");
    EXPECT_TRUE(j.is_number()) << big;
    EXPECT_FALSE(j.is_int()) << big;
    EXPECT_EQ(j.as_int(), 0) << big;
  }
  Json huge = Json::Parse("1" + std::string(300, '0'), "d");  // 1e300: a double, not an int
  EXPECT_FALSE(huge.is_int());
  // Past double: refused, as before.
  EXPECT_NE(ParseError("1" + std::string(400, '0')).find("doc.json: byte "), std::string::npos);
  EXPECT_NE(ParseError("1e999").find("number overflow"), std::string::npos);
}

TEST(JsonTest, RefusesWhatIsNotJson) {
  const char* bad[] = {"",          "   ",       "{",           "[1,]",         "{\"a\":1,}",
                       "[1] [2]",   "{'a': 1}",  "NaN",         "[Infinity]",   "[-inf]",
                       "[01]",      "[1.]",      "[.5]",        "[+1]",         "tru",
                       "\"\x01\"",  "\"\\x\"",   "\"\\ud800\"", "\"\\udc00x\"", "\"\xff\"",
                       "/* c */ 1", "{\"a\" 1}", "{1: 2}",      "[1 2]",        "\"abc"};
  for (const char* text : bad) {
    const std::string e = ParseError(text);
    EXPECT_EQ(e.rfind("doc.json: byte ", 0), 0u) << "'" << text << "': " << e;
  }
  // The message says why; no raw bytes of the input in it.
  EXPECT_NE(ParseError("{\"a\" 1}").find("expected ':'"), std::string::npos);
  EXPECT_EQ(ParseError("\"\xff\"").find('\xff'), std::string::npos);
}

TEST(JsonTest, RefusesDuplicateKeys) {
  const std::string e = ParseError(R"({"a": 1, "b": {"c": 1, "c": 2}})");
  EXPECT_NE(e.find("doc.json: byte 26: duplicate key \"c\""), std::string::npos) << e;
  EXPECT_NE(ParseError(R"({"a": 1, "a": 1})").find("duplicate key \"a\""), std::string::npos);
  EXPECT_EQ(ParseError(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})"), "");
}

TEST(JsonTest, BoundsNesting) {
  EXPECT_EQ(ParseError(Nested(65)), "");  // the innermost empty array is at depth 64
  EXPECT_NE(ParseError(Nested(66)).find("nested deeper than 64 levels"), std::string::npos);
  EXPECT_NE(ParseError(std::string(100000, '[')).find("nested deeper than 64 levels"),
            std::string::npos);
  JsonLimits shallow;
  shallow.max_depth = 2;
  EXPECT_EQ(ParseError("[[1]]", shallow), "");
  EXPECT_NE(ParseError("[[[1]]]", shallow).find("nested deeper than 2 levels"), std::string::npos);
}

TEST(JsonTest, BoundsValuesAndBytes) {
  JsonLimits few;
  few.max_values = 4;
  EXPECT_EQ(ParseError("[1, 2, 3]", few), "");
  EXPECT_NE(ParseError("[1, 2, 3, 4]", few).find("more than 4 values"), std::string::npos);
  EXPECT_NE(ParseError(R"({"a": {"b": [1]}, "c": 2})", few).find("more than 4 values"),
            std::string::npos);
  JsonLimits small;
  small.max_bytes = 8;
  EXPECT_EQ(ParseError("[1,2,3]", small), "");
  EXPECT_EQ(ParseError("[1,2,3,4]", small),
            "doc.json: 9 bytes of JSON, more than the 8 this reader accepts");
  // The default bound on values: an array of 2^20 + 1 zeros is refused.
  std::string zeros = "[0";
  for (int i = 0; i < (1 << 20); ++i) zeros += ",0";
  zeros += "]";
  EXPECT_NE(ParseError(zeros).find("more than 1048576 values"), std::string::npos);
}

TEST(JsonTest, SafetensorsHeader) {
  const std::string ok =
      R"({"__metadata__": {"format": "pt", "note": "x"},
          "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})";
  Json h = Json::ParseSafetensorsHeader(ok, "m");
  ASSERT_TRUE(h.is_object());
  EXPECT_TRUE(h.Find("__metadata__")->is_object());
  EXPECT_TRUE(h.Find("__metadata__")->members().empty());  // checked, then left out
  EXPECT_EQ(h.Find("w")->Find("shape")->items()[1].as_int(), 3);
  EXPECT_EQ(HeaderError(R"({"__metadata__": null})"), "");
  EXPECT_EQ(HeaderError("{}"), "");

  const std::pair<const char*, const char*> bad[] = {
      {R"({"__metadata__": {"x": [0, 0]}})", "\"__metadata__\" holds an array at \"x\""},
      {R"({"__metadata__": {"x": {"y": "z"}}})", "\"__metadata__\" holds an object at \"x\""},
      {R"({"__metadata__": {"x": 1}})", "\"__metadata__\" holds a number at \"x\""},
      {R"({"__metadata__": [1]})", "\"__metadata__\" is an array, not an object of strings"},
      {R"({"__metadata__": {}, "__metadata__": {}})", "duplicate key \"__metadata__\""},
      {"[0, 0, 0]", "the safetensors header is an array, not an object"},
      {R"({"w": 1})", "tensor 'w': the entry is a number, not an object"},
      {R"({"w": {"shape": [1], "shape": [2]}})", "duplicate key \"shape\""},
      {R"({"w": {"dtype": "F32", "shape": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
          1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "data_offsets": [0, 4]}})",
       "tensor 'w': the entry holds more than 32 values"},
  };
  for (const auto& [text, needle] : bad) {
    const std::string e = HeaderError(text);
    EXPECT_EQ(e.rfind("m.safetensors (safetensors header): byte ", 0), 0u) << text << ": " << e;
    EXPECT_NE(e.find(needle), std::string::npos) << text << ": " << e;
  }
}

TEST(JsonTest, Dump) {
  const std::string text =
      R"({"a":[1,-2,3.5,true,false,null],"b":{"c":"x\"y\\z\n\u0001"},"e":1e-06})";
  Json j = Json::Parse(text, "doc.json");
  EXPECT_EQ(j.Dump(), R"({"a":[1,-2,3.5,true,false,null],"b":{"c":"x\"y\\z\n\u0001"},"e":1e-06})");
  EXPECT_EQ(Json::Parse(j.Dump(), "again").Dump(), j.Dump());
  Json o = Json::Object({{"z", Json::Int(1)}, {"a", Json::Number(0.1)}, {"m", Json::Number(2)}});
  EXPECT_EQ(o.Dump(), R"({"a":0.1,"m":2,"z":1})");
  EXPECT_EQ(Json::Array({Json::String("\xC3\xA9"), Json()}).Dump(), "[\"\xC3\xA9\",null]");
  EXPECT_THROW(Json::String("\xff").Dump(), disco::ValueError);
}

TEST(JsonTest, CopiesAreDeep) {
  Json a = Json::Object({{"k", Json::Array({Json::Int(1)})}});
  Json b = a;
  b = Json::Object({{"k", Json::String("s")}});
  EXPECT_EQ(a.Dump(), R"({"k":[1]})");
  Json c = a;
  EXPECT_EQ(c.Dump(), a.Dump());
  Json& alias = c;
  c = alias;  // self-assignment keeps the value
  EXPECT_EQ(c.Dump(), R"({"k":[1]})");
  EXPECT_EQ(sizeof(Json), 16u);
}

// ---- Peak memory (outside testing's T4): a 12 MB header, read as Checkpoint::Open reads it.

// A field of /proc/self/status in KiB ("VmHWM:", the peak resident set), or -1.
int64_t StatusKiB(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size()));
  }
  return -1;
}

// Runs `f` in a child process; returns how far the child's peak resident memory rose above what
// it had when it started (KiB), and what `f` returned. The child first gives the free memory the
// allocator keeps back to the system, so that `f`'s allocations show, and starts the peak again
// from the current size (clear_refs 5; where that is refused the peak since fork is the base,
// which can only hide growth, never invent it).
std::pair<int64_t, std::string> PeakGrowthKiB(const std::function<std::string()>& f) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::malloc_trim(0);
    std::ofstream("/proc/self/clear_refs") << "5";
    const int64_t before = StatusKiB("VmHWM:");
    std::string out;
    try {
      out = f();
    } catch (const std::exception& e) {
      out = e.what();
    }
    const int64_t after = StatusKiB("VmHWM:");
    const std::string msg = std::to_string(before < 0 ? -1 : after - before) + " " + out;
    const bool written =
        ::write(fds[1], msg.data(), msg.size()) == static_cast<ssize_t>(msg.size());
    ::_exit(written ? 0 : 1);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  const size_t space = msg.find(' ');
  if (space == std::string::npos) return {-1, msg};
  return {std::stoll(msg.substr(0, space)), msg.substr(space + 1)};
}

#if defined(__SANITIZE_THREAD__)
#define DISCO_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DISCO_TEST_TSAN 1
#endif
#endif

// A directory with a tiny Llama config.json, removed with what the test wrote into it.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/disco-json-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/config.json")
        << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
              "vocab_size": 256, "max_position_embeddings": 128, "torch_dtype": "float32"})";
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::remove((dir_ + "/model.safetensors").c_str());
    std::remove((dir_ + "/config.json").c_str());
    ::rmdir(dir_.c_str());
  }
  // `name` in the directory: a safetensors file of `header` and `data`.
  void WriteSafetensors(const std::string& name, const std::string& header,
                        const std::string& data) {
    std::ofstream f(dir_ + "/" + name, std::ios::binary);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    f << header << data;
  }
  std::string dir_;
};

class HeaderMemoryTest : public CheckpointTest {
 protected:
  void SetUp() override {
#ifdef DISCO_TEST_TSAN
    GTEST_SKIP() << "ThreadSanitizer's shadow memory inflates the peak; the plain and ASan builds "
                    "measure it";
#endif
    CheckpointTest::SetUp();
  }
  // model.safetensors with `header` and 24 bytes of data (one F32 tensor of 6).
  void WriteHeader(const std::string& header) {
    WriteSafetensors("model.safetensors", header, std::string(24, '\0'));
  }
  // Opens the checkpoint in a child: peak growth (KiB) and "ok" or the error.
  std::pair<int64_t, std::string> Open() {
    return PeakGrowthKiB([this] {
      llama::Checkpoint ck = llama::Checkpoint::Open(dir_);
      return std::string(ck.Find("w") != nullptr ? "ok" : "no tensor w");
    });
  }
};

constexpr size_t kHeaderBytes = size_t{12} << 20;
constexpr char kTensor[] = R"("w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})";

TEST_F(HeaderMemoryTest, MetadataArrayIsRefusedWithoutAllocating) {
  std::string header = R"({"__metadata__": {"x": [0)";
  while (header.size() < kHeaderBytes) header += ",0";
  header += "]}, " + std::string(kTensor) + "}";
  WriteHeader(header);
  const auto [kib, result] = Open();
  ASSERT_GE(kib, 0) << "no /proc/self/status";
  std::printf("peak resident memory grew by %lld KiB reading a %zu KiB header\n",
              static_cast<long long>(kib), kHeaderBytes / 1024);  // NOLINT(runtime/int)
  EXPECT_NE(result.find("\"__metadata__\" holds an array at \"x\""), std::string::npos) << result;
  // The header text itself (12 MiB) and little more; 3x its size at most (86x before).
  EXPECT_LE(kib, static_cast<int64_t>(3 * kHeaderBytes / 1024)) << "peak grew by " << kib << " KiB";
}

TEST_F(HeaderMemoryTest, LargeMetadataIsCheckedAndDropped) {
  std::string header = R"({"__metadata__": {)";
  for (int i = 0; header.size() < kHeaderBytes; ++i) {
    header += "\"k" + std::to_string(i) + "\": \"v\", ";
  }
  header += R"("last": "v"}, )" + std::string(kTensor) + "}";
  WriteHeader(header);
  const auto [kib, result] = Open();
  ASSERT_GE(kib, 0) << "no /proc/self/status";
  std::printf("peak resident memory grew by %lld KiB reading a %zu KiB header\n",
              static_cast<long long>(kib), kHeaderBytes / 1024);  // NOLINT(runtime/int)
  EXPECT_EQ(result, "ok");
  EXPECT_LE(kib, static_cast<int64_t>(3 * kHeaderBytes / 1024)) << "peak grew by " << kib << " KiB";
}

// A safetensors file moved over the checkpoint's name after Checkpoint::Open (a download or sync
// finishing mid-load): the slices still come from the file whose header was read, not a mix.
TEST_F(CheckpointTest, SlicesComeFromTheFileOpened) {
  const std::string& dir = dir_;
  auto write = [&](const std::string& name, float first) {
    std::string data;
    for (int i = 0; i < 6; ++i) {
      const float v = first + static_cast<float>(i);
      data.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    WriteSafetensors(name, "{" + std::string(kTensor) + "}", data);
  };
  write("model.safetensors", 1);
  llama::Checkpoint ck = llama::Checkpoint::Open(dir);
  write("next.safetensors", 7);
  ASSERT_EQ(std::rename((dir + "/next.safetensors").c_str(), (dir + "/model.safetensors").c_str()),
            0);
  float got[6] = {};
  ck.ReadSlice(*ck.Find("w"), 0, 2, 0, 3, llama::DType::kF32, got);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got[i], 1.0f + static_cast<float>(i)) << "element " << i;
  EXPECT_NO_THROW(ck.CheckUnchanged());
  // Written in place (cp, scp, rsync --inplace over it): the same descriptor reads the new bytes,
  // so the load is refused. Past the file times' granularity (a clock tick) first.
  llama::Checkpoint again = llama::Checkpoint::Open(dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::fstream f(dir + "/model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-4, std::ios::end);
    const float v = 42;
    f.write(reinterpret_cast<const char*>(&v), sizeof v);
  }
  try {
    again.CheckUnchanged();
    ADD_FAILURE() << "a file written in place was not seen";
  } catch (const disco::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("changed while the weights were read from it"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
