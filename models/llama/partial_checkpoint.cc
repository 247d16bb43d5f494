// The default checkpoint's partial directory; see partial_checkpoint.h.
#include "llama/partial_checkpoint.h"

#include <dirent.h>
#include <disco/disco.h>
#include <disco/files.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

namespace llama {
namespace {

constexpr const char* kFiles[] = {"/config.json", "/model.safetensors"};

// Removes a partial checkpoint directory and the files it may hold; true when it is gone.
bool RemovePartialDirectory(const std::string& path) {
  for (const char* f : kFiles) ::unlink((path + f).c_str());
  return ::rmdir(path.c_str()) == 0;
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
void PartialCheckpoint::StartWatcher() {
  std::vector<disco::RemovalWatcher::Entry> entries;
  for (const char* f : kFiles) entries.push_back({path_ + f, false, ""});
  entries.push_back({path_, true, ""});
  watcher_ = std::make_unique<disco::RemovalWatcher>(std::move(entries));
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
  watcher_.reset();  // released: the directory is taken care of (renamed or removed)
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
