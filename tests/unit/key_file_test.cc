// Key files of served jobs (remote/key.h) and the files removed on an abnormal exit
// (core/exit_cleanup.h).
#include <disco/error.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "core/exit_cleanup.h"
#include "remote/key.h"

namespace disco {
namespace {

// Each case runs in a fresh temporary directory, and goes back where it was.
class KeyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(getcwd(old_, sizeof old_), nullptr);
    char dir[] = "/tmp/disco-key-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    ASSERT_EQ(chdir(dir), 0);
  }
  void TearDown() override {
    ASSERT_EQ(chdir(old_), 0);
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  char old_[PATH_MAX];
  std::string dir_;
};

TEST_F(KeyFileTest, ABareKeyFileNameIsAFileInTheCurrentDirectory) {
  remote::WriteKeyFile("mykey", "0123456789abcdef0123456789abcdef");
  struct stat st;
  ASSERT_EQ(stat("mykey", &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(remote::ReadKeyFile("mykey"), "0123456789abcdef0123456789abcdef");
  remote::WriteKeyFile("sub/key", "k");  // a missing directory (the last one) is made, 0700
  ASSERT_EQ(stat("sub", &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(remote::ReadKeyFile("sub/key"), "k");
  EXPECT_THROW(remote::WriteKeyFile("nowhere/at/all", "k"), RuntimeError);
}

TEST_F(KeyFileTest, RegisteredFilesGoOnAnAbnormalExitAndForgottenOnesStay) {
  for (const char* name : {"a", "b"}) {
    FILE* f = std::fopen(name, "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  const std::string a = dir_ + "/a", b = dir_ + "/b";
  ASSERT_TRUE(exit_cleanup::RegisterFile(a));
  ASSERT_TRUE(exit_cleanup::RegisterFile(b));
  exit_cleanup::UnregisterFile(b);
  exit_cleanup::RemoveRegisteredFiles();
  EXPECT_NE(access(a.c_str(), F_OK), 0) << "a registered file was left";
  EXPECT_EQ(access(b.c_str(), F_OK), 0) << "a forgotten file was removed";
  exit_cleanup::UnregisterFile(a);
  EXPECT_FALSE(exit_cleanup::RegisterFile(std::string(5000, 'x')));  // too long for the table
}

// Every rank of a served job registers its key file with the key: a rank removes it only while it
// holds that key, never a file that another server wrote at the same path since.
TEST_F(KeyFileTest, AFileRegisteredWithItsContentGoesOnlyWhileItHoldsIt) {
  const std::string mine = dir_ + "/mine.key", theirs = dir_ + "/theirs.key";
  remote::WriteKeyFile(mine, "0123456789abcdef0123456789abcdef");
  remote::WriteKeyFile(theirs, "fedcba9876543210fedcba9876543210");
  ASSERT_TRUE(
      exit_cleanup::RegisterFile(mine, remote::KeyFileContent("0123456789abcdef0123456789abcdef")));
  ASSERT_TRUE(exit_cleanup::RegisterFile(
      theirs, remote::KeyFileContent("0123456789abcdef0123456789abcdef")));
  exit_cleanup::RemoveRegisteredFiles();
  EXPECT_NE(access(mine.c_str(), F_OK), 0) << "the file holding the registered key was left";
  EXPECT_EQ(access(theirs.c_str(), F_OK), 0) << "a file holding another key was removed";
  exit_cleanup::UnregisterFile(mine);
  exit_cleanup::UnregisterFile(theirs);
  EXPECT_FALSE(exit_cleanup::RegisterFile(mine, std::string(300, 'k')));  // content too long
}

}  // namespace
}  // namespace disco
