// What memory the workers of a job can still take, read before a large allocation so that asking
// for more ends in an error naming the sizes, not in the kernel's OOM killer.
//
// A worker is bound by its host's free memory (MemAvailable, plus free swap), which every worker
// of the host shares, and by the limit of each memory cgroup it sits under (v2, else v1, found
// through /proc/self/mountinfo), which the workers of that cgroup's subtree share. The check
// gathers every worker's limits and needs, and each limit must hold the needs of all the workers
// bound by it: two ranks in one container share its limit, two ranks each in a cgroup of its own
// do not.
#ifndef DISCO_MODELS_LLAMA_HOST_MEMORY_H_
#define DISCO_MODELS_LLAMA_HOST_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace llama {

/// One bound on what some workers may write together.
struct MemoryLimit {
  /// The same for every worker the limit binds: the host's boot id, with the cgroup directory's
  /// device and inode (whatever hostname, mount or namespace a worker sees it through).
  uint64_t id = 0;
  /// Bytes that may still be written: 90% of the free memory (a tenth left to what the processes
  /// take besides), the cgroup's limit less its usage but its page cache counting as free, plus
  /// the swap that can still take pages.
  int64_t room = 0;
  /// For messages: "MemAvailable 22.69 GiB and swap 0.00 GiB on host vm", "the memory cgroup
  /// /sys/fs/cgroup/memory/a limited to 2.00 GiB on host vm".
  std::string what;
};

/// This process's limits: its host's, then the memory cgroups above it that set one (at most
/// kMaxMemoryLimits in all; past that, the tightest). Empty where /proc/meminfo is not there.
constexpr int kMaxMemoryLimits = 16;
std::vector<MemoryLimit> ReadMemoryLimits();

/// Workers' needs against their limits: `needs[w]` bytes for worker w, `limits[w]` its limits
/// (a limit's id in the lists of every worker it binds). The refusal of the first limit (workers
/// in order, each's limits in order) whose room is less than the needs of the workers it binds,
/// as worker `me` can word it (the limit's `what` when it is among `me`'s), or "" when all hold.
std::string MemoryShortfall(const std::vector<int64_t>& needs,
                            const std::vector<std::vector<MemoryLimit>>& limits, int me,
                            const std::string& what, const std::string& advice);

/// Collective over every worker (from a function registered with mark_collective, on all workers
/// alike, after InitCCL where there are several): each worker is about to write `bytes` of host
/// memory for `what`. Throws ValueError on every worker, the sizes and the limit named and
/// `advice` given, when some limit cannot hold what the workers it binds write. Every worker reads
/// its limits before any returns, so one worker's allocation is not counted against another's.
void CheckHostMemory(size_t bytes, const std::string& what, const std::string& advice);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_HOST_MEMORY_H_
