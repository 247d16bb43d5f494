// The NCCL backend: collectives on CUDA tensors, bootstrapped over MPI.
#ifndef DISCO_CCL_NCCL_COMMUNICATOR_H_
#define DISCO_CCL_NCCL_COMMUNICATOR_H_

#include <mpi.h>

#include <memory>
#include <vector>

#include "ccl/communicator.h"

namespace disco {
namespace ccl {

/// Binds this process to its GPU (device_ids[local_rank] when given, else local_rank modulo the
/// visible GPUs; cudaSetDevice before any other CUDA call), then creates the world communicator
/// over `world` (rank 0's ncclGetUniqueId travels by MPI_Bcast, then a polled, non-blocking
/// ncclCommInitRankConfig), the group communicator by ncclCommSplit, and connects the peers that
/// exchange point to point (next and previous group of `group_size` workers, ring neighbours, or
/// every pair in small worlds). A failure on any rank is an error on every rank. Returns
/// {world, group}.
std::vector<std::unique_ptr<Communicator>> MakeNcclCommunicators(
    MPI_Comm world, int local_rank, const std::vector<int64_t>& device_ids, int group_color,
    int group_key, int group_size);

/// Whether every rank of `world` would get a GPU of its own from InitCCL('nccl') with
/// `device_ids`: the same verdict on every rank (collective), and no error when not.
bool EveryRankHasItsOwnGpu(MPI_Comm world, int local_rank, const std::vector<int64_t>& device_ids);

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_NCCL_COMMUNICATOR_H_
