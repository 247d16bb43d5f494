// The collective state of one worker process: the world and group communicators InitCCL made.
#ifndef DISCO_CCL_CONTEXT_H_
#define DISCO_CCL_CONTEXT_H_

#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ccl/communicator.h"

namespace disco {
namespace ccl {

/// Names a collective's arguments the same way on every worker: the builtin, its op and group
/// flag, and the (register, version) of its tensors.
struct AgreedKey {
  bool valid = false;
  const void* self = nullptr;
  int64_t extra = 0;
  int64_t reg[2] = {0, 0};
  uint64_t version[2] = {0, 0};
  // Every tensor argument's register has the same metadata on every worker (ArgOrigin::uniform);
  // not part of the key's identity.
  bool uniform = false;
  // This worker's tensors' metadata (ArgOrigin::fingerprint); not part of the key's identity: a
  // key agreed before is checked against it.
  uint64_t fingerprint[2] = {0, 0};
  bool operator==(const AgreedKey& o) const {
    return self == o.self && extra == o.extra && reg[0] == o.reg[0] && reg[1] == o.reg[1] &&
           version[0] == o.version[0] && version[1] == o.version[1];
  }
};
struct AgreedKeyHash {
  size_t operator()(const AgreedKey& k) const {
    uint64_t h = reinterpret_cast<uintptr_t>(k.self) * 0x9E3779B97F4A7C15ull;
    for (uint64_t v : {static_cast<uint64_t>(k.extra), static_cast<uint64_t>(k.reg[0]),
                       static_cast<uint64_t>(k.reg[1]), k.version[0], k.version[1]}) {
      h = (h ^ v) * 0x100000001B3ull;
    }
    return static_cast<size_t>(h);
  }
};

struct Context {
  std::string backend;  // "mpi" or "nccl"
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> group;
  // InitCCL("auto") that chose NCCL: MPI communicators for collectives on host tensors (null
  // otherwise; an explicit "nccl" takes device tensors only).
  std::unique_ptr<Communicator> host_world;
  std::unique_ptr<Communicator> host_group;
  int group_size = 1;
  // Collectives whose arguments (named by register and version, or by the graph whose replays
  // write the register; the same on every worker) the workers already agreed on, with this
  // worker's tensors' metadata then: repeating one skips the agreement round. Cleared when full,
  // which happens at the same command everywhere.
  std::unordered_map<AgreedKey, std::array<uint64_t, 2>, AgreedKeyHash> agreed;
  // Agreement rounds run so far (diagnostics and tests).
  uint64_t agreement_rounds = 0;
};

/// The context made by InitCCL, or nullptr.
Context* CurrentContext();
/// Creates the communicators on this worker (every worker calls it in the same command): `ccl` is
/// "mpi", "nccl" or "auto"; `device_ids` maps node-local ranks to GPUs (empty: local rank modulo
/// the visible GPUs). "auto" is NCCL when every rank has a GPU of its own (with MPI for host
/// tensors beside it), MPI otherwise. Replaces (and frees) a previous context.
void Init(const std::string& ccl, const std::vector<int64_t>& device_ids);
/// Frees the communicators (at shutdown).
void Reset();

/// True when this build has NCCL and this process sees a GPU.
bool NcclUsable();

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_CONTEXT_H_
