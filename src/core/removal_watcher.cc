// disco::RemovalWatcher (disco/files.h): a grandchild that removes paths when its parent ends
// without releasing it.
#include <disco/files.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace disco {
namespace {

// What the watcher needs, laid out before fork: after it, only async-signal-safe calls (the
// parent has threads), so no allocation.
struct Plan {
  std::vector<RemovalWatcher::Entry> entries;
  std::vector<char> buffer;  // a file's text, to compare with an entry's content
};

// True when the file at `path` holds exactly `want` (async-signal-safe).
bool Holds(const char* path, const std::string& want, char* buf, size_t cap) {
  const int fd = ::open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  size_t got = 0;
  for (ssize_t n; got < cap; got += static_cast<size_t>(n)) {
    n = ::read(fd, buf + got, cap - got);
    if (n < 0 && errno == EINTR) {
      n = 0;
      continue;
    }
    if (n <= 0) break;
  }
  ::close(fd);
  return got == want.size() && std::memcmp(buf, want.data(), got) == 0;
}

// The watcher's body. It leaves the parent's session and process group (a launcher's kill reaches
// those), ignores the signals a terminal or launcher sends, closes every descriptor but its socket
// (locks and the launcher's output pipes stay the parent's alone), and waits: a byte means
// released; end of file without one means the parent is gone.
[[noreturn]] void Watch(int fd, Plan& plan) {
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
  if (n != 0) ::_exit(0);
  for (const RemovalWatcher::Entry& e : plan.entries) {
    const char* path = e.path.c_str();
    if (e.directory) {
      ::rmdir(path);
    } else if (e.content.empty() ||
               Holds(path, e.content, plan.buffer.data(), plan.buffer.size())) {
      ::unlink(path);
    }
  }
  ::_exit(0);
}

}  // namespace

RemovalWatcher::RemovalWatcher(std::vector<Entry> entries) {
  Plan plan;
  size_t longest = 0;
  for (const Entry& e : entries) longest = std::max(longest, e.content.size());
  plan.entries = std::move(entries);
  plan.buffer.resize(longest + 1);  // one byte more: a longer file is not a match
  int p[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[1]);
    if (::fork() == 0) Watch(p[0], plan);
    ::_exit(0);
  }
  ::close(p[0]);
  if (pid < 0) {
    ::close(p[1]);
    return;
  }
  // Its parent exits at once and is reaped here; the watcher itself is never waited for.
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  fd_ = p[1];
}

RemovalWatcher::~RemovalWatcher() { Release(); }

void RemovalWatcher::Release() {
  if (fd_ < 0) return;
  const char done = 'd';
  // A socket written with MSG_NOSIGNAL: a watcher that died is no SIGPIPE.
  while (::send(fd_, &done, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace disco
