// The control-plane transport: moves bytes between rank 0 and the workers over a communicator of
// its own (a duplicate of the world). It knows nothing of frames or values: the session layer
// builds and parses those (protocol/), the transport only broadcasts, sends and receives.
#ifndef DISCO_SESSION_MPI_TRANSPORT_H_
#define DISCO_SESSION_MPI_TRANSPORT_H_

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "mpi/mpi_util.h"
#include "protocol/frame.h"
#include "session/transport_tags.h"

namespace disco {

class MpiTransport {
 public:
  /// Tags of point-to-point messages on the control communicator.
  static constexpr int kTagReply = kControlTagReply;
  static constexpr int kTagError = kControlTagError;

  explicit MpiTransport(MPI_Comm world);
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_.get(); }

  /// MPI_Bcast of `n` bytes from rank 0 (split into chunks of at most 1 GiB).
  void Broadcast(void* data, size_t n);
  /// The same through MPI_Ibcast, completed before it returns: the root's side of a frame that the
  /// workers receive with PostBroadcast (a nonblocking collective matches only a nonblocking one).
  void BroadcastNonblocking(void* data, size_t n);
  /// Workers: posts the MPI_Ibcast of the next `n` (<= 2 GiB) bytes into `data`, which must stay
  /// put until WaitPosted returns; MPI moves it on (down the broadcast tree) inside any MPI call.
  void PostBroadcast(void* data, size_t n);
  /// Completes the posted broadcast (no-op when none is posted).
  void WaitPosted();
  bool posted() const { return posted_ != MPI_REQUEST_NULL; }
  /// Blocking send of `n` bytes to `dest`.
  void Send(int dest, int tag, const void* data, size_t n);
  /// Non-blocking send of a copy of `n` bytes; the copy lives until the send completes.
  void SendAsync(int dest, int tag, const void* data, size_t n);
  /// Completes the asynchronous sends that have finished; with `wait`, all of them.
  void ProgressSends(bool wait);
  /// Receives one message from `source` (MPI_ANY_SOURCE allowed) with `tag` into `buf`, sized by
  /// MPI_Probe; refuses messages over `max_bytes`. Returns the source rank.
  int Receive(int source, int tag, protocol::ByteBuffer* buf, size_t max_bytes);
  /// Receives one message of at most `capacity` bytes from `source` with a single MPI_Recv (no
  /// probe: for replies whose size is known to be small). Returns its size.
  size_t ReceiveSmall(int source, int tag, protocol::ByteBuffer* buf, size_t capacity);
  /// True when a message with `tag` from anyone is waiting; sets `*source`.
  bool Probe(int tag, int* source);
  /// The sum over ranks of `mine`, at rank 0 (MPI_Reduce: log P steps, nothing per rank kept).
  uint64_t ReduceSumU64(uint64_t mine);
  /// MPI_Bcast of one int64 from rank 0.
  int64_t BroadcastI64(int64_t value);
  /// Workers: joins a nonblocking barrier and sleeps between tests of it (1 us, doubling up to
  /// `max_sleep_us`) until rank 0 joins it with Unpark: a parked worker uses no CPU to speak of.
  void ParkUntilWoken(int max_sleep_us);
  /// Rank 0: joins the barrier the parked workers wait in.
  void Unpark();

 private:
  mpi::Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  mpi::CopiedSends sends_;
  MPI_Request posted_ = MPI_REQUEST_NULL;
};

}  // namespace disco

#endif  // DISCO_SESSION_MPI_TRANSPORT_H_
