#include "ccl/mpi/communicator.h"

#include <disco/config.h>
#include <disco/error.h>
#include <disco/log.h>
#include <disco/types.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "ccl/mpi/shm.h"
#include "ccl/reduce.h"
#include "core/env.h"
#include "mpi/mpi_util.h"
#include "protocol/frame.h"

namespace disco {
namespace ccl {
namespace {

// ---- Datatypes and operators
// --------------------------------------------------------------------- float16 and bfloat16 have
// no MPI datatype: each gets a 2-byte contiguous type of its own, and the four reductions are
// user-defined MPI_Ops that tell the two apart by that type. Sums of 8- and 16-bit integers take
// a user-defined op too: Open MPI 4.1's vectorized MPI_SUM (op/avx) saturates them from a few
// dozen elements on (100 + 100 = 127 in int8), where MPI, NCCL and disco's own kernels wrap.
struct HalfTypes {
  MPI_Datatype f16 = MPI_DATATYPE_NULL;
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op narrow_int_sum = MPI_OP_NULL;
};
HalfTypes& Halves() {
  static HalfTypes h;
  return h;
}

template <ReduceOp kOp>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype* type) {
  DLDataType t =
      *type == Halves().bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 16, 1};
  Reduce(inout, inout, in, *len, t, kOp);
}

void NarrowIntSum(void* in, void* inout, int* len, MPI_Datatype* type) {
  DLDataType t = *type == MPI_INT8_T    ? DLDataType{kDLInt, 8, 1}
                 : *type == MPI_UINT8_T ? DLDataType{kDLUInt, 8, 1}
                 : *type == MPI_INT16_T ? DLDataType{kDLInt, 16, 1}
                                        : DLDataType{kDLUInt, 16, 1};
  Reduce(inout, inout, in, *len, t, ReduceOp::kSum);
}

// Frees the types and ops at the start of MPI_Finalize (the delete callback of an attribute on
// MPI_COMM_SELF, which MPI_Finalize deletes first, while MPI still works): MPICH's datatype engine
// reports each type still committed at the end ("yaksa: 2 leaked handle pool objects").
int FreeHalfTypes(MPI_Comm, int, void*, void*) {
  HalfTypes& h = Halves();
  for (MPI_Datatype* t : {&h.f16, &h.bf16}) {
    if (*t != MPI_DATATYPE_NULL) MPI_Type_free(t);
  }
  for (MPI_Op& op : h.ops) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
  if (h.narrow_int_sum != MPI_OP_NULL) MPI_Op_free(&h.narrow_int_sum);
  return MPI_SUCCESS;
}

void InitHalfTypes() {
  static std::once_flag once;
  std::call_once(once, [] {
#if !DISCO_SIMULATED  // SMPI's ranks share one process and these statics
    int keyval = MPI_KEYVAL_INVALID;
    DISCO_MPI_CALL(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &FreeHalfTypes, &keyval, nullptr));
    DISCO_MPI_CALL(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr));
    DISCO_MPI_CALL(MPI_Comm_free_keyval(&keyval));
#endif
    HalfTypes& h = Halves();
    DISCO_MPI_CALL(MPI_Type_contiguous(2, MPI_BYTE, &h.f16));
    DISCO_MPI_CALL(MPI_Type_commit(&h.f16));
    DISCO_MPI_CALL(MPI_Type_contiguous(2, MPI_BYTE, &h.bf16));
    DISCO_MPI_CALL(MPI_Type_commit(&h.bf16));
    DISCO_MPI_CALL(MPI_Op_create(&HalfOp<ReduceOp::kSum>, 1, &h.ops[0]));
    DISCO_MPI_CALL(MPI_Op_create(&HalfOp<ReduceOp::kProd>, 1, &h.ops[1]));
    DISCO_MPI_CALL(MPI_Op_create(&HalfOp<ReduceOp::kMin>, 1, &h.ops[2]));
    DISCO_MPI_CALL(MPI_Op_create(&HalfOp<ReduceOp::kMax>, 1, &h.ops[3]));
    DISCO_MPI_CALL(MPI_Op_create(&NarrowIntSum, 1, &h.narrow_int_sum));
  });
}

MPI_Datatype ToMpiType(DLDataType t) {
  switch (t.code) {
    case kDLInt:
      return t.bits == 8    ? MPI_INT8_T
             : t.bits == 16 ? MPI_INT16_T
             : t.bits == 32 ? MPI_INT32_T
                            : MPI_INT64_T;
    case kDLUInt:
      return t.bits == 8    ? MPI_UINT8_T
             : t.bits == 16 ? MPI_UINT16_T
             : t.bits == 32 ? MPI_UINT32_T
                            : MPI_UINT64_T;
    case kDLFloat:
      return t.bits == 16 ? Halves().f16 : t.bits == 32 ? MPI_FLOAT : MPI_DOUBLE;
    case kDLBfloat:
      return Halves().bf16;
  }
  DISCO_THROW(InternalError) << "no MPI datatype for " << DataTypeToString(t);
  return MPI_DATATYPE_NULL;
}

MPI_Op ToMpiOp(ReduceOp op, DLDataType t) {
  bool half = t.bits == 16 && (t.code == kDLBfloat || t.code == kDLFloat);
  bool narrow_int = t.bits <= 16 && (t.code == kDLInt || t.code == kDLUInt);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return half ? Halves().ops[0] : narrow_int ? Halves().narrow_int_sum : MPI_SUM;
    case ReduceOp::kProd:
      return half ? Halves().ops[1] : MPI_PROD;
    case ReduceOp::kMin:
      return half ? Halves().ops[2] : MPI_MIN;
    case ReduceOp::kMax:
      return half ? Halves().ops[3] : MPI_MAX;
  }
  return MPI_OP_NULL;
}

int CheckedCount(size_t n, const char* what) {
  DISCO_CHECK(n <= static_cast<size_t>(INT_MAX), ValueError)
      << what << ": " << n << " elements exceed the MPI backend's limit of " << INT_MAX
      << " per message";
  return static_cast<int>(n);
}

char* Bytes(const Tensor& t) { return static_cast<char*>(t.data()); }

// ---- The communicator
// ----------------------------------------------------------------------------

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(mpi::Comm comm) : comm_(std::move(comm)) {
    InitHalfTypes();
    rank_ = comm_.rank();
    size_ = comm_.size();
    // The same value on every rank (rank 0's, AgreeOnJobKnobs), so all or none create it. Under
    // SimGrid SMPI there is no shared memory to model: the collectives are MPI's, as the
    // simulation skeleton (bench/sim) assumes.
    if (size_ > 1 && !DISCO_SIMULATED && env::GetInt("DISCO_CCL_SHM", 0, 1) == 1)
      shm_ = ShmChannel::Create(comm_.get());
    sync_sends_ = env::GetInt("DISCO_CCL_SYNC_SEND", 0, 1) == 1;
  }

  const char* backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  DLDevice device() const override { return CPU(); }
  MPI_Comm host_comm() const override { return comm_.get(); }
  void HostMax(int64_t* values, int n) override {
    if (!shm_) return Communicator::HostMax(values, n);
    // Through the channel: its waits name a rank that never arrives (for the watchdog).
    char* bytes = reinterpret_cast<char*>(values);
    shm_->AllReduce(bytes, bytes, n, DLDataType{kDLInt, 64, 1}, ReduceOp::kMax);
  }

  void AllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    DLDataType t = send.dtype();
    int64_t n = send.numel();
    if (n == 0) return;
    if (size_ == 1) {
      if (!send.same_as(recv)) std::memcpy(recv.data(), send.data(), send.nbytes());
    } else if (shm_) {
      shm_->AllReduce(Bytes(send), Bytes(recv), n, t, op);
    } else if (!UseRing(send.nbytes(), size_)) {
      const void* src = send.same_as(recv) ? MPI_IN_PLACE : send.data();
      DISCO_MPI_CALL(MPI_Allreduce(src, recv.data(), CheckedCount(n, "allreduce"), ToMpiType(t),
                                   ToMpiOp(op, t), comm_.get()));
    } else {
      RingAllReduce(Bytes(send), Bytes(recv), n, t, op);
    }
    if (op == ReduceOp::kAvg) DivideBy(recv.data(), n, t, size_);
  }

  void AllGather(const Tensor& send, const Tensor& recv) override {
    size_t bytes = send.nbytes();
    if (bytes == 0) return;
    char* dst = Bytes(recv);
    const char* src = Bytes(send);
    if (shm_ && bytes * size_ < ShmChannel::kCopyMaxBytes) {
      shm_->AllGather(src, dst, bytes);
    } else if (src == dst + rank_ * bytes) {
      DISCO_MPI_CALL(MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, dst, CheckedCount(bytes, "allgather"),
                                   MPI_BYTE, comm_.get()));
    } else {
      DISCO_MPI_CALL(MPI_Allgather(src, CheckedCount(bytes, "allgather"), MPI_BYTE, dst,
                                   static_cast<int>(bytes), MPI_BYTE, comm_.get()));
    }
  }

  void ReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    DLDataType t = recv.dtype();
    int64_t m = recv.numel();
    if (m == 0) return;
    if (size_ == 1) {
      if (!send.same_as(recv)) std::memcpy(recv.data(), send.data(), recv.nbytes());
    } else if (shm_) {
      shm_->ReduceScatter(Bytes(send), Bytes(recv), m, t, op);
    } else if (!UseRing(send.nbytes(), size_)) {
      DISCO_MPI_CALL(MPI_Reduce_scatter_block(send.data(), recv.data(),
                                              CheckedCount(m, "reduce_scatter"), ToMpiType(t),
                                              ToMpiOp(op, t), comm_.get()));
    } else {
      RingReduceScatter(Bytes(send), nullptr, Bytes(recv), m * size_, t, op);
    }
    if (op == ReduceOp::kAvg) DivideBy(recv.data(), m, t, size_);
  }

  void Broadcast(const Tensor& send, const Tensor& recv, int root) override {
    size_t bytes = recv.nbytes();
    if (bytes == 0) return;
    bool copy = rank_ == root && send.defined() && !send.same_as(recv);
    if (shm_ && bytes < ShmChannel::kCopyMaxBytes) {
      shm_->Broadcast(copy ? Bytes(send) : Bytes(recv), Bytes(recv), bytes, root);
      return;
    }
    if (bytes < kOverlapMinBytes || bytes > static_cast<size_t>(INT_MAX)) {
      if (copy) std::memcpy(recv.data(), send.data(), bytes);
      BcastBytes(Bytes(recv), bytes, root);
      return;
    }
    // Large: every rank takes the non-blocking form (they must match), and the root broadcasts
    // straight from `send` while it copies `send` into its own `recv` (on Open MPI's
    // shared-memory transport the receivers pull the data themselves).
    MPI_Request request;
    void* buffer = copy ? send.data() : recv.data();
    DISCO_MPI_CALL(
        MPI_Ibcast(buffer, static_cast<int>(bytes), MPI_BYTE, root, comm_.get(), &request));
    if (copy) std::memcpy(recv.data(), send.data(), bytes);
    DISCO_MPI_CALL(MPI_Wait(&request, MPI_STATUS_IGNORE));
  }

  void Scatter(const Tensor& send, const Tensor& recv, int root) override {
    size_t bytes = recv.nbytes();
    if (bytes == 0) return;
    int count = CheckedCount(bytes, "scatter");
    DISCO_MPI_CALL(MPI_Scatter(rank_ == root ? send.data() : nullptr, count, MPI_BYTE, recv.data(),
                               count, MPI_BYTE, root, comm_.get()));
  }

  void Gather(const Tensor& send, const Tensor& recv, int root) override {
    size_t bytes = send.nbytes();
    if (bytes == 0) return;
    int count = CheckedCount(bytes, "gather");
    DISCO_MPI_CALL(MPI_Gather(send.data(), count, MPI_BYTE, rank_ == root ? recv.data() : nullptr,
                              count, MPI_BYTE, root, comm_.get()));
  }

  void Send(const Tensor& buffer, int peer) override {
    sends_.Progress(/*wait=*/false);
    int count = CheckedCount(buffer.nbytes(), "send");
    if (sync_sends_) {
      // As NCCL's send may: return only once the receiver has the data.
      DISCO_MPI_CALL(MPI_Ssend(buffer.data(), count, MPI_BYTE, peer, kP2PTag, comm_.get()));
      return;
    }
    // A copy: the caller may reuse the tensor at once. Copies of sends nobody receives pile up:
    // warned about, and bounded.
    const size_t after = sends_.pending_bytes() + buffer.nbytes();
    DISCO_CHECK(sends_.pending() < kMaxUnmatchedSends && after <= MaxUnmatchedBytes(), ValueError)
        << "send: " << sends_.pending() << " earlier sends of this worker ("
        << sends_.pending_bytes() / (1 << 20) << " MiB) have not been received; this one would "
        << "pass the limit of " << kMaxUnmatchedSends << " sends or "
        << MaxUnmatchedBytes() / (1 << 20) << " MiB (half the memory): match every send with a "
        << "receive";
    if ((sends_.pending() + 1 >= kWarnUnmatchedSends || after >= kWarnUnmatchedBytes) &&
        !warned_unmatched_) {
      warned_unmatched_ = true;
      DISCO_LOG(WARN) << "send: " << sends_.pending() + 1
                      << " sends of this worker are waiting for "
                      << "their receivers (" << after / (1 << 20)
                      << " MiB of copies); is a receive "
                      << "missing?";
    }
    if (sends_.pending() == 0) warned_unmatched_ = false;
    sends_.Send(buffer.data(), count, peer, kP2PTag, comm_.get());
  }

  void SendRecv(const Tensor& send, int dest, const Tensor& recv, int source) override {
    MPI_Request request = MPI_REQUEST_NULL;
    if (dest >= 0) {
      DISCO_MPI_CALL(MPI_Isend(send.data(), CheckedCount(send.nbytes(), "sendrecv"), MPI_BYTE, dest,
                               kP2PTag, comm_.get(), &request));
    }
    std::exception_ptr failure;
    try {
      if (source >= 0) Recv(recv, source);
    } catch (const Error&) {
      failure = std::current_exception();  // the send still completes: its peer receives it
    }
    DISCO_MPI_CALL(MPI_Wait(&request, MPI_STATUS_IGNORE));
    if (failure) std::rethrow_exception(failure);
  }

  void Recv(const Tensor& buffer, int peer) override {
    MPI_Status status;
    DISCO_MPI_CALL(MPI_Probe(peer, kP2PTag, comm_.get(), &status));
    int count = 0;
    DISCO_MPI_CALL(MPI_Get_count(&status, MPI_BYTE, &count));
    if (static_cast<size_t>(count) != buffer.nbytes()) {
      // Take the message anyway, so the next exchange with this peer is not misaligned.
      std::vector<char> drain(static_cast<size_t>(count));
      DISCO_MPI_CALL(
          MPI_Recv(drain.data(), count, MPI_BYTE, peer, kP2PTag, comm_.get(), MPI_STATUS_IGNORE));
      DISCO_THROW(ValueError) << "recv: the message from worker " << peer << " has " << count
                              << " bytes, but the receive buffer holds " << buffer.nbytes();
    }
    DISCO_MPI_CALL(
        MPI_Recv(buffer.data(), count, MPI_BYTE, peer, kP2PTag, comm_.get(), MPI_STATUS_IGNORE));
    sends_.Progress(/*wait=*/false);
  }

  void Barrier() override {
    DISCO_MPI_CALL(MPI_Barrier(comm_.get()));
    sends_.Progress(/*wait=*/false);
  }

 private:
  static constexpr int kP2PTag = 11;
  static constexpr size_t kWarnUnmatchedSends = 64;
  static constexpr size_t kWarnUnmatchedBytes = size_t{1} << 30;
  static constexpr size_t kMaxUnmatchedSends = 4096;
  static size_t MaxUnmatchedBytes() {
    static const size_t bytes = [] {
      long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);  // NOLINT(runtime/int)
      return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 2
                                   : size_t{8} << 30;
    }();
    return bytes;
  }
  static constexpr size_t kOverlapMinBytes = 8 * 1024;

  void BcastBytes(char* data, size_t n, int root) {
    constexpr size_t kChunk = size_t{1} << 30;
    for (size_t off = 0; off < n; off += kChunk) {
      DISCO_MPI_CALL(MPI_Bcast(data + off, static_cast<int>(std::min(kChunk, n - off)), MPI_BYTE,
                               root, comm_.get()));
    }
  }

  // Persistent staging: grown on demand, touched once, reused by every later call.
  char* Staging(size_t index, size_t bytes) {
    if (staging_[index].capacity() < bytes) staging_[index].Reserve(bytes);
    return reinterpret_cast<char*>(staging_[index].data());
  }

  // Chunk c of a buffer of n elements split into size_ nearly equal chunks.
  int64_t ChunkCount(int64_t n, int c) const { return n / size_ + (c < n % size_ ? 1 : 0); }
  int64_t ChunkOffset(int64_t n, int c) const {
    return static_cast<int64_t>(c) * (n / size_) + std::min<int64_t>(c, n % size_);
  }
  int Mod(int x) const { return ((x % size_) + size_) % size_; }

  // Ring reduce-scatter of n elements of `send`. Rank r ends with the reduction of chunk r in
  // `own`. With `full` (allreduce), every intermediate chunk is written into `full` (its final
  // place); without it, intermediates alternate between two staging buffers.
  void RingReduceScatter(const char* send, char* full, char* own, int64_t n, DLDataType t,
                         ReduceOp op) {
    const size_t elem = DataTypeBytes(t);
    const int right = Mod(rank_ + 1), left = Mod(rank_ - 1);
    const size_t max_chunk = static_cast<size_t>(ChunkCount(n, 0)) * elem;
    const char* outgoing = nullptr;
    int64_t out_count = 0;
    for (int s = 0; s < size_ - 1; ++s) {
      int send_chunk = Mod(rank_ - s - 1), recv_chunk = Mod(rank_ - s - 2);
      if (s == 0) {
        outgoing = send + ChunkOffset(n, send_chunk) * elem;
        out_count = ChunkCount(n, send_chunk);
      }
      int64_t in_count = ChunkCount(n, recv_chunk);
      const char* mine = send + ChunkOffset(n, recv_chunk) * elem;
      char* dst;
      if (s == size_ - 2) {
        dst = own;
      } else if (full != nullptr) {
        dst = full + ChunkOffset(n, recv_chunk) * elem;
      } else {
        dst = Staging(1 + (s % 2), max_chunk);
      }
      ExchangeAndReduce(outgoing, out_count * elem, in_count, mine, dst, t, op, right, left);
      outgoing = dst;
      out_count = in_count;
    }
  }

  // Sends `out` to `right` while receiving `in_count` elements from `left`, segment by segment,
  // reducing each arrived segment: dst = mine op incoming. Incoming segments land in a small ring
  // of staging slots (kRingWindow x kRingSegmentBytes) that stays in cache, reposted as they are
  // reduced.
  void ExchangeAndReduce(const char* out, size_t out_bytes, int64_t in_count, const char* mine,
                         char* dst, DLDataType t, ReduceOp op, int right, int left) {
    const size_t elem = DataTypeBytes(t);
    const int64_t seg = std::max<int64_t>(1, static_cast<int64_t>(kRingSegmentBytes / elem));
    const int64_t nseg = (in_count + seg - 1) / seg;
    const int64_t out_count = static_cast<int64_t>(out_bytes / elem);
    const int64_t nout = (out_count + seg - 1) / seg;
    char* slots = Staging(0, kRingWindow * seg * elem);
    requests_.assign(static_cast<size_t>(kRingWindow + nout), MPI_REQUEST_NULL);
    auto post = [&](int64_t k) {
      int64_t c = std::min(seg, in_count - k * seg);
      DISCO_MPI_CALL(MPI_Irecv(slots + (k % kRingWindow) * seg * elem, static_cast<int>(c * elem),
                               MPI_BYTE, left, kRingTag, comm_.get(), &requests_[k % kRingWindow]));
    };
    for (int64_t k = 0; k < std::min<int64_t>(kRingWindow, nseg); ++k) post(k);
    for (int64_t k = 0; k < nout; ++k) {
      int64_t c = std::min(seg, out_count - k * seg);
      DISCO_MPI_CALL(MPI_Isend(out + k * seg * elem, static_cast<int>(c * elem), MPI_BYTE, right,
                               kRingTag, comm_.get(), &requests_[kRingWindow + k]));
    }
    for (int64_t k = 0; k < nseg; ++k) {
      DISCO_MPI_CALL(MPI_Wait(&requests_[k % kRingWindow], MPI_STATUS_IGNORE));
      int64_t c = std::min(seg, in_count - k * seg);
      Reduce(dst + k * seg * elem, mine + k * seg * elem, slots + (k % kRingWindow) * seg * elem, c,
             t, op);
      if (k + kRingWindow < nseg) post(k + kRingWindow);
    }
    DISCO_MPI_CALL(
        MPI_Waitall(static_cast<int>(nout), requests_.data() + kRingWindow, MPI_STATUSES_IGNORE));
  }

  void RingAllReduce(const char* send, char* recv, int64_t n, DLDataType t, ReduceOp op) {
    const size_t elem = DataTypeBytes(t);
    RingReduceScatter(send, recv, recv + ChunkOffset(n, rank_) * elem, n, t, op);
    // Ring allgather: pass each finished chunk on, straight into its place in recv.
    const int right = Mod(rank_ + 1), left = Mod(rank_ - 1);
    for (int s = 0; s < size_ - 1; ++s) {
      int send_chunk = Mod(rank_ - s), recv_chunk = Mod(rank_ - s - 1);
      DISCO_MPI_CALL(MPI_Sendrecv(recv + ChunkOffset(n, send_chunk) * elem,
                                  static_cast<int>(ChunkCount(n, send_chunk) * elem), MPI_BYTE,
                                  right, kRingTag, recv + ChunkOffset(n, recv_chunk) * elem,
                                  static_cast<int>(ChunkCount(n, recv_chunk) * elem), MPI_BYTE,
                                  left, kRingTag, comm_.get(), MPI_STATUS_IGNORE));
    }
  }

  mpi::Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<ShmChannel> shm_;  // null: ranks on several nodes, or DISCO_CCL_SHM=0
  mpi::CopiedSends sends_;
  bool sync_sends_ = false;  // DISCO_CCL_SYNC_SEND=1
  bool warned_unmatched_ = false;
  protocol::ByteBuffer staging_[3];
  std::vector<MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm parent, int color, int key) {
  mpi::Comm comm = mpi::Comm::Split(parent, color, key);
  return std::make_unique<MpiCommunicator>(std::move(comm));
}

}  // namespace ccl
}  // namespace disco
