#include <disco/error.h>
#include <disco/files.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

}  // namespace disco
