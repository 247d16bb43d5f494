#include "ccl/nccl/communicator.h"

#include <cuda_runtime_api.h>
#include <disco/error.h>
#include <disco/log.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/cuda_check.h"
#include "core/process_info.h"
#include "session/mpi_util.h"

/// Evaluates an NCCL call once; throws RuntimeError with ncclGetErrorString when it fails.
#define DISCO_NCCL_CALL(expr)                                                                     \
  do {                                                                                            \
    ncclResult_t disco_nccl_status_ = (expr);                                                     \
    if (disco_nccl_status_ != ncclSuccess && disco_nccl_status_ != ncclInProgress) {              \
      DISCO_THROW(RuntimeError) << #expr << " failed: " << ncclGetErrorString(disco_nccl_status_) \
                                << " (" << ncclGetLastError(nullptr) << ")";                      \
    }                                                                                             \
  } while (0)

namespace disco {
namespace ccl {
namespace {

ncclDataType_t ToNcclType(DLDataType t) {
  switch (t.code) {
    case kDLInt:
      if (t.bits == 8) return ncclInt8;
      if (t.bits == 32) return ncclInt32;
      if (t.bits == 64) return ncclInt64;
      break;
    case kDLUInt:
      if (t.bits == 8) return ncclUint8;
      if (t.bits == 32) return ncclUint32;
      if (t.bits == 64) return ncclUint64;
      break;
    case kDLFloat:
      if (t.bits == 16) return ncclFloat16;
      if (t.bits == 32) return ncclFloat32;
      if (t.bits == 64) return ncclFloat64;
      break;
    case kDLBfloat:
      return ncclBfloat16;
  }
  DISCO_THROW(ValueError) << "NCCL has no type for " << DataTypeToString(t)
                          << " (int16 and uint16 collectives need the mpi backend)";
}

ncclRedOp_t ToNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

/// Owns an NCCL communicator; aborts it instead of destroying it after an error.
class NcclComm {
 public:
  NcclComm() = default;
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  ~NcclComm() { Reset(); }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }
  void MarkFailed() { failed_ = true; }
  void Reset() {
    if (comm_ == nullptr) return;
    if (failed_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    comm_ = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;
};

/// Owns a CUDA stream.
class CudaStream {
 public:
  explicit CudaStream(int device) {
    CudaDeviceGuard guard(device);
    DISCO_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, mpi::Comm host, int device)
      : comm_(comm), host_(std::move(host)), device_(device), stream_(device) {
    rank_ = host_.rank();
    size_ = host_.size();
  }

  const char* backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  DLDevice device() const override { return CUDA(device_); }
  MPI_Comm host_comm() const override { return host_.get(); }
  ncclComm_t nccl() const { return comm_.get(); }

  void AllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    if (send.numel() == 0) return;
    DISCO_NCCL_CALL(ncclAllReduce(send.data(), recv.data(), send.numel(), ToNcclType(send.dtype()),
                                  ToNcclOp(op), comm_.get(), stream_.get()));
    Wait("allreduce");
  }
  void AllGather(const Tensor& send, const Tensor& recv) override {
    if (send.numel() == 0) return;
    DISCO_NCCL_CALL(ncclAllGather(send.data(), recv.data(), send.numel(), ToNcclType(send.dtype()),
                                  comm_.get(), stream_.get()));
    Wait("allgather");
  }
  void ReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    if (recv.numel() == 0) return;
    DISCO_NCCL_CALL(ncclReduceScatter(send.data(), recv.data(), recv.numel(),
                                      ToNcclType(recv.dtype()), ToNcclOp(op), comm_.get(),
                                      stream_.get()));
    Wait("reduce_scatter");
  }
  void Broadcast(const Tensor& send, const Tensor& recv, int root) override {
    if (recv.numel() == 0) return;
    const void* src = rank_ == root && send.defined() ? send.data() : recv.data();
    DISCO_NCCL_CALL(ncclBroadcast(src, recv.data(), recv.numel(), ToNcclType(recv.dtype()), root,
                                  comm_.get(), stream_.get()));
    Wait("broadcast");
  }
  void Scatter(const Tensor& send, const Tensor& recv, int root) override {
    size_t count = static_cast<size_t>(recv.numel());
    if (count == 0) return;
    ncclDataType_t type = ToNcclType(recv.dtype());
    size_t bytes = recv.nbytes();
    DISCO_NCCL_CALL(ncclGroupStart());
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        const char* chunk = static_cast<const char*>(send.data()) + r * bytes;
        if (r == root) {
          DISCO_CUDA_CALL(
              cudaMemcpyAsync(recv.data(), chunk, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
        } else {
          DISCO_NCCL_CALL(ncclSend(chunk, count, type, r, comm_.get(), stream_.get()));
        }
      }
    } else {
      DISCO_NCCL_CALL(ncclRecv(recv.data(), count, type, root, comm_.get(), stream_.get()));
    }
    DISCO_NCCL_CALL(ncclGroupEnd());
    Wait("scatter");
  }
  void Gather(const Tensor& send, const Tensor& recv, int root) override {
    size_t count = static_cast<size_t>(send.numel());
    if (count == 0) return;
    ncclDataType_t type = ToNcclType(send.dtype());
    size_t bytes = send.nbytes();
    DISCO_NCCL_CALL(ncclGroupStart());
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        char* chunk = static_cast<char*>(recv.data()) + r * bytes;
        if (r == root) {
          DISCO_CUDA_CALL(
              cudaMemcpyAsync(chunk, send.data(), bytes, cudaMemcpyDeviceToDevice, stream_.get()));
        } else {
          DISCO_NCCL_CALL(ncclRecv(chunk, count, type, r, comm_.get(), stream_.get()));
        }
      }
    } else {
      DISCO_NCCL_CALL(ncclSend(send.data(), count, type, root, comm_.get(), stream_.get()));
    }
    DISCO_NCCL_CALL(ncclGroupEnd());
    Wait("gather");
  }
  void Send(const Tensor& buffer, int peer) override {
    if (buffer.numel() == 0) return;
    // Stream-ordered and not waited for, so the matching receive may come in a later command.
    DISCO_NCCL_CALL(ncclSend(buffer.data(), buffer.numel(), ToNcclType(buffer.dtype()), peer,
                             comm_.get(), stream_.get()));
  }
  void Recv(const Tensor& buffer, int peer) override {
    if (buffer.numel() == 0) return;
    DISCO_NCCL_CALL(ncclRecv(buffer.data(), buffer.numel(), ToNcclType(buffer.dtype()), peer,
                             comm_.get(), stream_.get()));
    Wait("recv");
  }
  void Barrier() override {
    Wait("barrier");
    DISCO_MPI_CALL(MPI_Barrier(host_.get()));
  }

 private:
  // Waits for the stream while polling NCCL's asynchronous error: a failed peer aborts the
  // communicator and raises, instead of spinning forever in cudaStreamSynchronize.
  void Wait(const char* what) {
    for (;;) {
      cudaError_t st = cudaStreamQuery(stream_.get());
      if (st == cudaSuccess) return;
      if (st != cudaErrorNotReady) {
        comm_.MarkFailed();
        DISCO_CUDA_CALL(st);
      }
      ncclResult_t async = ncclSuccess;
      DISCO_NCCL_CALL(ncclCommGetAsyncError(comm_.get(), &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        comm_.MarkFailed();
        ncclCommAbort(comm_.get());
        DISCO_THROW(RuntimeError) << "NCCL " << what
                                  << " failed asynchronously: " << ncclGetErrorString(async)
                                  << "; the communicator was aborted";
      }
      std::this_thread::yield();
    }
  }

  NcclComm comm_;
  mpi::Comm host_;
  int device_;
  CudaStream stream_;
  int rank_ = 0;
  int size_ = 1;
};

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
                              << " are bound to the same GPU (" << bus
                              << "); give each rank its own GPU (device_ids, or fewer ranks)";
    }
  }
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeNcclCommunicators(
    MPI_Comm world, int local_rank, const std::vector<int64_t>& device_ids, int group_color,
    int group_key) {
  // Phase 1: each rank picks and checks its GPU; all ranks agree before any bootstrap step, so a
  // rank that fails here cannot leave the others waiting in a collective.
  MPI_Comm node_raw = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_raw));
  mpi::Comm node(node_raw);
  int device = -1;
  std::exception_ptr failure;
  try {
    int visible = 0;
    DISCO_CUDA_CALL(cudaGetDeviceCount(&visible));
    if (!device_ids.empty()) {
      DISCO_CHECK(local_rank < static_cast<int>(device_ids.size()), ValueError)
          << "InitCCL: device_ids has " << device_ids.size()
          << " entries, but this is node-local rank " << local_rank
          << "; give one device per rank on the node";
      device = static_cast<int>(device_ids[local_rank]);
      DISCO_CHECK(device >= 0 && device < visible, ValueError)
          << "InitCCL: device_ids[" << local_rank << "] = " << device << ", but this process sees "
          << visible << " GPU(s) (CUDA_VISIBLE_DEVICES?)";
    } else {
      // More ranks on this node than GPUs would put two ranks on one GPU. Under Slurm's
      // --gpus-per-task each rank sees one GPU (its own), which is fine.
      DISCO_CHECK(visible >= node.size() || visible == 1, ValueError)
          << "InitCCL('nccl'): " << node.size() << " ranks run on " << GetProcessInfo().host
          << " but it has " << visible << " visible GPU(s); start at most one rank per GPU";
      device = local_rank % visible;
    }
    DISCO_CUDA_CALL(cudaSetDevice(device));  // before anything else touches CUDA on this rank
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): choosing a GPU");
  try {
    CheckDistinctGpus(device, node.get());
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  mpi::AgreeOnSuccess(world, failure, "InitCCL('nccl'): one GPU per rank");
  char bus[32] = {0};
  DISCO_CUDA_CALL(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device));
  DISCO_LOG(INFO) << "NCCL " << NCCL_MAJOR << "." << NCCL_MINOR << "." << NCCL_PATCH
                  << ": node-local rank " << local_rank << " on cuda:" << device << " (PCI " << bus
                  << ")";

  mpi::Comm host_world = mpi::Comm::Dup(world);
  int rank = host_world.rank(), size = host_world.size();
  ncclUniqueId id;
  if (rank == 0) DISCO_NCCL_CALL(ncclGetUniqueId(&id));
  DISCO_MPI_CALL(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, host_world.get()));
  DISCO_MPI_CALL(MPI_Barrier(host_world.get()));  // avoids a known hang in ncclCommInitRank
  ncclComm_t world_comm = nullptr;
  DISCO_NCCL_CALL(ncclCommInitRank(&world_comm, size, id, rank));
  auto world_ccl = std::make_unique<NcclCommunicator>(world_comm, std::move(host_world), device);

  ncclComm_t group_comm = nullptr;
  DISCO_NCCL_CALL(ncclCommSplit(world_ccl->nccl(), group_color, group_key, &group_comm, nullptr));
  mpi::Comm host_group = mpi::Comm::Split(world, group_color, group_key);
  auto group_ccl = std::make_unique<NcclCommunicator>(group_comm, std::move(host_group), device);

  std::vector<std::unique_ptr<Communicator>> out;
  out.push_back(std::move(world_ccl));
  out.push_back(std::move(group_ccl));
  return out;
}

}  // namespace ccl
}  // namespace disco
