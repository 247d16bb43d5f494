// disco-bench --json (src/tools/bench_json.cc): the file is JSON whatever the cells hold; number
// literals are numbers, non-finite values null, anything else a string.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tools/bench_common.h"

namespace {

TEST(BenchJsonTest, WritesValidJson) {
  disco::bench::Table table({"name", "value"});
  const char* cells[] = {"12",
                         "-0.500",
                         "1e-3",
                         "inf",
                         "-inf",
                         "nan",
                         "-nan",
                         "1e999",
                         "0x1A",
                         "-",
                         "007",
                         "",
                         "a \"quoted\"\tname\\",
                         "\x01"};
  for (const char* c : cells) table.AddRow({c, c});
  char path[] = "/tmp/disco-bench-json-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  table.WriteJson(path, {"ranks=2", "mpi=Open MPI \"v5\"", "empty"});
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::remove(path);
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(text.str())) << text.str();
  EXPECT_EQ(doc["metadata"]["ranks"], "2");
  EXPECT_EQ(doc["metadata"]["mpi"], "Open MPI \"v5\"");
  EXPECT_EQ(doc["metadata"]["empty"], "");
  const nlohmann::json& rows = doc["rows"];
  ASSERT_EQ(rows.size(), std::size(cells));
  EXPECT_EQ(rows[0]["value"], 12);
  EXPECT_TRUE(rows[0]["value"].is_number_integer());
  EXPECT_EQ(rows[1]["value"], -0.5);
  EXPECT_EQ(rows[2]["value"], 0.001);
  for (int i = 3; i <= 7; ++i) EXPECT_TRUE(rows[i]["value"].is_null()) << cells[i];
  for (int i = 8; i < static_cast<int>(std::size(cells)); ++i) {
    EXPECT_EQ(rows[i]["value"], cells[i]) << i;
    EXPECT_EQ(rows[i]["name"], cells[i]) << i;
  }
  // Columns keep their order.
  EXPECT_LT(text.str().find("\"name\""), text.str().find("\"value\""));
}

TEST(BenchJsonTest, UnwritablePathIsAnError) {
  disco::bench::Table table({"a"});
  EXPECT_THROW(table.WriteJson("/nonexistent-dir/x.json", {}), disco::ValueError);
}

}  // namespace
