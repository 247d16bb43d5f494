// Errors a user can cause read as sentences; a broken invariant (a bug) says where it broke.
#include <disco/error.h>
#include <gtest/gtest.h>

#include <string>

namespace {

std::string MessageOf(void (*f)()) {
  try {
    f();
  } catch (const disco::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ErrorTest, AUsersErrorIsTheSentenceAlone) {
  const std::string m = MessageOf([] {
    const int ranks = 3;
    DISCO_CHECK(ranks % 2 == 0, ValueError) << "4 heads cannot be split over " << ranks << " ranks";
  });
  EXPECT_EQ(m.substr(m.find("] ") + 2), "4 heads cannot be split over 3 ranks") << m;
  EXPECT_EQ(m.find(".cc:"), std::string::npos) << m;
  EXPECT_EQ(m.find("check `"), std::string::npos) << m;
  const std::string t = MessageOf([] { DISCO_THROW(RuntimeError) << "cannot open x: denied"; });
  EXPECT_EQ(t.substr(t.find("] ") + 2), "cannot open x: denied") << t;
}

TEST(ErrorTest, AnInternalErrorNamesItsPlaceAndOperands) {
  const std::string m = MessageOf([] {
    const int a = 1, b = 2;
    DISCO_ICHECK_EQ(a, b) << "the counts differ";
  });
  EXPECT_NE(m.find("(1 vs. 2) the counts differ ["), std::string::npos) << m;
  EXPECT_NE(m.find("error_test.cc:"), std::string::npos) << m;
  EXPECT_NE(m.find("internal check `a == b` failed]"), std::string::npos) << m;
}

}  // namespace
