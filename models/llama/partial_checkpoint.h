// The default checkpoint's directory while it is written: DIR.partial.XXXXXX, renamed to DIR when
// complete, and never left behind however the writer ends (an error, a signal, SIGKILL).
#ifndef DISCO_MODELS_LLAMA_PARTIAL_CHECKPOINT_H_
#define DISCO_MODELS_LLAMA_PARTIAL_CHECKPOINT_H_

#include <disco/files.h>

#include <memory>
#include <string>

namespace llama {

/// A checkpoint being written: DIR.partial.XXXXXX, removed unless Commit renames it to DIR. It is
/// removed on an error (the destructor), on SIGTERM/SIGINT (registered with the runtime), and by a
/// watcher process when this one ends before Commit in a way no handler sees (SIGKILL, or a
/// launcher's SIGKILL cutting the signal handler short on a loaded machine). While it exists its
/// writer holds a lock on it, so a later run removes one that all of these missed
/// (RemoveStalePartials).
class PartialCheckpoint {
 public:
  explicit PartialCheckpoint(const std::string& dir);
  ~PartialCheckpoint();
  PartialCheckpoint(const PartialCheckpoint&) = delete;
  PartialCheckpoint& operator=(const PartialCheckpoint&) = delete;

  const std::string& path() const { return path_; }

  /// Renames the checkpoint to `dir`, its files synced first. When that fails (a run of this user
  /// made it first), `dir` must be a directory of this user's (not a link to one); the partial one
  /// goes either way.
  void Commit(const std::string& dir);

 private:
  void StartWatcher();
  void Forget();
  void Remove();

  std::string path_;
  int fd_ = -1;
  std::unique_ptr<disco::RemovalWatcher> watcher_;
};

/// Removes the partial checkpoints in `parent` (this user's private directory) whose writer is gone
/// and that nothing else removed: it holds no lock on them any more.
void RemoveStalePartials(const std::string& parent);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_PARTIAL_CHECKPOINT_H_
