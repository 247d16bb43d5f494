// What memory this node can still give the processes of a job, read before a large allocation so
// that asking for more ends in an error naming the sizes, not in the kernel's OOM killer.
#ifndef DISCO_MODELS_LLAMA_HOST_MEMORY_H_
#define DISCO_MODELS_LLAMA_HOST_MEMORY_H_

#include <cstdint>
#include <string>

namespace llama {

struct HostMemory {
  /// Bytes that can be allocated without swapping: /proc/meminfo's MemAvailable, lowered to the
  /// room under this process's memory cgroup limit (its usage less the page cache it holds) where
  /// one is set. -1: unknown (no /proc/meminfo).
  int64_t available = -1;
  /// Swap that can still take pages (SwapFree, lowered to the cgroup's swap room where set).
  int64_t swap = 0;
  /// Where `available` came from, for messages: "MemAvailable" or "the cgroup limit of N bytes".
  std::string source;
};

/// Reads /proc/meminfo and the memory cgroup (v2, else v1) of this process.
HostMemory ReadHostMemory();

/// The refusal when `workers` workers of one node each writing `bytes` for `what` is more than
/// `mem` can hold in memory and swap ("" when it fits).
std::string NodeMemoryShortfall(size_t bytes, int workers, const HostMemory& mem,
                                const std::string& what, const std::string& advice);

/// Collective over every worker (from a function registered with mark_collective, on all workers
/// alike): each worker is about to write `bytes` of host memory for `what`, as many times on its
/// node as the node has workers (ThisWorker().local_size). Throws ValueError on every worker, the
/// sizes named and `advice` given, when some node cannot hold it in memory and swap; warns when it
/// only fits with swap. Every worker reads the memory before any returns, so one worker's
/// allocation is not counted against another's.
void CheckNodeMemory(size_t bytes, const std::string& what, const std::string& advice);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_HOST_MEMORY_H_
