// Files a program keeps between runs, or must not leave behind when it ends badly.
#ifndef DISCO_FILES_H_
#define DISCO_FILES_H_

#include <string>

namespace disco {

/// A directory in which only this user can create names: `$TMPDIR/disco-u<uid>` (`/tmp/...` when
/// TMPDIR is unset), made with mode 0700 when missing. A program keeps its default files there, so
/// that no other user of a shared /tmp can plant or swap them. Throws ValueError naming the
/// directory when it is a symbolic link or not a directory, belongs to another user, or others can
/// write into it.
std::string PrivateTempDir();

/// Registers `path` (a file, or a directory with the files in it: one level) for removal if the
/// process ends without running destructors: SIGTERM or SIGINT from the launcher, a fatal error,
/// the watchdog. False when it does not fit (8 paths at once, each under 4096 bytes). SIGKILL
/// cannot be caught.
bool RemoveOnAbnormalExit(const std::string& path);
/// Forgets `path` (the program removed or kept it itself).
void ForgetOnAbnormalExit(const std::string& path);

/// How an AtomicFile is made.
struct AtomicFileOptions {
  /// The file's permission bits, given exactly (the umask does not apply) unless apply_umask.
  unsigned mode = 0600;
  /// The bits are `mode` less the umask, as a plain open() gives them (0666: an ordinary output).
  bool apply_umask = false;
  /// The temporary name; empty: `target`.tmp.PID.XXXXXX (random letters, a name no one else holds).
  std::string temp;
};

/// A file written under a temporary name beside `target` and renamed onto it once complete:
/// readers find the old file or the new one whole, never part of one. The temporary file is made
/// with O_CREAT|O_EXCL|O_NOFOLLOW: a name that exists (a file, or a symbolic link planted there) is
/// never opened, written through or truncated; a default name is drawn again, a given one
/// (options.temp) is refused. While it exists it is registered with RemoveOnAbnormalExit, and the
/// destructor removes it unless Commit or Release ran. Errors are RuntimeError naming the file.
class AtomicFile {
 public:
  explicit AtomicFile(std::string target, const AtomicFileOptions& options = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return temp_; }
  /// The open descriptor of the temporary file (-1 after CloseFile).
  int fd() const { return fd_; }
  /// Writes all of `data` at the descriptor's position.
  void Write(const std::string& data);
  /// Syncs and closes the descriptor, for a writer that opens the file by name (HDF5).
  void CloseFile();
  /// Syncs the file, renames it onto `target` and syncs the directory (CommitRename).
  void Commit();
  /// Keeps the temporary file as it is, for its caller to rename or remove; returns its name.
  std::string Release();

 private:
  void Forget();

  std::string target_;
  std::string temp_;
  int fd_ = -1;
};

/// Renames `from` onto `to` (in one file system) durably: `from` is synced first (a file's data, or
/// a directory's entries and the files in it: one level), then renamed, then `to`'s directory is
/// synced (where the file system can), so that after a crash `to` is the old one or the new one,
/// whole. Returns 0, or the errno of the sync or rename that failed (nothing renamed then).
int CommitRename(const std::string& from, const std::string& to);

}  // namespace disco

#endif  // DISCO_FILES_H_
