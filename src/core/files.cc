#include <dirent.h>
#include <disco/error.h>
#include <disco/files.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "core/exit_cleanup.h"

namespace disco {

std::string PrivateTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string dir = base != nullptr && base[0] != '\0' ? base : "/tmp";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  dir += "/disco-u" + std::to_string(geteuid());
  if (::mkdir(dir.c_str(), 0700) != 0) {
    DISCO_CHECK(errno == EEXIST, ValueError)
        << "cannot create the private directory " << dir << ": " << std::strerror(errno)
        << " (set TMPDIR to a directory you can write)";
  }
  struct stat st;
  DISCO_CHECK(::lstat(dir.c_str(), &st) == 0, ValueError)
      << "cannot stat " << dir << ": " << std::strerror(errno);
  const char* why = nullptr;
  if (S_ISLNK(st.st_mode)) {
    why = "is a symbolic link";
  } else if (!S_ISDIR(st.st_mode)) {
    why = "is not a directory";
  } else if (st.st_uid != geteuid()) {
    why = "belongs to another user";
  } else if ((st.st_mode & 022) != 0) {
    why = "can be written by other users";
  }
  DISCO_CHECK(why == nullptr, ValueError)
      << "the private directory " << dir << " " << why << " (uid " << st.st_uid << ", mode "
      << std::oct << (st.st_mode & 07777) << std::dec << "): remove it, or set TMPDIR elsewhere";
  return dir;
}

bool RemoveOnAbnormalExit(const std::string& path) { return exit_cleanup::RegisterFile(path); }

void ForgetOnAbnormalExit(const std::string& path) { exit_cleanup::UnregisterFile(path); }

namespace {

// The directory of `path` ("." for a bare name).
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// `target`.tmp.PID.XXXXXX: a fresh name for each try (another process, or a link planted there,
// may hold the last one).
std::string DrawTempName(const std::string& target) {
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static thread_local std::mt19937_64 random{std::random_device{}()};
  std::string name = target + ".tmp." + std::to_string(getpid()) + ".";
  for (int i = 0; i < 6; ++i) name += kLetters[random() % (sizeof kLetters - 1)];
  return name;
}

// 0, or errno: syncs the file or directory `path` names (without following a link).
int SyncPath(const std::string& path, bool directory) {
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return errno;
  const int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

// 0, or errno: syncs the directory `dir` and the regular files in it (one level).
int SyncDirectoryTree(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    int err = 0;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_type != DT_REG) continue;
      const int e2 = SyncPath(dir + "/" + e->d_name, false);
      if (err == 0) err = e2;
    }
    ::closedir(d);
    if (err != 0) return err;
  }
  return SyncPath(dir, true);
}

}  // namespace

int CommitRename(const std::string& from, const std::string& to) {
  struct stat st;
  if (::lstat(from.c_str(), &st) != 0) return errno;
  const int synced = S_ISDIR(st.st_mode) ? SyncDirectoryTree(from) : SyncPath(from, false);
  // A file system that cannot sync (EINVAL: a pipe-like or special file system) is no failure.
  if (synced != 0 && synced != EINVAL) return synced;
  if (std::rename(from.c_str(), to.c_str()) != 0) return errno;
  SyncPath(DirectoryOf(to), true);  // some file systems cannot sync a directory: best effort
  return 0;
}

AtomicFile::AtomicFile(std::string target, const AtomicFileOptions& options)
    : target_(std::move(target)) {
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  const bool drawn = options.temp.empty();
  // A drawn name that exists is drawn again: 100 tries cannot all meet names that others hold
  // unless something plants them on purpose.
  for (int tries = 0; tries < 100 && fd_ < 0; ++tries) {
    temp_ = drawn ? DrawTempName(target_) : options.temp;
    fd_ = ::open(temp_.c_str(), flags, options.mode & 07777);
    if (fd_ < 0 && (!drawn || errno != EEXIST)) break;
  }
  DISCO_CHECK(fd_ >= 0, RuntimeError) << "cannot create '" << temp_ << "' (to replace '" << target_
                                      << "'): " << std::strerror(errno);
  RemoveOnAbnormalExit(temp_);
  // open's mode passes through the umask: the bits asked for are given exactly.
  if (!options.apply_umask && ::fchmod(fd_, options.mode & 07777) != 0) {
    const int err = errno;
    ::close(fd_);
    ::unlink(temp_.c_str());
    Forget();
    DISCO_THROW(RuntimeError) << "cannot give '" << temp_ << "' the mode " << std::oct
                              << (options.mode & 07777) << std::dec << ": " << std::strerror(err);
  }
}

AtomicFile::~AtomicFile() {
  if (temp_.empty()) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_.c_str());
  ForgetOnAbnormalExit(temp_);
}

void AtomicFile::Write(const std::string& data) {
  DISCO_ICHECK(fd_ >= 0) << "AtomicFile::Write after CloseFile";
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    DISCO_CHECK(n > 0, RuntimeError) << "cannot write '" << temp_ << "': " << std::strerror(errno);
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::CloseFile() {
  if (fd_ < 0) return;
  int err = 0;
  if (::fsync(fd_) != 0 && errno != EINVAL) err = errno;  // EINVAL: a file system that cannot
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  DISCO_CHECK(err == 0, RuntimeError) << "cannot write '" << temp_ << "': " << std::strerror(err);
}

void AtomicFile::Commit() {
  CloseFile();
  const int err = CommitRename(temp_, target_);
  DISCO_CHECK(err == 0, RuntimeError)
      << "cannot rename '" << temp_ << "' to '" << target_ << "': " << std::strerror(err);
  Forget();
}

std::string AtomicFile::Release() {
  CloseFile();
  std::string temp = temp_;
  Forget();
  return temp;
}

void AtomicFile::Forget() {
  ForgetOnAbnormalExit(temp_);
  temp_.clear();
}

}  // namespace disco
