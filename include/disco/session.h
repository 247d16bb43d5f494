/// \file disco/session.h
/// \brief The disco session: one controller program driving every rank of an MPI job.
///
/// ## Architecture
///
/// Every process of an `mpirun`/`srun` job runs the same binary and calls `disco::Main`. **Rank 0
/// is the controller and, in the same process and thread, worker 0**; ranks 1..N-1 run the worker
/// loop until the controller shuts the session down.
///
/// **Registers and DRef.** Every worker owns a register file: a table of values indexed by
/// register id. The controller never holds remote values; it holds `DRef`s that name a register.
/// `CallPacked(func, args...)` allocates a fresh register id, and every worker runs `func` with
/// its own values for the `DRef` arguments and stores the result in that register. When the last
/// copy of a `DRef` is destroyed the register is freed on every worker (the id is reused).
///
/// **Control plane.** Each controller call is serialized once into a frame (disco/protocol: magic,
/// version, action, sequence number, payload) and sent to every worker with one `MPI_Bcast` on a
/// communicator duplicated from the world for this purpose alone. A frame whose payload fits in
/// `DISCO_INLINE_BYTES` travels in one broadcast; a larger one takes a second broadcast of the
/// rest. After broadcasting, rank 0 runs the same command itself as worker 0, in line, without
/// decoding it. Calls are asynchronous with respect to workers 1..N-1 and ordered: every worker
/// runs the same command sequence, and checks the sequence number so that a desynchronised rank
/// is named instead of hanging. Replies (sync, debug reads, error reports) come back point to
/// point.
///
/// **Data plane.** Tensor collectives run over NCCL on GPUs (bootstrapped by MPI: rank 0 creates
/// the unique id, which travels by `MPI_Bcast`) or over MPI on host memory, on communicators of
/// their own, so control frames never interleave with tensor traffic.
///
/// **Captured steps.** `Session::Capture` records a sequence of calls once and installs it on
/// every worker (disco/graph.h); a replay is then one small frame, and each worker runs the
/// recorded calls on its fast path, collectives included.
///
/// **Watchdog.** Every rank runs a thread of its own (src/session/watchdog.h): a flight recorder
/// of the commands it ran, liveness pings over authenticated UDP, and, when a command runs past
/// `DISCO_TIMEOUT` or a rank goes silent, every rank's state gathered into one line that names
/// the rank holding the others up (src/session/hang.h), then the end of the job.
///
/// **Remote controllers.** A job can serve its session over TCP instead (disco/remote.h):
/// rank 0 forwards each request of an attached client into the session, and while it waits on
/// the socket the workers park (sleep in a nonblocking barrier) rather than spin for the next
/// frame. The client's `Session` is the same class, driving a remote backend.
///
/// **Layers** (src/; each includes only those below it, checked by tests/layers/check_layers.sh):
///
///     tools (src/tools), python (python/src)      programs and bindings
///     remote                                      TCP clients and servers of a session
///     session                                     controller, worker loop, transport, watchdog
///     ccl | io                                    collectives (backends ccl/mpi, ccl/nccl) | HDF5
///     mpi                                         MPI handles, DISCO_MPI_CALL, agreement helpers
///     protocol                                    frames and (de)serialization, no MPI
///     core                                        values, tensors, registry, worker identity and
///                                                 call context, wait record, logging, knobs
///
/// Models (models/: the Llama decoder, the MLP demo) and the programs in examples/ use the public
/// headers (include/disco/) only. The design in full (the wire format, the error model, the names
/// that are fixed) is docs/design.md; where each part lives, docs/layout.md.
///
/// **Errors.** A function that throws on a worker poisons its result register and reports (worker
/// id, function, message) to rank 0; the controller raises `disco::RemoteError` at the next
/// `SyncWorker`, `SyncAll` or debug read, and the session stays usable. An uncaught exception in
/// controller code, or a dead rank, ends the whole job with a non-zero exit (`MPI_Abort`).
#ifndef DISCO_SESSION_H_
#define DISCO_SESSION_H_

#include <disco/any.h>
#include <disco/function.h>
#include <disco/graph.h>
#include <disco/tensor.h>
#include <disco/worker.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace disco {

namespace detail {
class SessionBackend;
class SessionImpl;
}  // namespace detail

/// The controller's view of the job. Only rank 0 has one; `disco::Main` creates it.
class Session {
 public:
  /// Number of workers (= MPI world size).
  int num_workers() const;
  /// Number of worker groups (`DISCO_NUM_GROUPS`, default 1); groups are contiguous blocks.
  int num_groups() const;

  /// A register on every worker holding the global function `name`. An unknown name is reported
  /// as a RemoteError at the next sync.
  DRef GetGlobalFunc(const std::string& name);
  /// Calls `func` on every worker; DRef arguments become each worker's own register value.
  /// Returns the register holding the result.
  ///
  /// A call of a collective (Registry::mark_collective) may run on worker 0 when the controller's
  /// next session action begins; its effects are visible after any sync, debug read or copy.
  template <typename... Ts>
  DRef CallPacked(const DRef& func, Ts&&... args) {
    std::array<Any, sizeof...(Ts)> packed{Any(std::forward<Ts>(args))...};
    return CallWithMovedArgs(func, packed.data(), packed.size());
  }
  /// `CallPacked` with an argument array.
  DRef CallWithPacked(const DRef& func, const Any* args, size_t num_args);
  /// `CallPacked` with an argument array the session may move from.
  DRef CallWithMovedArgs(const DRef& func, Any* args, size_t num_args);

  /// Copies the host tensor `host` into the tensor held by `remote` on worker 0 (in process).
  void CopyToWorker0(const Tensor& host, const DRef& remote);
  /// Copies the host tensor `host` into a new tensor on worker 0 (None elsewhere) and returns it.
  DRef CopyToWorker0(const Tensor& host);
  /// Copies the tensor held by `remote` on worker 0 into the host tensor `host` (in process).
  void CopyFromWorker0(const Tensor& host, const DRef& remote);

  /// Waits until `worker_id` has run every command sent so far; raises pending remote errors.
  void SyncWorker(int worker_id);
  /// Waits for every worker; raises every pending remote error.
  void SyncAll();

  /// Initializes the collective library on every worker: "mpi", "nccl" or "auto" (DISCO_CCL
  /// overrides). `device_ids` maps node-local ranks to GPUs (empty: local rank modulo the visible
  /// GPUs). Raises (RemoteError) when a worker fails to initialize. Calling it again replaces the
  /// communicators.
  void InitCCL(const std::string& ccl, const std::vector<int64_t>& device_ids = {});

  /// The value of register `reg_id` on `worker_id` (tensors by value, on the host).
  Any DebugGetFromRemote(int64_t reg_id, int worker_id);
  /// Stores `value` into register `reg_id` on `worker_id`.
  void DebugSetRegister(int64_t reg_id, const Any& value, int worker_id);

  /// Records the session calls `body` makes, without running them, into a Graph (disco/graph.h):
  /// `inputs[i]` is a placeholder usable as any argument of a recorded call, which each
  /// Graph::Replay replaces with its i-th value. DRefs returned inside `body` name the registers
  /// every replay writes. Recordable: CallPacked, the collectives and point-to-point calls, and
  /// Empty (allocated once, at install); syncs, copies, debug calls, InitCCL, Shutdown and a
  /// nested Capture are a ValueError naming the call, and the capture is discarded.
  Graph Capture(int num_inputs, std::function<void(const std::vector<Any>& inputs)> body);

  /// Ends the session: workers leave their loop. Idempotent; DRefs outlive it harmlessly.
  void Shutdown();

  /// `disco.empty` on every worker (or on worker 0 / each group's first worker only).
  /// `ThisWorkerGpu()` as the device allocates on each worker's own GPU (after InitCCL). Device
  /// tensors come from each GPU's memory pool, which keeps up to 256 MiB of freed memory for the
  /// next allocations; the builtin `disco.empty_cache()` (`CallPacked(GetGlobalFunc(
  /// "disco.empty_cache"))`, an int: bytes released) gives all of it back to the GPU, for NCCL,
  /// cuBLAS or torch in the same process (a no-op on workers without device memory).
  DRef Empty(const Shape& shape, DLDataType dtype, DLDevice device = CPU(),
             bool worker0_only = false, bool in_group = false);

  /// Collectives (see disco/ccl.h): each calls its builtin on every worker and returns the
  /// (None) result register. An empty DRef passes None. `op`: sum, prod, min, max, avg.
  DRef AllReduce(const DRef& send, const std::string& op, bool in_group, const DRef& recv);
  DRef AllGather(const DRef& send, bool in_group, const DRef& recv);
  DRef ReduceScatter(const DRef& send, const std::string& op, bool in_group, const DRef& recv);
  DRef Broadcast(const DRef& send, bool in_group, const DRef& recv);
  DRef Scatter(const DRef& send, bool in_group, const DRef& recv);
  /// The controller's host tensor `host` on every worker (a new register). With `in_group` the
  /// result is the same; the group communicators carry it.
  DRef Broadcast(const Tensor& host, bool in_group = false);
  /// The controller's host tensor `host` split along its first axis: worker i of the world (of
  /// its group, with `in_group`) gets part i (a new register). The first extent must divide.
  DRef Scatter(const Tensor& host, bool in_group = false);
  DRef Gather(const DRef& send, bool in_group, const DRef& recv);
  DRef RecvFromWorker0(const DRef& buffer);
  DRef SendToNextGroup(const DRef& buffer);
  DRef RecvFromPrevGroup(const DRef& buffer);
  /// Every group sends `send` to the next group and receives `recv` from the previous one, as one
  /// operation (the first group receives nothing, the last sends nothing).
  DRef ShiftToNextGroup(const DRef& send, const DRef& recv);
  DRef SendToWorker(const DRef& buffer, int peer);
  DRef RecvFromWorker(const DRef& buffer, int peer);
  DRef Barrier(bool in_group = false);

  explicit Session(std::shared_ptr<detail::SessionBackend> impl);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  Session(Session&&) noexcept = default;
  Session& operator=(Session&&) noexcept = default;
  /// The in-job MPI session behind this one (nullptr for other kinds), for tests and tools.
  detail::SessionImpl* impl() const;
  /// Whatever drives this session (in-job or remote).
  detail::SessionBackend* backend() const { return impl_.get(); }

 private:
  std::shared_ptr<detail::SessionBackend> impl_;
};

/// Entry point, called on every rank. Rank 0 runs `controller` with a live session, then shuts
/// the session down; other ranks run the worker loop until shutdown. Returns the process exit
/// code: non-zero on every rank if any rank failed. Initializes MPI (MPI_THREAD_SINGLE: call MPI
/// from the thread that runs Main only) unless the program already did, at the level it chose
/// (and then leaves finalizing to it).
int Main(int argc, char** argv, std::function<int(Session&)> controller);

}  // namespace disco

#endif  // DISCO_SESSION_H_
