// The controller side of a session: register allocation and the free list, frame building and
// broadcast, worker 0 in line, replies, and the queue of remote errors.
#ifndef DISCO_SESSION_SESSION_IMPL_H_
#define DISCO_SESSION_SESSION_IMPL_H_

#include <disco/session.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "protocol/serializer.h"
#include "session/config.h"
#include "session/mpi_transport.h"
#include "session/session_backend.h"
#include "session/worker.h"

namespace disco {

namespace detail {

/// The in-job session on rank 0: MPI transport, worker 0 in process.
class SessionImpl final : public SessionBackend {
 public:
  /// Kills wait in a list and ride on the next frame; past this many they go out on their own.
  static constexpr size_t kMaxPendingKills = 16;

  SessionImpl(MpiTransport* transport, const SessionConfig& config, const WorkerInfo& worker0);
  ~SessionImpl() override;

  int num_workers() const override { return transport_->size(); }
  int num_groups() const override { return static_cast<int>(config_.num_groups); }
  const SessionConfig& config() const { return config_; }

  DRef GetGlobalFunc(const std::string& name) override;
  DRef CallWithPacked(const DRef& func, const Any* args, size_t num_args, bool movable) override;
  void CopyToWorker0(const Tensor& host, const DRef& remote) override;
  void CopyFromWorker0(const Tensor& host, const DRef& remote) override;
  /// Worker 0's tensor in register `remote` (in process), once worker 0 has run every command
  /// sent so far. `what` names the caller in errors.
  Tensor Worker0Tensor(const DRef& remote, const char* what);
  void SyncWorker(int worker_id) override;
  void SyncAll() override;
  Any DebugGetFromRemote(int64_t reg_id, int worker_id) override;
  void DebugSetRegister(int64_t reg_id, const Any& value, int worker_id) override;
  /// Ends the session with `exit_code` and returns the job's final exit code (1 when remote
  /// errors were never observed by the controller). Idempotent.
  int Shutdown(int exit_code) override;
  bool is_shut_down() const { return shut_down_; }
  /// Parks workers 1..N-1: they wait for the next command sleeping instead of spinning in MPI
  /// (for a controller about to wait on something else: a served job between requests, a long
  /// local computation). The next frame wakes them first, at a cost of up to kParkMaxSleepUs.
  /// Runs worker 0's deferred call first; a no-op when already parked or alone.
  void ParkWorkers();
  bool workers_parked() const { return parked_; }

  void DeallocReg(int64_t reg) noexcept override;

  std::vector<Any> BeginCapture(int num_inputs) override;
  Graph EndCapture(bool discard) override;
  bool capturing() const { return recording_ != nullptr; }
  void ReplayGraph(int64_t id, const std::vector<Any>& inputs) override;
  void FreeGraph(int64_t id) noexcept override;
  void RefuseInCapture(const char* what) override { CheckNotCapturing(what); }

  Worker& worker0() { return worker0_; }
  /// For tests: the next frame carries a sequence number `delta` ahead, so workers see a
  /// desynchronised stream.
  void TestSkipSequence(uint64_t delta) { seq_ += delta; }
  /// For tests: broadcasts `n` raw bytes as if they were a frame (n <= inline bytes).
  void TestBroadcastRaw(const uint8_t* data, size_t n);
  /// For tests: forgets the cached builtins, so that the next use of each looks it up anew.
  void TestClearBuiltins() { ClearBuiltins(); }
  int64_t register_count() const { return reg_count_; }

 private:
  void CheckLive(const char* what) const;
  /// Throws ValueError naming `what` when a capture is being recorded (and discards it): syncs,
  /// copies, debug calls, InitCCL, Shutdown and nested captures cannot be recorded.
  void CheckNotCapturing(const char* what);
  // A capture being recorded (graph.cc): every register allocated, in order; the install
  // operands' steps (see Worker::InstallGraph); registers this capture looked up, by name; the
  // registers the replayed calls write; the registers the program uses (alive with the graph);
  // why the capture was discarded ("" while it is not).
  struct Recording {
    int64_t serial = 0;  // which capture of this session (its placeholders carry it)
    int num_inputs = 0;
    std::vector<int64_t> reserved;
    std::vector<Any> steps;
    std::vector<size_t> step_offsets;  // where each step begins in `steps`
    int64_t num_steps = 0;
    size_t num_calls = 0;
    std::map<int64_t, std::string> names;
    std::set<int64_t> call_results;
    std::vector<DRef> keep;
    std::string discarded;
  };
  DRef RecordLookup(const std::string& name);
  DRef RecordCall(const DRef& func, const Any* args, size_t num_args);
  /// Installs `rec` as graph `id`. When its program cannot be sent (a ValueError: over
  /// DISCO_MAX_FRAME_BYTES, or a value that cannot be sent), installs what the body was handed
  /// (InstallHandedOut) and throws ValueError.
  void Install(const Recording& rec, int64_t id);
  /// For a capture that is not installed: reserves its registers and runs its lookups and Empty
  /// calls on every worker (the DRefs the body got, a builtin's cached one among them, must
  /// work), in one frame, or in a frame per step when one is too large.
  void InstallHandedOut(const Recording& rec);
  /// Broadcasts install operands (protocol/graph.h) and runs them on worker 0; false, with
  /// `why`, when they cannot be sent (a ValueError of Broadcast: nothing was sent).
  bool SendInstall(const std::vector<Any>& ops, std::string* why);
  void CheckWorker(int worker_id, const char* what) const;
  void CheckRegister(int64_t reg, const char* what) const;
  /// Refuses DRefs of another session among `func` (may be null) and `values` (ValueError).
  void CheckOwnRefs(const DRef* func, const Any* values, size_t n, const char* what) const;
  int64_t AllocateReg();
  DRef MakeDRef(int64_t reg);
  /// Encodes and broadcasts one command (with the pending kills) with frame `flags`; returns its
  /// sequence number. Every ValueError (too large, a value that cannot be sent) is raised before
  /// any byte of the command is sent.
  uint64_t Broadcast(protocol::Action action, const Any* head, size_t num_head, const Any* args,
                     size_t num_args, uint16_t flags = 0);
  /// Broadcasts the first `inline_bytes` of frame_, whose header has `flags`: by MPI_Ibcast when
  /// the previous frame asked the workers to post one (next_nonblocking_), else by MPI_Bcast.
  void BroadcastInline(size_t inline_bytes, uint16_t flags);
  void FlushKills();
  /// Runs worker 0's deferred call, if any, then the register frees that waited for it.
  void FlushWorker0();
  /// Receives one error report from `source` (a worker, or MPI_ANY_SOURCE) and queues it.
  void ReceiveError(int source);
  /// Receives error reports from `worker` until `sent` have arrived.
  void CollectErrors(int worker, uint64_t sent);
  /// Receives every report the workers have sent (SyncAll, shutdown): one reduce of the counts.
  void CollectAllErrors();
  /// Receives every error report already waiting.
  void DrainErrors();
  /// Throws RemoteError for the queued reports (all of them in one message) and clears them.
  void RaisePending();
  void OnError(const protocol::ErrorReport& report);
  void ReceiveReply(int worker, protocol::Reply* reply);

  MpiTransport* transport_;
  SessionConfig config_;
  Worker worker0_;
  uint64_t seq_ = 0;
  int64_t reg_count_ = 1;
  std::vector<int64_t> free_regs_;
  std::vector<int64_t> pending_kills_;
  std::vector<uint64_t> errors_received_;
  uint64_t errors_received_total_ = 0;  // the sum of errors_received_
  std::vector<protocol::ErrorReport> pending_errors_;
  protocol::ByteBuffer frame_;
  std::vector<protocol::BulkSegment> bulk_;
  protocol::ByteBuffer reply_buf_;
  // Worker 0 runs a call of a collective (FunctionObj::collective) once the *next* frame has gone
  // out (or at any other action), so that workers 1..N-1 already hold the next command when a
  // collective they share with worker 0 ends: the control frame's latency leaves the critical
  // path of back-to-back collectives. Other calls, and calls with tensor arguments (the caller
  // may change the tensor after the call returns), run at once; frames that could block (more
  // than one broadcast) run the deferred call first.
  struct DeferredCall {
    bool active = false;
    uint64_t seq = 0;
    int64_t result_reg = 0;
    int64_t func_reg = 0;
    std::vector<Any> args;
  };
  DeferredCall deferred_;
  std::vector<int64_t> worker0_kills_;
  bool shut_down_ = false;
  bool parked_ = false;
  // The last frame said the next one comes by MPI_Ibcast (protocol::kFlagNextFrameNonblocking):
  // the workers posted it before they ran that frame's collective, and a nonblocking broadcast
  // matches only a nonblocking one.
  bool next_nonblocking_ = false;
  // Whether a collective call's frame asks for the next frame by MPI_Ibcast
  // (SessionConfig::prepost_frames).
  bool prepost_frames_ = false;
  int final_exit_code_ = 0;
  std::unique_ptr<Recording> recording_;
  int64_t next_graph_id_ = 1;
  int64_t next_capture_serial_ = 0;
  std::vector<int64_t> pending_graph_frees_;
};

}  // namespace detail
}  // namespace disco

#endif  // DISCO_SESSION_SESSION_IMPL_H_
