#include "core/exit_cleanup.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace disco {
namespace exit_cleanup {
namespace {

constexpr int kSlots = 8;
constexpr size_t kPathBytes = 4096;
constexpr size_t kContentBytes = 256;

// A slot is free (0), being written or cleared (1), or holds a path (2). Signal handlers read only
// slots in state 2, whose path is complete.
struct Slot {
  std::atomic<int> state{0};
  char path[kPathBytes];
  char content[kContentBytes];
  size_t content_size;  // 0: remove whatever the file holds
};
Slot g_slots[kSlots];

// Removes the directory `path` and the files in it (one level), async-signal-safe: getdents64,
// unlinkat and rmdir. Another thread of the process may still be creating a file in it, so it
// tries a few times.
void RemoveDirectory(const char* path) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    alignas(8) char buf[4096];
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
      for (long at = 0; at < n;) {
        // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
        unsigned short reclen;
        std::memcpy(&reclen, buf + at + 16, sizeof reclen);
        const char* name = buf + at + 19;
        if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) unlinkat(fd, name, 0);
        at += reclen;
      }
    }
    close(fd);
    if (rmdir(path) == 0 || errno == ENOENT) return;
  }
}

// True when the file at `path` holds exactly `size` bytes equal to `content` (async-signal-safe:
// open, read, close and a byte loop).
bool Holds(const char* path, const char* content, size_t size) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[kContentBytes + 1];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t n = read(fd, buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != size) return false;
  for (size_t i = 0; i < size; ++i) {
    if (buf[i] != content[i]) return false;
  }
  return true;
}

}  // namespace

bool RegisterFile(const std::string& path, const std::string& content) {
  if (path.empty() || path.size() >= kPathBytes || content.size() >= kContentBytes) return false;
  for (Slot& s : g_slots) {
    int expected = 0;
    if (!s.state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    std::memcpy(s.content, content.data(), content.size());
    s.content_size = content.size();
    s.state.store(2);
    return true;
  }
  return false;
}

void UnregisterFile(const std::string& path) {
  for (Slot& s : g_slots) {
    int expected = 2;
    if (!s.state.compare_exchange_strong(expected, 1)) continue;
    if (path == s.path) {
      s.state.store(0);
    } else {
      s.state.store(2);
    }
  }
}

void RemoveRegisteredFiles() {
  const int saved = errno;
  for (Slot& s : g_slots) {
    if (s.state.load() != 2) continue;
    if (s.content_size != 0) {
      if (Holds(s.path, s.content, s.content_size)) unlink(s.path);
    } else if (unlink(s.path) != 0 && errno == EISDIR) {
      RemoveDirectory(s.path);
    }
  }
  errno = saved;
}

}  // namespace exit_cleanup
}  // namespace disco
