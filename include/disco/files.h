// Files a program keeps between runs, or must not leave behind when it ends badly.
#ifndef DISCO_FILES_H_
#define DISCO_FILES_H_

#include <string>
#include <vector>

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

/// A process that removes paths if this one ends before Release, however it ends (SIGKILL, or a
/// launcher's SIGKILL cutting a signal handler short, which RemoveOnAbnormalExit cannot cover). It
/// is a grandchild in a session of its own that ignores the signals a terminal or launcher sends
/// and holds no descriptor of this process but its end of a socket pair; it removes the entries
/// in order when that socket ends without a word from Release. This process never waits for it:
/// a watcher stopped or killed costs nothing (and then removes nothing). Best effort: when fork
/// fails there is no watcher.
class RemovalWatcher {
 public:
  struct Entry {
    std::string path;
    bool directory = false;  // rmdir (empty by then) rather than unlink
    /// A file is removed only while it holds exactly this text (empty: whatever it holds), so that
    /// a file that another process wrote at the path since stays.
    std::string content;
  };
  explicit RemovalWatcher(std::vector<Entry> entries);
  /// Releases it (the caller removes or keeps the paths itself).
  ~RemovalWatcher();
  RemovalWatcher(const RemovalWatcher&) = delete;
  RemovalWatcher& operator=(const RemovalWatcher&) = delete;

  /// Tells the watcher to end without removing anything.
  void Release();
  /// Whether a watcher was started.
  bool watching() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

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
