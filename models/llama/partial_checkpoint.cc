// The default checkpoint's partial directory; see partial_checkpoint.h.
#include "llama/partial_checkpoint.h"

#include <dirent.h>
#include <disco/disco.h>
#include <disco/files.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace llama {
namespace {

constexpr const char* kFiles[] = {"/config.json", "/model.safetensors"};

// Removes a partial checkpoint directory and the files it may hold; true when it is gone.
bool RemovePartialDirectory(const std::string& path) {
  for (const char* f : kFiles) ::unlink((path + f).c_str());
  return ::rmdir(path.c_str()) == 0;
}

// The watcher's body, in a child of the writer: only async-signal-safe calls (the writer has
// threads). It leaves the writer's session and process group (a launcher's kill reaches those),
// ignores the signals a terminal or launcher sends, closes every descriptor but its socket (the
// directory's lock and the launcher's output pipes stay the writer's alone), and waits: a byte
// means the writer is done with the directory; end of file without one means it died.
[[noreturn]] void Watch(int fd, const char* dir, const char* const files[2]) {
  ::setsid();
  struct sigaction ignore;
  std::memset(&ignore, 0, sizeof ignore);
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(sig, &ignore, nullptr);
  if (::dup2(fd, 0) < 0) ::_exit(1);
  ::syscall(SYS_close_range, 1u, ~0u, 0u);
  char byte;
  ssize_t n;
  while ((n = ::read(0, &byte, 1)) < 0 && errno == EINTR) {
  }
  if (n == 0) {
    for (int i = 0; i < 2; ++i) ::unlink(files[i]);
    ::rmdir(dir);
  }
  ::_exit(0);
}

// A name PartialCheckpoint makes: llama-<sizes>.partial.XXXXXX (mkdtemp's six letters and digits).
bool IsPartialName(const std::string& name) {
  const std::string mark = ".partial.";
  const size_t at = name.rfind(mark);
  if (name.rfind("llama-", 0) != 0 || at == std::string::npos) return false;
  if (name.size() != at + mark.size() + 6) return false;
  for (size_t i = at + mark.size(); i < name.size(); ++i) {
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

}  // namespace

PartialCheckpoint::PartialCheckpoint(const std::string& dir) {
  std::string tmpl = dir + ".partial.XXXXXX";
  DISCO_CHECK(mkdtemp(tmpl.data()) != nullptr, ValueError)
      << "cannot create a directory like " << tmpl << ": " << std::strerror(errno);
  path_ = tmpl;
  disco::RemoveOnAbnormalExit(path_);  // with the files in it
  fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) {
    const int err = errno;
    Remove();
    DISCO_THROW(ValueError) << "cannot lock " << path_ << ": " << std::strerror(err);
  }
  StartWatcher();
}

PartialCheckpoint::~PartialCheckpoint() { Remove(); }

// Best effort: without a watcher (no fork), the lock and a later run's RemoveStalePartials remain.
// The watcher is a grandchild (its parent exits at once and is reaped here), so this process never
// waits for it: a watcher that was stopped or killed costs the writer nothing. The channel is a
// socket pair, written with MSG_NOSIGNAL: a dead watcher is no SIGPIPE.
void PartialCheckpoint::StartWatcher() {
  int p[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return;
  const std::string files[2] = {path_ + kFiles[0], path_ + kFiles[1]};
  const char* const names[2] = {files[0].c_str(), files[1].c_str()};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[1]);
    if (::fork() == 0) Watch(p[0], path_.c_str(), names);
    ::_exit(0);
  }
  ::close(p[0]);
  if (pid < 0) {
    ::close(p[1]);
    return;
  }
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  watcher_fd_ = p[1];
}

// Tells the watcher the directory is taken care of (renamed or removed).
void PartialCheckpoint::StopWatcher() {
  if (watcher_fd_ < 0) return;
  const char done = 'd';
  while (::send(watcher_fd_, &done, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  ::close(watcher_fd_);
  watcher_fd_ = -1;
}

void PartialCheckpoint::Commit(const std::string& dir) {
  const int err = disco::CommitRename(path_, dir);
  if (err == 0) {
    Forget();
    path_.clear();
    return;
  }
  Remove();
  struct stat st;
  DISCO_CHECK(::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid(),
              ValueError)
      << "cannot rename the checkpoint written to " << dir << ": " << std::strerror(err) << ", and "
      << dir << " is not a directory of yours";
}

void PartialCheckpoint::Forget() {
  StopWatcher();
  disco::ForgetOnAbnormalExit(path_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void PartialCheckpoint::Remove() {
  if (path_.empty()) return;
  RemovePartialDirectory(path_);
  Forget();
  path_.clear();
}

void RemoveStalePartials(const std::string& parent) {
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!IsPartialName(name)) continue;
    const std::string path = parent + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    // A minute old at least: a run that has just made its partial directory may not hold the
    // lock on it yet.
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_mtime < ::time(nullptr) - 60 &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (RemovePartialDirectory(path))
        std::printf("[checkpoint] removed a stale %s\n", path.c_str());
    }
    ::close(fd);
  }
  ::closedir(d);
}

}  // namespace llama
