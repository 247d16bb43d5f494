// The MPI backend: collectives on host tensors over communicators of its own.
#ifndef DISCO_CCL_MPI_COMMUNICATOR_H_
#define DISCO_CCL_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <memory>

#include "ccl/communicator.h"

namespace disco {
namespace ccl {

/// A communicator over MPI_Comm_split(parent, color, key) (a duplicate of parent when color is
/// the same everywhere).
std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm parent, int color, int key);

/// Messages from this size on take disco's own ring algorithms with persistent staging instead of
/// MPI_Allreduce / MPI_Reduce_scatter_block, which allocate a full-size temporary on every call.
constexpr size_t kRingMinBytes = 256 * 1024;

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_MPI_COMMUNICATOR_H_
