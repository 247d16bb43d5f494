// disco::AtomicFile and disco::CommitRename (include/disco/files.h): a file is replaced whole or
// not at all, and no name that exists beside it (a file, a planted symbolic link) is written.
#include <dirent.h>
#include <disco/error.h>
#include <disco/files.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/exit_cleanup.h"

namespace disco {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/disco-files-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static std::string Read(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static void Put(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
  }
  // The names in the directory, sorted.
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    DIR* d = opendir(dir_.c_str());
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

TEST_F(AtomicFileTest, ACommittedFileReplacesItsTargetWhole) {
  Put(Path("out"), "old\n");
  {
    AtomicFile file(Path("out"));
    EXPECT_EQ(file.temp_path().rfind(Path("out") + ".tmp.", 0), 0u) << file.temp_path();
    file.Write("new ");
    file.Write("content\n");
    EXPECT_EQ(Read(Path("out")), "old\n") << "the target changed before the commit";
    file.Commit();
  }
  EXPECT_EQ(Read(Path("out")), "new content\n");
  EXPECT_EQ(Names(), std::vector<std::string>{"out"}) << "the temporary file was left";
}

TEST_F(AtomicFileTest, AnAbandonedFileLeavesTheTargetAndNothingElse) {
  Put(Path("out"), "old\n");
  std::string temp;
  {
    AtomicFile file(Path("out"));
    temp = file.temp_path();
    file.Write("half");
    EXPECT_EQ(access(temp.c_str(), F_OK), 0);
  }
  EXPECT_NE(access(temp.c_str(), F_OK), 0) << "the temporary file outlived its owner";
  EXPECT_EQ(Read(Path("out")), "old\n");
  EXPECT_EQ(Names(), std::vector<std::string>{"out"});
}

TEST_F(AtomicFileTest, TheTemporaryFileGoesOnAnAbnormalExitUntilCommitted) {
  AtomicFile file(Path("out"));
  exit_cleanup::RemoveRegisteredFiles();  // what SIGTERM or a fatal error runs
  EXPECT_NE(access(file.temp_path().c_str(), F_OK), 0) << "not registered for removal";
}

TEST_F(AtomicFileTest, ASymlinkAtTheTargetIsReplacedNotWrittenThrough) {
  Put(Path("victim"), "precious\n");
  ASSERT_EQ(symlink(Path("victim").c_str(), Path("out").c_str()), 0);
  AtomicFile file(Path("out"));
  file.Write("new\n");
  file.Commit();
  struct stat st;
  ASSERT_EQ(lstat(Path("out").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link was kept";
  EXPECT_EQ(Read(Path("victim")), "precious\n") << "written through the link";
  EXPECT_EQ(Read(Path("out")), "new\n");
}

TEST_F(AtomicFileTest, AGivenTemporaryNameThatExistsIsRefusedNotFollowed) {
  Put(Path("victim"), "precious\n");
  ASSERT_EQ(symlink(Path("victim").c_str(), Path("out.partial").c_str()), 0);
  Put(Path("stale"), "stale\n");
  AtomicFileOptions options;
  options.temp = Path("out.partial");
  EXPECT_THROW(AtomicFile(Path("out"), options), RuntimeError);  // a planted link
  options.temp = Path("stale");
  EXPECT_THROW(AtomicFile(Path("out"), options), RuntimeError);  // a file left there
  EXPECT_EQ(Read(Path("victim")), "precious\n");
  EXPECT_EQ(Read(Path("stale")), "stale\n") << "a file that was there was truncated or removed";
  EXPECT_NE(access(Path("out").c_str(), F_OK), 0);
}

TEST_F(AtomicFileTest, ModeIsExactOrLessTheUmask) {
  const mode_t old = umask(022);
  {
    AtomicFile file(Path("key"));  // 0600 by default, whatever the umask
    file.Commit();
    AtomicFileOptions shared;
    shared.mode = 0666;
    shared.apply_umask = true;  // as open() gives it
    AtomicFile out(Path("out"), shared);
    out.Commit();
    AtomicFileOptions exact;
    exact.mode = 0640;
    AtomicFile ro(Path("ro"), exact);
    ro.Commit();
  }
  umask(old);
  struct stat st;
  ASSERT_EQ(stat(Path("key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat(Path("out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ASSERT_EQ(stat(Path("ro").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST_F(AtomicFileTest, AReleasedFileStaysForItsCaller) {
  std::string temp;
  {
    AtomicFile file(Path("out"));
    file.Write("kept\n");
    temp = file.Release();
  }
  EXPECT_EQ(Read(temp), "kept\n");
  EXPECT_EQ(CommitRename(temp, Path("out")), 0);
  EXPECT_EQ(Read(Path("out")), "kept\n");
  EXPECT_EQ(CommitRename(Path("missing"), Path("out")), ENOENT);
  EXPECT_EQ(Read(Path("out")), "kept\n");
}

TEST_F(AtomicFileTest, ADirectoryIsCommittedWithItsFiles) {
  ASSERT_EQ(mkdir(Path("ckpt.partial").c_str(), 0700), 0);
  Put(Path("ckpt.partial/config.json"), "{}\n");
  EXPECT_EQ(CommitRename(Path("ckpt.partial"), Path("ckpt")), 0);
  EXPECT_EQ(Read(Path("ckpt/config.json")), "{}\n");
  // A directory that is there already (another run's) is not replaced.
  ASSERT_EQ(mkdir(Path("other").c_str(), 0700), 0);
  Put(Path("other/x"), "x");
  EXPECT_NE(CommitRename(Path("other"), Path("ckpt")), 0);
  EXPECT_EQ(Read(Path("ckpt/config.json")), "{}\n");
}

}  // namespace
}  // namespace disco
