/// \file disco/ccl.h
/// \brief Collective communication: reduction operators and the collective builtins.
///
/// `Session::InitCCL("mpi" | "nccl" | "auto", device_ids)` creates, on every worker, a world
/// communicator and one per worker group for tensor collectives. "nccl" runs on CUDA tensors
/// (NCCL bootstrapped by MPI); "mpi" on host tensors over MPI communicators of its own (never the
/// control communicator); "auto" picks NCCL when the build has it and every rank has a GPU of its
/// own, and then moves host tensors over MPI (the ranks agree on which, per collective); otherwise
/// MPI. `DISCO_CCL` overrides the choice.
///
/// Point to point: a send returns without waiting for the receiver, so the matching receive may
/// be the next command. Under NCCL the send's buffer stays busy until then (do not write or free
/// it), and it must be received before the next collective that involves both peers. A function
/// that sends and receives calls disco.sendrecv (or the controller ShiftToNextGroup), never a
/// send followed by a receive, which NCCL may not complete.
///
/// Under NCCL, disco.send_to_worker and disco.recv_from_worker work only between peers connected
/// at InitCCL: every pair in worlds of up to 8 workers; beyond, ring neighbours (worker ± 1) and
/// the same worker of the next and previous group (worker ± workers per group). Between other
/// peers both sides refuse the call with a ValueError (NCCL would connect them inside the call,
/// blocking each worker until the other half comes); disco.sendrecv, one grouped operation that
/// every worker calls in the same command, connects any pair safely.
///
/// The point-to-point builtins have no agreement round, unlike the collectives: each side checks
/// only its own arguments, and nothing compares the two sides. A check that fails on one side only
/// (its buffer is not a tensor, has a dtype its backend cannot move or lies on another device;
/// under "auto", a host tensor on one side and a device tensor on the other pick MPI on one side
/// and NCCL on the other) raises there, and the peer waits, in its receive or, for a send nobody
/// receives, in its next operation on the world communicator, until the watchdog (DISCO_TIMEOUT)
/// ends the job. Buffers of different element counts or dtypes on the two sides are not compared
/// either: depending on the backend the transfer fails, hangs or moves the wrong bytes. Give both
/// sides buffers made alike (one Session::Empty call) to keep such errors out.
///
/// The builtins (docs/design.md#builtins) run on every worker; the Session wrappers call them:
///   disco.allreduce(send, op, in_group, recv)          op: sum, prod, min, max, avg
///   disco.allgather(send, in_group, recv)              recv = n x send, in rank order
///   disco.reduce_scatter(send, op, in_group, recv)     send = n x recv
///   disco.broadcast_from_worker0(send, in_group, recv)
///   disco.scatter_from_worker0(send or None, in_group, recv)
///   disco.gather_to_worker0(send, in_group, recv or None)
///   disco.recv_from_worker0(buffer)                    worker 0 sends, every other worker receives
///   disco.send_to_next_group(buffer) / disco.recv_from_prev_group(buffer)
///   disco.send_to_worker(buffer, peer) / disco.recv_from_worker(buffer, peer)
///   disco.sendrecv(send, dest, recv, source)          both at once; a peer of -1 skips that half
///   disco.shift_to_next_group(send, recv)             to the next group and from the previous one
///   disco.barrier(in_group)
/// From inside a worker function, `AllReduceInFunction` (below) allreduces without the builtin's
/// agreement round when the caller guarantees the same metadata on every worker.
/// With `in_group`, the group communicator is used and the group's first worker is the root.
/// Tensors are split and concatenated along their flattened element order. Before moving data,
/// the ranks of a collective agree on its validity, so a bad argument on one rank is an error on
/// every rank (a RemoteError on the controller), never a hang.
#ifndef DISCO_CCL_H_
#define DISCO_CCL_H_

#include <disco/tensor.h>
#include <disco/types.h>

#include <string>

namespace disco {

/// Reduction operators of allreduce and reduce_scatter.
enum class ReduceOp : int { kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4 };

/// "sum", "prod", "min", "max", "avg"; throws ValueError naming the string otherwise.
ReduceOp ParseReduceOp(const std::string& name);
const char* ReduceOpName(ReduceOp op);
/// Whether `op` is defined for `dtype` (avg is defined for floating types only; every op for
/// int8..int64, uint8..uint64, float16, bfloat16, float32, float64).
bool ReduceOpSupports(ReduceOp op, DLDataType dtype);

/// Allreduces `send` into `recv` (the same tensor for in place) from inside a worker function,
/// over the world or, with `in_group`, over this worker's group, without the agreement round of
/// the builtin disco.allreduce.
///
/// A tensor made inside a function has no register the ranks could name it by, so the builtin,
/// called from a function, first runs one small MPI_Allreduce (the agreement) to check that every
/// rank passes the same element count and dtype: a hang avoided at the price of a round trip per
/// call. This skips it: **the caller guarantees** that every worker of the communicator calls it at
/// the same point of the same command, with tensors of the same element count, dtype and kind of
/// device, e.g. because their shapes follow from a model's config and the command's arguments
/// alone. The checks this function makes itself (both tensors defined, host tensors under the
/// mpi backend, the same dtype and element count, an op the dtype supports, InitCCL done) read
/// only that metadata, so they throw ValueError or TypeError on every worker alike, before
/// anything moves. Metadata that differs between workers is not detected: the job then hangs
/// until the watchdog (DISCO_TIMEOUT) ends it, or moves the wrong bytes.
///
/// Host tensors (mpi) are reduced when it returns. CUDA tensors (nccl) are reduced in order on the
/// worker's compute stream (ThisWorkerStream(), disco/worker.h), after the kernels queued there
/// before the call and before those queued after it; it returns without waiting for the GPU (read
/// the result on the host through a copy, which synchronizes, or a stream synchronization). An
/// error NCCL reports later shows at the next collective or synchronization.
///
/// Register the function that calls it with Registry::mark_collective(): worker 0 then runs it
/// once the controller's next frame is out (the other workers need not wait for it), a worker on
/// which an argument register failed ends the job instead of leaving the others in the
/// collective, and the watchdog names a stuck call as a collective.
void AllReduceInFunction(const Tensor& send, const Tensor& recv, ReduceOp op,
                         bool in_group = false);
/// In place: `AllReduceInFunction(t, t, op, in_group)`.
inline void AllReduceInFunction(const Tensor& t, ReduceOp op, bool in_group = false) {
  AllReduceInFunction(t, t, op, in_group);
}

}  // namespace disco

#endif  // DISCO_CCL_H_
