// The collective state of one worker process: the world and group communicators InitCCL made.
#ifndef DISCO_CCL_CONTEXT_H_
#define DISCO_CCL_CONTEXT_H_

#include <memory>
#include <string>
#include <vector>

#include "ccl/communicator.h"

namespace disco {
namespace ccl {

struct Context {
  std::string backend;  // "mpi" or "nccl"
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> group;
  int group_size = 1;
};

/// The context made by InitCCL, or nullptr.
Context* CurrentContext();
/// Creates the communicators on this worker (every worker calls it in the same command): `ccl` is
/// "mpi", "nccl" or "auto"; `device_ids` maps node-local ranks to GPUs (empty: local rank modulo
/// the visible GPUs). Replaces (and frees) a previous context.
void Init(const std::string& ccl, const std::vector<int64_t>& device_ids);
/// Frees the communicators (at shutdown).
void Reset();

/// True when this build has NCCL and this process sees a GPU.
bool NcclUsable();

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_CONTEXT_H_
