// The install program of a captured graph (protocol/graph.h): a valid one decodes to what was
// encoded; every truncation and every operand replaced by a value of another kind or range is a
// ProtocolError, never a crash or another error.
#include <disco/any.h>
#include <disco/error.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol/graph.h"

namespace disco {
namespace protocol {
namespace {

// graph 7, 2 inputs, reserving registers 5..8: a lookup (5), an install call of it (6), and two
// replay calls (7: input 1 and a value; 8: register 7 and input 0).
std::vector<Any> ValidProgram() {
  return {Any(int64_t{7}), Any(int64_t{2}), Any(int64_t{4}), Any(int64_t{5}), Any(int64_t{6}),
          Any(int64_t{7}), Any(int64_t{8}), Any(int64_t{4}),
          // lookup
          Any(int64_t{0}), Any(int64_t{5}), Any(std::string("my.fn")),
          // install call: f(3)
          Any(int64_t{1}), Any(int64_t{6}), Any(DRef::Unowned(5)), Any(int64_t{0}), Any(int64_t{0}),
          Any(int64_t{1}), Any(int64_t{3}),
          // replay call: f(input 1, "x")
          Any(int64_t{2}), Any(int64_t{7}), Any(DRef::Unowned(5)), Any(int64_t{0}), Any(int64_t{1}),
          Any(int64_t{2}), Any(int64_t{1}), Any(std::string("x")),
          // replay call (collective): f(reg 7, input 0)
          Any(int64_t{2}), Any(int64_t{8}), Any(DRef::Unowned(5)), Any(int64_t{1}), Any(int64_t{2}),
          Any(int64_t{2}), Any(DRef::Unowned(7)), Any(int64_t{0})};
}

TEST(GraphProgramTest, AValidProgramDecodes) {
  std::vector<Any> ops = ValidProgram();
  GraphProgram p = DecodeGraphProgram(ops.data(), ops.size(), 1);
  EXPECT_EQ(p.id, 7);
  EXPECT_EQ(p.num_inputs, 2);
  EXPECT_EQ(p.reserved, (std::vector<int64_t>{5, 6, 7, 8}));
  ASSERT_EQ(p.steps.size(), 4u);
  EXPECT_EQ(p.steps[0].kind, GraphStep::kLookup);
  EXPECT_EQ(p.steps[0].name, "my.fn");
  EXPECT_EQ(p.steps[1].kind, GraphStep::kInstallCall);
  EXPECT_EQ(p.steps[2].inputs, (std::vector<std::pair<uint32_t, uint32_t>>{{0, 1}}));
  EXPECT_TRUE(p.steps[3].collective);
  EXPECT_EQ(p.steps[3].inputs, (std::vector<std::pair<uint32_t, uint32_t>>{{1, 0}}));
}

TEST(GraphProgramTest, EveryTruncationIsAProtocolError) {
  std::vector<Any> ops = ValidProgram();
  for (size_t n = 0; n < ops.size(); ++n) {
    EXPECT_THROW(DecodeGraphProgram(ops.data(), n, 1), ProtocolError) << "cut at " << n;
  }
  ops.push_back(Any(int64_t{0}));
  EXPECT_THROW(DecodeGraphProgram(ops.data(), ops.size(), 1), ProtocolError) << "one too many";
}

TEST(GraphProgramTest, EveryOperandMutatedIsRefusedOrValidNeverWorse) {
  const std::vector<Any> replacements = {
      Any(),           Any(int64_t{-1}), Any(int64_t{0}),        Any(int64_t{1}),
      Any(int64_t{3}), Any(int64_t{65}), Any(int64_t{1} << 40),  Any(INT64_MIN),
      Any(INT64_MAX),  Any(2.5),         Any(std::string("zz")), Any(DRef::Unowned(3))};
  const std::vector<Any> base = ValidProgram();
  int refused = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    for (const Any& r : replacements) {
      std::vector<Any> ops = base;
      ops[i] = r;
      try {
        DecodeGraphProgram(ops.data(), ops.size(), 1);
      } catch (const ProtocolError& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find("install_graph command #1"), std::string::npos);
      }
    }
  }
  EXPECT_GT(refused, static_cast<int>(base.size()));
}

TEST(GraphProgramTest, ClaimedCountsNeverAllocateWhatTheyClaim) {
  std::vector<Any> ops = {Any(int64_t{1}), Any(int64_t{0}), Any(int64_t{1} << 60)};
  EXPECT_THROW(DecodeGraphProgram(ops.data(), ops.size(), 1), ProtocolError);
  ops = {Any(int64_t{1}), Any(int64_t{0}), Any(int64_t{0}), Any(int64_t{1} << 40)};
  EXPECT_THROW(DecodeGraphProgram(ops.data(), ops.size(), 1), ProtocolError);
}

}  // namespace
}  // namespace protocol
}  // namespace disco
