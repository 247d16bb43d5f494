// The data-plane interface: one communicator over a set of workers, with the collectives and
// point-to-point operations the builtins need. Backends live in sibling folders with the same file
// names (ccl/mpi/communicator.cc, ccl/nccl/communicator.cc); the builtins (ccl/builtins.cc) check
// arguments, make the ranks agree, and call these. Tensors are compact; counts are elements.
#ifndef DISCO_CCL_COMMUNICATOR_H_
#define DISCO_CCL_COMMUNICATOR_H_

#include <disco/ccl.h>
#include <disco/tensor.h>

#include <mpi.h>

#include "mpi/mpi_util.h"

#include <memory>
#include <string>

namespace disco {
namespace ccl {

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// "mpi" or "nccl".
  virtual const char* backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The device tensors must live on (CPU for MPI, the bound GPU for NCCL).
  virtual DLDevice device() const = 0;
  /// Whether collectives of this backend move `dtype` (NCCL lacks int16 and uint16).
  virtual bool SupportsDType(DLDataType dtype) const { return true; }

  virtual void AllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) = 0;
  /// AllReduce for worker functions (AllReduceInFunction): NCCL queues it on the device's compute
  /// stream (memory::ComputeStream, ThisWorkerStream()) after the work already there, and returns
  /// without waiting for the device; MPI is AllReduce. An error NCCL reports later aborts the
  /// communicator at its next operation, or shows at the next synchronization of the stream.
  virtual void AllReduceQueued(const Tensor& send, const Tensor& recv, ReduceOp op) {
    AllReduce(send, recv, op);
  }
  /// recv holds size() blocks of send's element count, in rank order.
  virtual void AllGather(const Tensor& send, const Tensor& recv) = 0;
  /// send holds size() blocks of recv's element count; rank r gets the reduction of block r.
  virtual void ReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) = 0;
  /// `root` sends `send`; every rank (root included) receives into `recv`.
  virtual void Broadcast(const Tensor& send, const Tensor& recv, int root) = 0;
  /// `root`'s send (size() blocks of recv's count) is split; `send` is undefined elsewhere.
  virtual void Scatter(const Tensor& send, const Tensor& recv, int root) = 0;
  /// Every rank's send is concatenated into `root`'s recv (undefined elsewhere).
  virtual void Gather(const Tensor& send, const Tensor& recv, int root) = 0;
  /// Starts sending `buffer` to `peer` and returns without waiting for the receiver, so the
  /// matching Recv may come in a later command. MPI sends a copy: the buffer is free at once
  /// (unless DISCO_CCL_SYNC_SEND=1: then the send waits for the receiver, without a copy). NCCL
  /// queues the send on its stream: the GPU reads `buffer` only once the receiver has posted the
  /// matching receive, so the buffer stays busy until then (do not write or free it), and later
  /// operations of the same communicator on this rank run after it. Post the matching receive
  /// before the next collective that involves both peers.
  virtual void Send(const Tensor& buffer, int peer) = 0;
  /// Receives from `peer` into `buffer`.
  virtual void Recv(const Tensor& buffer, int peer) = 0;
  /// Whether a lone Send or Recv with `peer` (not grouped with the other half, as
  /// disco.send_to_worker's) is safe. NCCL connects a pair at its first operation, and a lone
  /// send to an unconnected peer blocks the host until the peer posts its receive: the NCCL
  /// backend answers true only for the peers it connected at InitCCL (ccl/nccl/peers.h: the same
  /// answer on both peers). MPI: every peer. SendRecv is safe with any peer.
  virtual bool PreConnected(int peer) const { return true; }
  /// Sends `send` to `dest` and receives `recv` from `source` at once, as one operation (one NCCL
  /// group, MPI_Sendrecv), so a ring or a shift between groups never waits on itself. A peer of
  /// -1 skips that half.
  virtual void SendRecv(const Tensor& send, int dest, const Tensor& recv, int source) = 0;
  virtual void Barrier() = 0;
  /// An MPI communicator over the same ranks, in the same order, for host-side agreement.
  virtual MPI_Comm host_comm() const = 0;
  /// values[i] = the maximum of values[i] over the ranks (the builtins' agreement round).
  virtual void HostMax(int64_t* values, int n) {
    DISCO_MPI_CALL(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, MPI_MAX, host_comm()));
  }
};

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_COMMUNICATOR_H_
