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
/// The builtins (DESIGN.md §2) run on every worker; the Session wrappers call them:
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
/// With `in_group`, the group communicator is used and the group's first worker is the root.
/// Tensors are split and concatenated along their flattened element order. Before moving data,
/// the ranks of a collective agree on its validity, so a bad argument on one rank is an error on
/// every rank (a RemoteError on the controller), never a hang.
#ifndef DISCO_CCL_H_
#define DISCO_CCL_H_

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

}  // namespace disco

#endif  // DISCO_CCL_H_
