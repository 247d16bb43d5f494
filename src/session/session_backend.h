// What a Session drives: the in-job MPI session (SessionImpl) today, a remote one over TCP later.
// Session's public methods forward here; DRefs find their backend by generation.
#ifndef DISCO_SESSION_SESSION_BACKEND_H_
#define DISCO_SESSION_SESSION_BACKEND_H_

#include <disco/any.h>
#include <disco/graph.h>
#include <disco/tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace disco {
namespace detail {

class SessionBackend {
 public:
  virtual ~SessionBackend();
  SessionBackend(const SessionBackend&) = delete;
  SessionBackend& operator=(const SessionBackend&) = delete;

  /// Identifies this session to the DRefs it hands out (never reused within a process).
  uint64_t generation() const { return generation_; }

  virtual int num_workers() const = 0;
  virtual int num_groups() const = 0;
  virtual DRef GetGlobalFunc(const std::string& name) = 0;
  /// With `movable`, the backend may move from `args` (CallPacked's own temporaries).
  virtual DRef CallWithPacked(const DRef& func, const Any* args, size_t num_args, bool movable) = 0;
  virtual void CopyToWorker0(const Tensor& host, const DRef& remote) = 0;
  virtual void CopyFromWorker0(const Tensor& host, const DRef& remote) = 0;
  virtual void SyncWorker(int worker_id) = 0;
  virtual void SyncAll() = 0;
  virtual Any DebugGetFromRemote(int64_t reg_id, int worker_id) = 0;
  virtual void DebugSetRegister(int64_t reg_id, const Any& value, int worker_id) = 0;
  /// Ends the session with `exit_code`; returns the job's final exit code. Idempotent.
  virtual int Shutdown(int exit_code) = 0;
  /// Session::Capture (disco/graph.h): BeginCapture, the body, EndCapture (discarding the
  /// capture and rethrowing when the body throws).
  Graph Capture(int num_inputs, const std::function<void(const std::vector<Any>&)>& body);
  /// Capture in two halves (Python's `with sess.capture()`, a remote client's calls between
  /// them): returns the placeholders. EndCapture installs the recording and returns the Graph;
  /// with `discard`, or when the body called what cannot be recorded, it installs only its install
  /// steps (lookups, Empty, whose DRefs were handed out) and throws ValueError.
  virtual std::vector<Any> BeginCapture(int num_inputs) = 0;
  virtual Graph EndCapture(bool discard) = 0;
  /// Replays graph `id` (Graph::Replay checked the inputs' count).
  virtual void ReplayGraph(int64_t id, const std::vector<Any>& inputs) = 0;
  /// Called when the last copy of a Graph of this session goes; never throws.
  virtual void FreeGraph(int64_t id) noexcept = 0;
  /// Throws ValueError naming `what` (and discards the capture) while a capture is recorded.
  virtual void RefuseInCapture(const char* what) { (void)what; }
  /// A cached DRef to a builtin, fetched with GetGlobalFunc on first use.
  const DRef& Builtin(const std::string& name);
  /// Called when the last copy of a DRef of this session goes; never throws.
  virtual void DeallocReg(int64_t reg) noexcept = 0;

 protected:
  /// Registers this backend as one of the process's live sessions.
  SessionBackend();
  /// Unregisters it: DRefs freed from now on (by the derived destructor's members) free nothing.
  /// A derived destructor calls it first.
  void Retire();
  /// Drops the cached builtins (at shutdown, while their frees can still be sent).
  void ClearBuiltins() { builtins_.clear(); }

 private:
  uint64_t generation_;
  std::map<std::string, DRef> builtins_;
};

/// What every copy of a Graph shares: its id, its shape, and the registers its calls use (kept
/// alive while the graph lives). The last copy frees the program on every worker.
struct GraphState {
  uint64_t session = 0;  // the generation of the session that installed it
  int64_t id = 0;
  int num_inputs = 0;
  size_t num_calls = 0;
  std::vector<DRef> keep;
  ~GraphState();
};

/// The input index a capture's placeholder stands for, or -1 (graph.cc).
int64_t PlaceholderIndex(const Any& a);
/// Whether `a` is a tuple or dict that holds a placeholder, at any depth (a placeholder is
/// substituted only as an argument of its own).
bool NestsPlaceholder(const Any& a);

/// The live session of this process with the given generation (nullptr when it has ended).
SessionBackend* LiveSession(uint64_t generation);

}  // namespace detail
}  // namespace disco

#endif  // DISCO_SESSION_SESSION_BACKEND_H_
