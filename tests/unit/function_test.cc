#include <disco/function.h>
#include <gtest/gtest.h>

namespace disco {
namespace {

DISCO_REGISTER_GLOBAL("test.unit.add").set_body_typed([](int64_t a, int64_t b) { return a + b; });
DISCO_REGISTER_GLOBAL("test.unit.load")
    .set_body_typed([](std::string path, std::string dataset, int shard_axis,
                       bool in_group) { return path + ":" + dataset; },
                    {"path", "dataset", "shard_axis", "in_group"});
DISCO_REGISTER_GLOBAL("test.unit.packed").set_body_packed([](const Args& args, Any* rv) {
  *rv = static_cast<int64_t>(args.size());
});

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(FunctionTest, TypedAndPackedCalls) {
  Function add = Registry::Get("test.unit.add");
  ASSERT_TRUE(add.defined());
  EXPECT_EQ(add.name(), "test.unit.add");
  EXPECT_EQ(add(2, 40).cast<int64_t>(), 42);
  EXPECT_EQ(Registry::Get("test.unit.packed")(1, "a", 2.0).cast<int64_t>(), 3);
  EXPECT_FALSE(Registry::Get("test.unit.nope").defined());
}

TEST(FunctionTest, ArgumentErrorsNameFunctionPositionAndTypes) {
  Function load = Registry::Get("test.unit.load");
  std::string msg = ErrorOf([&] { load("f.h5", "w", "zero", true); });
  EXPECT_NE(msg.find("test.unit.load: argument 2 (shard_axis): expected int, got string"),
            std::string::npos)
      << msg;
  msg = ErrorOf([&] { Registry::Get("test.unit.add")(1, 2.5); });
  EXPECT_NE(msg.find("test.unit.add: argument 1: expected int, got float"), std::string::npos)
      << msg;
  msg = ErrorOf([&] { load("f.h5", "w", int64_t{1} << 40, true); });
  EXPECT_NE(msg.find("argument 2 (shard_axis): expected int, got int 1099511627776 (out of range)"),
            std::string::npos)
      << msg;
  msg = ErrorOf([&] { load("f.h5"); });
  EXPECT_NE(msg.find("test.unit.load: expected 4 arguments, got 1"), std::string::npos) << msg;
}

TEST(FunctionTest, DuplicateRegistrationIsRefused) {
  EXPECT_THROW(Registry::Register("test.unit.add"), ValueError);
  Registry::Register("test.unit.add", /*can_override=*/true)
      .set_body_typed([](int64_t a, int64_t b) { return a - b; });
  EXPECT_EQ(Registry::Get("test.unit.add")(5, 3).cast<int64_t>(), 2);
  Registry::Register("test.unit.add", true).set_body_typed([](int64_t a, int64_t b) {
    return a + b;
  });
}

TEST(FunctionTest, BodyExceptionsPropagate) {
  Function f = MakeFunction([](const Args&, Any*) { throw ValueError("bad thing"); }, "thrower");
  EXPECT_THROW(f(), ValueError);
}

}  // namespace
}  // namespace disco
