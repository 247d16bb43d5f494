// The HDF5 tensor store (include/disco/h5.h): the disco.h5.load / disco.h5.save builtins and the
// controller helpers.
//
// Every rank first checks what it can alone (the file, the dataset, its type and shape, the axis)
// with a plain read-only open, then the ranks of the communicator agree on success; only then do
// they open the file together for collective I/O. With parallel HDF5 that is MPI-IO with each
// rank's hyperslab; without it (or with DISCO_H5_INDEPENDENT=1) each rank reads its hyperslab on
// its own, and saves write one rank after another.
#include "io/h5.h"

#include <disco/files.h>
#include <disco/function.h>
#include <disco/log.h>
#include <disco/worker.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "io/h5_handles.h"
#include "io/progress.h"

namespace disco {
namespace io {

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Gives `fresh` (a new file about to replace `old`) the permission bits and, where this process
// may, the owner and group of `old`: a save replaces a file's content, not who may read it (a
// private 0600 checkpoint stays private). Nothing when `old` does not exist.
void KeepModeAndOwner(const std::string& old, const std::string& fresh, const std::string& where) {
  struct stat st;
  if (stat(old.c_str(), &st) != 0) return;
  DISCO_CHECK(chmod(fresh.c_str(), st.st_mode & 07777) == 0, RuntimeError)
      << where << ": cannot give '" << fresh << "' the mode of '" << old
      << "': " << std::strerror(errno);
  struct stat now;
  if (stat(fresh.c_str(), &now) == 0 && (now.st_uid != st.st_uid || now.st_gid != st.st_gid) &&
      chown(fresh.c_str(), st.st_uid, st.st_gid) != 0) {
    // Only root gives a file away; the group may still be kept.
    if (chown(fresh.c_str(), static_cast<uid_t>(-1), st.st_gid) != 0 || now.st_uid != st.st_uid) {
      DISCO_LOG_EVERY_N_SEC(WARN, 60)
          << where << ": '" << old << "' was owned by uid " << st.st_uid << "; the saved file "
          << "is owned by this process's user (only root can keep another owner)";
    }
  }
}

namespace {

void RegisterAll() {
  Registry::Register("disco.h5.load", true)
      .set_body_typed(
          [](std::string path, std::string dataset, int64_t shard_axis, bool in_group) -> Tensor {
#if DISCO_HAVE_HDF5
            progress::Begin("loading", path);
            Tensor t = Load(path, dataset, shard_axis, in_group);
            progress::Done(static_cast<int64_t>(t.nbytes()));
            return t;
#else
            DISCO_THROW(ValueError) << "disco.h5.load: this build of disco has no HDF5";
            return Tensor();
#endif
          },
          {"path", "dataset", "shard_axis", "in_group"});
  for (bool in_place : {false, true}) {
    // disco.h5.save_in_place writes `path` directly: for h5::SaveTensors' own partial file.
    Registry::Register(in_place ? "disco.h5.save_in_place" : "disco.h5.save", true)
        .set_body_typed(
            [in_place](std::string path, std::string dataset, Any shard, int64_t shard_axis,
                       bool in_group) {
#if DISCO_HAVE_HDF5
              progress::Begin("saving", path);
              Save(path, dataset, shard, shard_axis, in_group, in_place);
              const Tensor* t = std::get_if<Tensor>(&shard.storage());
              progress::Done(t != nullptr ? static_cast<int64_t>(t->nbytes()) : 0);
#else
              DISCO_THROW(ValueError) << "disco.h5.save: this build of disco has no HDF5";
#endif
            },
            {"path", "dataset", "shard", "shard_axis", "in_group"});
  }
  // Used by h5::SaveTensors: worker 0 renames `from` to `to`, or removes `from` when `to` is "".
  Registry::Register("disco.h5.finish", true)
      .set_body_typed(
          [](std::string from, std::string to) {
            if (ThisWorker().worker_id != 0) return;
            if (to.empty()) {
              // A file that is not there is removed already (a read-only filesystem answers
              // EROFS, not ENOENT, for a missing one).
              if (access(from.c_str(), F_OK) != 0) return;
              DISCO_CHECK(std::remove(from.c_str()) == 0 || errno == ENOENT, RuntimeError)
                  << "disco.h5.finish: cannot remove '" << from << "': " << std::strerror(errno);
              return;
            }
            const std::string real = ResolveLinks(to, "disco.h5.finish");
            KeepModeAndOwner(real, from, "disco.h5.finish");
            const int err = CommitRename(from, real);  // synced: the old file or the new, whole
            DISCO_CHECK(err == 0, RuntimeError) << "disco.h5.finish: cannot rename '" << from
                                                << "' to '" << real << "': " << std::strerror(err);
            progress::End(from, to);
          },
          {"from", "to"});
  // Appended by h5::LoadTensors after its loads: worker 0's closing progress line (io/progress.h).
  Registry::Register("disco.h5.load_done", true)
      .set_body_typed([](std::string path) { progress::End(path); }, {"path"});
}

}  // namespace

// The file a save replaces: `path`, or where its symbolic links lead. A save writes through a link
// (as `cp` and a shell's `>` do), so `latest.h5 -> step-100.h5` stays a link and step-100.h5 gets
// the data; a dangling link's target is created. As the kernel's fs.protected_symlinks does for
// open(), a link in a sticky directory that others can write into (/tmp) is followed only when it
// is this user's or the directory owner's: another user's link there would aim this user's write
// (root's, say) at a file of their choosing.
std::string ResolveLinks(const std::string& path, const std::string& where) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    struct stat dir;
    const std::string parent = DirectoryOf(p);
    if (stat(parent.c_str(), &dir) == 0 && (dir.st_mode & S_ISVTX) != 0 &&
        (dir.st_mode & S_IWOTH) != 0) {
      DISCO_CHECK(st.st_uid == geteuid() || st.st_uid == dir.st_uid, ValueError)
          << where << ": '" << p << "' is a symbolic link of uid " << st.st_uid
          << " in the shared directory '" << parent
          << "' (sticky, writable by all), which a save does not follow (as the kernel's "
             "fs.protected_symlinks does not): remove it or save elsewhere";
    }
    std::vector<char> buf(PATH_MAX + 1);
    ssize_t n = readlink(p.c_str(), buf.data(), buf.size() - 1);
    DISCO_CHECK(n > 0, RuntimeError)
        << where << ": cannot read the symbolic link '" << p << "': " << std::strerror(errno);
    std::string target(buf.data(), static_cast<size_t>(n));
    p = target[0] == '/' ? target : DirectoryOf(p) + "/" + target;
  }
  DISCO_THROW(ValueError) << where << ": '" << path
                          << "' is a chain of more than 40 symbolic links (a loop?)";
}

void RegisterH5Builtins() {
  static std::once_flag once;
  std::call_once(once, RegisterAll);
}

}  // namespace io

}  // namespace disco
