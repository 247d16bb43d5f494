// The NCCL backend. Rules it keeps (NCCL 2.28 and CUDA 13 documentation):
//
// - Stream order. A builtin's operation runs on a non-blocking stream of the communicator, which
//   does not wait for other streams by itself. Before every operation it waits for events recorded
//   on the device's compute stream (memory::ComputeStream: device copies, allocations, worker
//   functions' kernels and cuBLAS calls) and on the legacy stream 0 (kernels launched without a
//   stream), so what they wrote is what NCCL reads. Every builtin operation but Send waits for its
//   stream before returning, so the controller, MPI and host copies see finished results. The
//   allreduce of worker functions (AllReduceQueued) is queued on the compute stream itself, in
//   order with the function's kernels, and nothing waits for it.
// - Communicators. The world communicator's init is non-blocking (ncclConfig_t::blocking = 0) and
//   polled, so a rank that fails there tells the others at once (mpi::AgreeOnPolledStep) instead
//   of leaving them in NCCL's bootstrap. The communicators that move data are blocking splits of
//   it: on a non-blocking one NCCL 2.28 runs every operation through a thread of its own and
//   answers ncclInProgress (a thread start per allreduce, then a poll). Each is warmed up at init
//   (a small and a large allreduce), so that the connections of the common algorithms exist before
//   the model takes the GPU's memory and before a worker function's first allreduce.
// - Devices. Every entry point makes the communicator's GPU current for its calls (a worker 0 that
//   runs commands on a thread other than the one that ran InitCCL included).
// - Errors. A failed operation aborts the communicator once (NcclComm::Abort frees it and forgets
//   it); later calls say so instead of touching freed memory. A group is always closed, also when
//   a call inside it throws.
// - Point to point. Peers that talk (next group, ring neighbours; every pair in small worlds:
//   ccl/nccl/peers.h) are connected at init, so a later ncclSend only queues work: NCCL's first
//   send to a peer blocks the host until that peer receives, which would stall the control plane.
//   The builtins refuse a lone send or receive between other peers (PreConnected).
// - CUDA graphs. Every builtin operation's first step (AfterOtherStreams) refuses to run inside a
//   capture.
#include "ccl/nccl/communicator.h"

#include <cuda_runtime_api.h>
#include <disco/error.h>
#include <disco/log.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ccl/nccl/peers.h"
#include "ccl/nccl/types.h"
#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "core/process_info.h"
#include "mpi/mpi_util.h"

namespace disco {
namespace ccl {
namespace {

std::string NcclErrorText(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

/// Tells the other ranks of a communicator that this rank aborted it after a local error (a failed
/// call, a CUDA error, running out of memory while connecting): NCCL does not pass an abort on, so
/// they would wait in NCCL until the watchdog. One MPI_Irecv stays posted on the host communicator
/// under a tag of its own; a rank that aborts sends each other rank its rank number (a small eager
/// message); waiting ranks test for it while they poll NCCL.
class FailureNotices {
 public:
  static constexpr int kTag = 0x4E43;  // "NC"
  explicit FailureNotices(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    if (size_ > 1)
      DISCO_MPI_CALL(MPI_Irecv(&from_, 1, MPI_INT, MPI_ANY_SOURCE, kTag, comm_, &recv_));
  }
  ~FailureNotices() {
    if (recv_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&recv_);
      MPI_Wait(&recv_, MPI_STATUS_IGNORE);
    }
    // Sent eagerly; a peer that left without reading a notice does not hold this rank up.
    for (MPI_Request& r : sends_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  }
  FailureNotices(const FailureNotices&) = delete;
  FailureNotices& operator=(const FailureNotices&) = delete;

  /// The rank that told this one it aborted, or -1.
  int Failed() {
    if (failed_ < 0 && recv_ != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Test(&recv_, &done, MPI_STATUS_IGNORE);
      if (done) failed_ = from_;
    }
    return failed_;
  }
  /// Tells every other rank (once) that this rank aborted the communicator.
  void Tell() {
    if (told_ || size_ <= 1) return;
    told_ = true;
    sends_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) MPI_Isend(&rank_, 1, MPI_INT, r, kTag, comm_, &sends_[r]);
    }
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int from_ = -1;
  int failed_ = -1;
  bool told_ = false;
  MPI_Request recv_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
};

/// Owns an NCCL communicator. Abort() frees it after an error and forgets it, so that nothing
/// aborts or uses it twice.
class NcclComm {
 public:
  NcclComm() = default;
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  ~NcclComm() { Destroy(); }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  /// The communicator; throws when an earlier error aborted it.
  ncclComm_t get(const char* what) const {
    DISCO_CHECK(comm_ != nullptr, RuntimeError)
        << "NCCL " << what << ": this communicator was aborted after an earlier NCCL error; call "
        << "InitCCL again to make new ones";
    return comm_;
  }
  /// Where this rank tells its peers of an abort and learns of theirs (null: nobody is told).
  void set_notices(FailureNotices* notices) { notices_ = notices; }
  /// Frees the communicator after a local error, and tells the other ranks.
  void Abort() {
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    if (notices_ != nullptr) notices_->Tell();
  }
  /// Throws (aborting this rank's communicator too) when another rank said it aborted its own.
  void ThrowIfPeerAborted(const char* what) {
    const int peer = notices_ != nullptr ? notices_->Failed() : -1;
    if (peer < 0) return;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    DISCO_THROW(RuntimeError) << "NCCL " << what << ": rank " << peer
                              << " of this communicator aborted it after an error of its own (its "
                              << "error says why); the communicator was aborted here too";
  }
  /// Waits while the communicator answers ncclInProgress; aborts it and throws on an error.
  void Settle(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) {
      do {
        ThrowIfPeerAborted(what);
        mpi::Progress();  // worker 0 may be sending this rank its next control frame
        std::this_thread::yield();
        if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
      } while (r == ncclInProgress);
      if (r == ncclSuccess) return;
    }
    std::string text = NcclErrorText(r, comm_);
    Abort();
    DISCO_THROW(RuntimeError) << "NCCL " << what << " failed: " << text
                              << "; the communicator was aborted";
  }

 private:
  void Destroy() {
    if (comm_ == nullptr) return;
    // A non-blocking communicator finalizes asynchronously; destroy once that ended.
    ncclResult_t r = ncclCommFinalize(comm_);
    while (r == ncclInProgress) {
      mpi::Progress();
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }

  ncclComm_t comm_ = nullptr;
  FailureNotices* notices_ = nullptr;
};

/// A CUDA stream and the events that order it after the device's compute stream and the legacy
/// default stream. Called with the device current.
class CudaStream {
 public:
  explicit CudaStream(int device)
      : compute_(static_cast<cudaStream_t>(memory::ComputeStream(device))) {
    CudaDeviceGuard guard(device);
    DISCO_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DISCO_CUDA_CALL(cudaEventCreateWithFlags(&after_legacy_, cudaEventDisableTiming));
    DISCO_CUDA_CALL(cudaEventCreateWithFlags(&after_compute_, cudaEventDisableTiming));
  }
  ~CudaStream() {
    if (after_compute_ != nullptr) cudaEventDestroy(after_compute_);
    if (after_legacy_ != nullptr) cudaEventDestroy(after_legacy_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  /// The device's compute stream (memory::ComputeStream).
  cudaStream_t compute() const { return compute_; }
  /// Makes later work on this stream wait for the work queued on the compute stream and on
  /// stream 0 so far. (The compute stream is a blocking stream, so its event alone should cover
  /// stream 0 too; the second event does not rest on that.) Every builtin operation starts here,
  /// before it touches a stream or NCCL: inside a CUDA graph capture it throws
  /// (ThrowIfGraphCapture) instead of invalidating the user's capture.
  void AfterOtherStreams() {
    ThrowIfGraphCapture("NCCL collective");
    DISCO_CUDA_CALL(cudaEventRecord(after_compute_, compute_));
    DISCO_CUDA_CALL(cudaStreamWaitEvent(stream_, after_compute_, 0));
    DISCO_CUDA_CALL(cudaEventRecord(after_legacy_, cudaStreamLegacy));
    DISCO_CUDA_CALL(cudaStreamWaitEvent(stream_, after_legacy_, 0));
  }

 private:
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t after_legacy_ = nullptr;
  cudaEvent_t after_compute_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, mpi::Comm host, int device)
      : comm_(comm),
        host_(std::move(host)),
        notices_(host_.get()),
        device_(device),
        stream_(device) {
    rank_ = host_.rank();
    size_ = host_.size();
    comm_.set_notices(&notices_);
  }
  ~NcclCommunicator() override {
    if (cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();  // this GPU's stream and comm
    comm_.set_notices(nullptr);  // an abort at the end is no error to tell the others of
    // Sends whose receivers never came would keep NCCL's finalize waiting: abort instead.
    if (cudaStreamQuery(stream_.get()) == cudaErrorNotReady) {
      DISCO_LOG(WARN) << "NCCL: " << in_flight_.size()
                      << " send(s) were never received; aborting the communicator";
      comm_.Abort();
      cudaStreamSynchronize(stream_.get());
    }
    cudaGetLastError();
    in_flight_.clear();
  }

  const char* backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  DLDevice device() const override { return CUDA(device_); }
  MPI_Comm host_comm() const override { return host_.get(); }
  bool SupportsDType(DLDataType t) const override { return NcclTypeOf(t).has_value(); }
  ncclComm_t nccl() const { return comm_.get("communicator"); }

  void AllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    if (send.numel() == 0) return;
    ncclComm_t c = Begin("allreduce");
    Settle(ncclAllReduce(send.data(), recv.data(), send.numel(), Type(send), ToNcclOp(op), c,
                         stream_.get()),
           "allreduce");
    Wait("allreduce");
  }
  void AllReduceQueued(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    if (send.numel() == 0) return;
    CudaDeviceGuard guard(device_);
    comm_.ThrowIfPeerAborted("allreduce");
    ncclComm_t c = comm_.get("allreduce");
    Settle(ncclAllReduce(send.data(), recv.data(), send.numel(), Type(send), ToNcclOp(op), c,
                         stream_.compute()),
           "allreduce");
  }
  void AllGather(const Tensor& send, const Tensor& recv) override {
    if (send.numel() == 0) return;
    ncclComm_t c = Begin("allgather");
    Settle(ncclAllGather(send.data(), recv.data(), send.numel(), Type(send), c, stream_.get()),
           "allgather");
    Wait("allgather");
  }
  void ReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    if (recv.numel() == 0) return;
    ncclComm_t c = Begin("reduce_scatter");
    Settle(ncclReduceScatter(send.data(), recv.data(), recv.numel(), Type(recv), ToNcclOp(op), c,
                             stream_.get()),
           "reduce_scatter");
    Wait("reduce_scatter");
  }
  void Broadcast(const Tensor& send, const Tensor& recv, int root) override {
    if (recv.numel() == 0) return;
    ncclComm_t c = Begin("broadcast");
    const void* src = rank_ == root && send.defined() ? send.data() : recv.data();
    Settle(ncclBroadcast(src, recv.data(), recv.numel(), Type(recv), root, c, stream_.get()),
           "broadcast");
    Wait("broadcast");
  }
  void Scatter(const Tensor& send, const Tensor& recv, int root) override {
    size_t count = static_cast<size_t>(recv.numel());
    if (count == 0) return;
    ncclComm_t c = Begin("scatter");
    ncclDataType_t type = Type(recv);
    size_t bytes = recv.nbytes();
    auto chunk = [&](int r) { return static_cast<const char*>(send.data()) + r * bytes; };
    if (rank_ == root) {  // the root's own block, before the group: nothing in it can throw
      DISCO_CUDA_CALL(cudaMemcpyAsync(recv.data(), chunk(root), bytes, cudaMemcpyDeviceToDevice,
                                      stream_.get()));
    }
    Group group(this, "scatter");
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        if (r != root) group.Add(ncclSend(chunk(r), count, type, r, c, stream_.get()));
      }
    } else {
      group.Add(ncclRecv(recv.data(), count, type, root, c, stream_.get()));
    }
    group.End();
    Wait("scatter");
  }
  void Gather(const Tensor& send, const Tensor& recv, int root) override {
    size_t count = static_cast<size_t>(send.numel());
    if (count == 0) return;
    ncclComm_t c = Begin("gather");
    ncclDataType_t type = Type(send);
    size_t bytes = send.nbytes();
    auto chunk = [&](int r) { return static_cast<char*>(recv.data()) + r * bytes; };
    if (rank_ == root) {
      DISCO_CUDA_CALL(cudaMemcpyAsync(chunk(root), send.data(), bytes, cudaMemcpyDeviceToDevice,
                                      stream_.get()));
    }
    Group group(this, "gather");
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        if (r != root) group.Add(ncclRecv(chunk(r), count, type, r, c, stream_.get()));
      }
    } else {
      group.Add(ncclSend(send.data(), count, type, root, c, stream_.get()));
    }
    group.End();
    Wait("gather");
  }
  void Send(const Tensor& buffer, int peer) override {
    if (buffer.numel() == 0) return;
    ncclComm_t c = Begin("send");
    // Queued, not waited for: the matching receive may come in a later command. The GPU reads
    // `buffer` when the receiver has posted it (see Communicator::Send).
    Settle(ncclSend(buffer.data(), buffer.numel(), Type(buffer), peer, c, stream_.get()), "send");
    in_flight_.push_back(buffer);  // alive (not freed, not reused) until the stream passed it
  }
  void Recv(const Tensor& buffer, int peer) override {
    if (buffer.numel() == 0) return;
    ncclComm_t c = Begin("recv");
    Settle(ncclRecv(buffer.data(), buffer.numel(), Type(buffer), peer, c, stream_.get()), "recv");
    Wait("recv");
  }
  void SendRecv(const Tensor& send, int dest, const Tensor& recv, int source) override {
    bool sends = dest >= 0 && send.numel() > 0, receives = source >= 0 && recv.numel() > 0;
    if (!sends && !receives) return;
    ncclComm_t c = Begin("sendrecv");
    Group group(this, "sendrecv");
    if (sends) group.Add(ncclSend(send.data(), send.numel(), Type(send), dest, c, stream_.get()));
    if (receives) {
      group.Add(ncclRecv(recv.data(), recv.numel(), Type(recv), source, c, stream_.get()));
    }
    group.End();
    Wait("sendrecv");
  }
  void Barrier() override {
    // Every operation but Send has finished already; a pending send waits for its receiver, which
    // may come after this barrier, so the barrier does not wait for the stream.
    comm_.get("barrier");
    DISCO_MPI_CALL(MPI_Barrier(host_.get()));
  }

  /// Connects this rank with `peers` (both ways) in one group of 1-byte exchanges, so that later
  /// sends to them never block the host on connection setup.
  void Connect(const std::set<int>& peers) {
    if (peers.empty()) return;
    ncclComm_t c = Begin("connect");
    void* scratch = nullptr;
    DISCO_CUDA_CALL(cudaMalloc(&scratch, peers.size() + 1));
    struct Free {
      void* p;
      ~Free() { cudaFree(p); }
    } free_scratch{scratch};
    char* bytes = static_cast<char*>(scratch);
    {
      Group group(this, "connect");
      size_t i = 1;
      for (int peer : peers) {
        group.Add(ncclSend(bytes, 1, ncclInt8, peer, c, stream_.get()));
        group.Add(ncclRecv(bytes + i++, 1, ncclInt8, peer, c, stream_.get()));
      }
      group.End();
    }
    Wait("connect");
    connected_.insert(peers.begin(), peers.end());
  }
  // Only the peers Connect connected: a lone send to another makes NCCL connect inside the call.
  bool PreConnected(int peer) const override { return connected_.count(peer) != 0; }

 private:
  // An NCCL group that is closed on every path. A failed call inside it aborts the communicator
  // only after the group is closed (NCCL then drops the group's tasks), never while it is open.
  class Group {
   public:
    Group(NcclCommunicator* owner, const char* what) : owner_(owner), what_(what) {
      owner_->Settle(ncclGroupStart(), what);
    }
    ~Group() {
      if (open_) ncclGroupEnd();
    }
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    void Add(ncclResult_t r) {
      if (first_error_ == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first_error_ = r;
    }
    void End() {
      open_ = false;
      ncclResult_t r = ncclGroupEnd();
      owner_->Settle(first_error_ != ncclSuccess ? first_error_ : r, what_);
    }

   private:
    NcclCommunicator* owner_;
    const char* what_;
    bool open_ = true;
    ncclResult_t first_error_ = ncclSuccess;
  };

  // The communicator for one operation, its stream ordered after the compute stream and stream
  // 0. Makes the communicator's GPU current for the rest of the calling thread's command (the
  // thread that runs worker 0's commands need not be the one that ran InitCCL).
  ncclComm_t Begin(const char* what) {
    ncclComm_t c = comm_.get(what);
    memory::MakeDeviceCurrent(device_);
    stream_.AfterOtherStreams();
    return c;
  }
  void Settle(ncclResult_t r, const char* what) { comm_.Settle(r, what); }
  ncclDataType_t Type(const Tensor& t) const {
    std::optional<ncclDataType_t> type = NcclTypeOf(t.dtype());
    DISCO_CHECK(type.has_value(), TypeError)
        << "NCCL has no type for " << DataTypeToString(t.dtype())
        << " (int16 and uint16 collectives need the mpi backend)";
    return *type;
  }

  // Waits for the stream while polling NCCL's asynchronous error: a failed peer aborts the
  // communicator and raises, instead of spinning forever in cudaStreamSynchronize.
  void Wait(const char* what) {
    memory::MakeDeviceCurrent(device_);
    for (;;) {
      cudaError_t st = cudaStreamQuery(stream_.get());
      if (st == cudaSuccess) {
        in_flight_.clear();  // every send queued before has completed
        return;
      }
      if (st != cudaErrorNotReady) {
        comm_.Abort();
        DISCO_CUDA_CALL(st);
      }
      ncclResult_t async = ncclSuccess;
      ncclComm_t c = comm_.get(what);
      if (ncclCommGetAsyncError(c, &async) != ncclSuccess) async = ncclInternalError;
      if (async != ncclSuccess && async != ncclInProgress) {
        std::string text = NcclErrorText(async, c);
        comm_.Abort();
        DISCO_THROW(RuntimeError) << "NCCL " << what << " failed asynchronously: " << text
                                  << "; the communicator was aborted";
      }
      comm_.ThrowIfPeerAborted(what);
      mpi::Progress();  // worker 0 may be sending this rank its next control frame
      std::this_thread::yield();
    }
  }

  NcclComm comm_;
  mpi::Comm host_;
  FailureNotices notices_;  // after host_: cancelled before the host communicator is freed
  int device_;
  CudaStream stream_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Tensor> in_flight_;  // buffers of sends that may not have completed
  std::set<int> connected_;        // peers Connect connected (ccl/nccl/peers.h)
};

// The GPU of this rank: device_ids[local_rank] when given, else local rank modulo the visible
// GPUs. Throws ValueError naming what does not fit.
int ChooseGpu(int local_rank, const std::vector<int64_t>& device_ids) {
  int visible = 0;
  DISCO_CUDA_CALL(cudaGetDeviceCount(&visible));
  if (!device_ids.empty()) {
    DISCO_CHECK(local_rank < static_cast<int>(device_ids.size()), ValueError)
        << "InitCCL: device_ids has " << device_ids.size()
        << " entries, but this is node-local rank " << local_rank
        << "; give one device per rank on the node";
    int device = static_cast<int>(device_ids[local_rank]);
    DISCO_CHECK(device >= 0 && device < visible, ValueError)
        << "InitCCL: device_ids[" << local_rank << "] = " << device << ", but this process sees "
        << visible << " GPU(s) (CUDA_VISIBLE_DEVICES?)";
    return device;
  }
  DISCO_CHECK(visible > 0, ValueError) << "InitCCL('nccl'): this process sees no GPU on "
                                       << GetProcessInfo().host << " (CUDA_VISIBLE_DEVICES?)";
  // Each rank may see its own GPUs (Slurm's --gpus-per-task: one, or a subset of several), so the
  // count of GPUs visible here says nothing about the node: local rank modulo the visible GPUs is
  // a GPU of this rank's own set, and CheckDistinctGpus refuses two ranks that land on the same
  // physical GPU (more ranks than GPUs sharing one set), naming them.
  return local_rank % visible;
}

// Two ranks of one node on the same GPU would serialize (or deadlock in NCCL): refuse, naming them.
// Collective over `node`: every rank of it reaches the same verdict.
void CheckDistinctGpus(int device, MPI_Comm node) {
  int n = 0, me = 0;
  DISCO_MPI_CALL(MPI_Comm_size(node, &n));
  DISCO_MPI_CALL(MPI_Comm_rank(node, &me));
  // A rank that cannot read its bus id still joins the gather (with a name no GPU has).
  char bus[32] = {0};
  std::exception_ptr local;
  try {
    DISCO_CUDA_CALL(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device));
  } catch (const std::exception&) {
    local = std::current_exception();
    std::snprintf(bus, sizeof bus, "unknown-%d", me);
  }
  std::vector<char> all(static_cast<size_t>(n) * sizeof bus);
  DISCO_MPI_CALL(MPI_Allgather(bus, sizeof bus, MPI_CHAR, all.data(), sizeof bus, MPI_CHAR, node));
  if (local) std::rethrow_exception(local);
  for (int r = 0; r < n; ++r) {
    if (r != me && std::strncmp(bus, all.data() + r * sizeof bus, sizeof bus) == 0) {
      DISCO_THROW(ValueError) << "InitCCL('nccl'): node-local ranks " << std::min(r, me) << " and "
                              << std::max(r, me) << " on " << GetProcessInfo().host
                              << " are bound to the same GPU (" << bus << "; each rank takes "
                              << "device_ids[local rank], else its local rank modulo the GPUs it "
                              << "sees); give each rank its own GPU (device_ids, "
                              << "CUDA_VISIBLE_DEVICES or --gpus-per-task, or fewer ranks)";
    }
  }
}

// Chooses and checks this rank's GPU and binds it (cudaSetDevice before anything else touches
// CUDA). Collective over `world`: a rank that fails makes every rank throw.
int BindGpu(MPI_Comm world, MPI_Comm node, int local_rank, const std::vector<int64_t>& device_ids) {
  int device = -1;
  std::exception_ptr failure;
  try {
    device = ChooseGpu(local_rank, device_ids);
    DISCO_CUDA_CALL(cudaSetDevice(device));
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): choosing a GPU");
  try {
    CheckDistinctGpus(device, node);
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): one GPU per rank");
  return device;
}

// Polls a non-blocking communicator that init or split is making; see mpi::AgreeOnPolledStep.
mpi::StepState PollNewComm(ncclResult_t started, ncclComm_t comm, const char* what) {
  ncclResult_t r = started;
  if (r == ncclSuccess || r == ncclInProgress) {
    DISCO_CHECK(comm != nullptr, RuntimeError) << "NCCL " << what << " returned no communicator";
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r == ncclInProgress) return mpi::StepState::kPending;
  DISCO_CHECK(r == ncclSuccess, RuntimeError)
      << "NCCL " << what << " failed: " << NcclErrorText(r, comm);
  return mpi::StepState::kDone;
}

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// A blocking split of `parent` (every rank of it calls this, with the same arguments as
// MPI_Comm_split). Blocking, hence not polled: it runs only after the world communicator's polled
// init succeeded on every rank. A rank on which it fails throws; the others then wait in NCCL
// until the watchdog (DISCO_TIMEOUT) ends the job, naming InitCCL.
ncclComm_t BlockingSplit(ncclComm_t parent, int color, int key, const char* what) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t child = nullptr;
  ncclResult_t r = ncclCommSplit(parent, color, key, &child, &config);
  // Should this NCCL treat the split as non-blocking after all (the parent is), wait for it here.
  while (r == ncclInProgress && child != nullptr) {
    mpi::Progress();
    std::this_thread::yield();
    if (ncclCommGetAsyncError(child, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r != ncclSuccess) {
    if (child != nullptr) ncclCommAbort(child);
    DISCO_THROW(RuntimeError) << "NCCL ncclCommSplit (" << what
                              << ") failed: " << NcclErrorText(r, parent);
  }
  DISCO_CHECK(child != nullptr, RuntimeError)
      << "NCCL ncclCommSplit (" << what << ") returned no communicator";
  return child;
}

// A small and a large allreduce of floats on `c` (see MakeNcclCommunicators).
void WarmUp(Communicator& c, int device) {
  for (int64_t n : {int64_t{64}, int64_t{4} << 20}) {
    Tensor t = Tensor::Empty(Shape{n}, DataType("float32"), CUDA(device));
    c.AllReduce(t, t, ReduceOp::kSum);
  }
}

}  // namespace

bool EveryRankHasItsOwnGpu(MPI_Comm world, int local_rank, const std::vector<int64_t>& device_ids) {
  MPI_Comm node_raw = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_raw));
  mpi::Comm node(node_raw);
  int device = -1, ok = 1, all_ok = 0;
  try {
    device = ChooseGpu(local_rank, device_ids);
  } catch (const std::exception&) {
    ok = 0;
  }
  DISCO_MPI_CALL(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world));
  if (!all_ok) return false;
  try {
    CheckDistinctGpus(device, node.get());
  } catch (const std::exception&) {
    ok = 0;
  }
  DISCO_MPI_CALL(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world));
  return all_ok != 0;
}

std::vector<std::unique_ptr<Communicator>> MakeNcclCommunicators(
    MPI_Comm world, int local_rank, const std::vector<int64_t>& device_ids, int group_color,
    int group_key, int group_size) {
  // Phase 1: each rank picks and checks its GPU; all ranks agree before any bootstrap step, so a
  // rank that fails here cannot leave the others waiting in a collective.
  MPI_Comm node_raw = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_raw));
  mpi::Comm node(node_raw);
  const int device = BindGpu(world, node.get(), local_rank, device_ids);
  char bus[32] = {0};
  DISCO_CUDA_CALL(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device));
  int version = 0;
  ncclGetVersion(&version);
  DISCO_LOG(INFO) << "NCCL " << version / 10000 << "." << version / 100 % 100 << "."
                  << version % 100 << " (built against " << NCCL_MAJOR << "." << NCCL_MINOR << "."
                  << NCCL_PATCH << "): node-local rank " << local_rank << " on cuda:" << device
                  << " (PCI " << bus << ")";

  // Phase 2: the world communicator; its init is polled, and a failure on one rank ends it on all.
  mpi::Comm host_world = mpi::Comm::Dup(world);
  mpi::Comm agreement = mpi::Comm::Dup(world);
  int rank = host_world.rank(), size = host_world.size();
  ncclUniqueId id;
  std::exception_ptr failure;
  try {
    if (rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      DISCO_CHECK(r == ncclSuccess, RuntimeError)
          << "ncclGetUniqueId failed: " << NcclErrorText(r, nullptr);
    }
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): ncclGetUniqueId on rank 0");
  DISCO_MPI_CALL(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, host_world.get()));
  DISCO_MPI_CALL(MPI_Barrier(host_world.get()));  // avoids a known hang in ncclCommInitRank
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t polled_world = nullptr;
  ncclResult_t started = ncclCommInitRankConfig(&polled_world, size, id, rank, &config);
  mpi::AgreeOnPolledStep(
      agreement.get(), [&] { return PollNewComm(started, polled_world, "ncclCommInitRankConfig"); },
      [&] {
        if (polled_world != nullptr) ncclCommAbort(polled_world);
        polled_world = nullptr;
      },
      "InitCCL('nccl'): ncclCommInitRankConfig");
  NcclComm bootstrap(polled_world);  // finalized and destroyed once the splits below exist

  // Phase 3: the communicators that move data, blocking splits (see the top): the world, then the
  // group from it.
  ncclComm_t world_comm = nullptr, group_comm = nullptr;
  failure = nullptr;
  try {
    world_comm = BlockingSplit(bootstrap.get("split"), 0, rank, "world");
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): ncclCommSplit of the world");
  auto world_ccl = std::make_unique<NcclCommunicator>(world_comm, std::move(host_world), device);
  try {
    group_comm = BlockingSplit(world_ccl->nccl(), group_color, group_key, "group");
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): ncclCommSplit of the groups");
  mpi::Comm host_group = mpi::Comm::Split(world, group_color, group_key);
  auto group_ccl = std::make_unique<NcclCommunicator>(group_comm, std::move(host_group), device);

  // Warm-up: a small and a large allreduce on each communicator connect the algorithms NCCL picks
  // for them now, while every rank is here and before a model fills the GPU's memory.
  try {
    WarmUp(*world_ccl, device);
    WarmUp(*group_ccl, device);
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): the first allreduces (warm-up)");

  // Phase 4: point-to-point connections, while every rank is here to answer.
  failure = nullptr;
  try {
    world_ccl->Connect(TalkingPeers(rank, size, group_size));
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): connecting point-to-point peers");

  std::vector<std::unique_ptr<Communicator>> out;
  out.push_back(std::move(world_ccl));
  out.push_back(std::move(group_ccl));
  return out;
}

}  // namespace ccl
}  // namespace disco
