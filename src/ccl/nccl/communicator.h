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
/// over `world` (rank 0's ncclGetUniqueId travels by MPI_Bcast, then a barrier, then
/// ncclCommInitRank) and the group communicator by ncclCommSplit. Returns {world, group}.
std::vector<std::unique_ptr<Communicator>> MakeNcclCommunicators(
    MPI_Comm world, int local_rank, const std::vector<int64_t>& device_ids, int group_color,
    int group_key);

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_NCCL_COMMUNICATOR_H_
