// The MPI backend: collectives on host tensors over communicators of its own.
#ifndef DISCO_CCL_MPI_COMMUNICATOR_H_
#define DISCO_CCL_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <memory>

#include "ccl/communicator.h"
#include "ccl/mpi/ring.h"

namespace disco {
namespace ccl {

/// A communicator over MPI_Comm_split(parent, color, key) (a duplicate of parent when color is
/// the same everywhere).
std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm parent, int color, int key);

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_MPI_COMMUNICATOR_H_
