#include "llama/host_memory.h"

#include <disco/ccl.h>
#include <disco/error.h>
#include <disco/log.h>
#include <disco/tensor.h>
#include <disco/worker.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace llama {
namespace {

// Limits at or past this are "none" (cgroup v1 writes 2^63 rounded down to a page).
constexpr int64_t kNoLimit = int64_t{1} << 62;

// The first number of a file ("max" and anything unreadable: -1).
int64_t ReadNumber(const std::string& path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word.empty() || word[0] < '0' || word[0] > '9') return -1;
  return std::strtoll(word.c_str(), nullptr, 10);
}

// The value of `key` in a "key value" file (memory.stat), or 0.
int64_t StatField(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  int64_t v = 0;
  while (f >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

// /proc/meminfo's `key` in bytes, or -1.
int64_t MemInfo(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1) * 1024;
  }
  return -1;
}

// This process's cgroup path for `controller` ("" for the v2 hierarchy), or "-" when none.
std::string CgroupPath(const std::string& controller) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::stringstream names(line.substr(a + 1, b - a - 1));
    for (std::string name; std::getline(names, name, ',');) {
      if (name == controller) return line.substr(b + 1);
    }
    if (controller.empty() && b == a + 1) return line.substr(b + 1);
  }
  return "-";
}

// The directory of `path` under `mount`, or the mount itself where the path is not visible there
// (a container's own cgroup namespace shows its group as the root).
std::string CgroupDir(const std::string& mount, const std::string& path) {
  std::ifstream probe(mount + path + "/cgroup.procs");
  return probe ? mount + path : mount;
}

// cgroup v2: the least room under memory.max of this group and its ancestors (usage less the
// page cache it holds, which the kernel reclaims first), and the least swap room.
bool Cgroup2Room(int64_t* room, int64_t* swap, int64_t* limit) {
  const std::string path = CgroupPath("");
  if (path == "-") return false;
  std::ifstream probe("/sys/fs/cgroup/cgroup.controllers");
  if (!probe) return false;
  bool any = false;
  for (std::string dir = CgroupDir("/sys/fs/cgroup", path);;) {
    const int64_t max = ReadNumber(dir + "/memory.max"), used = ReadNumber(dir + "/memory.current");
    if (max >= 0 && max < kNoLimit && used >= 0) {
      const int64_t r = max - used + StatField(dir + "/memory.stat", "file");
      if (!any || r < *room) *room = r, *limit = max;
      any = true;
    }
    const int64_t smax = ReadNumber(dir + "/memory.swap.max");
    const int64_t sused = ReadNumber(dir + "/memory.swap.current");
    if (smax >= 0 && smax < kNoLimit && sused >= 0) *swap = std::min(*swap, smax - sused);
    if (dir == "/sys/fs/cgroup") break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  return any;
}

// cgroup v1: the room under the hierarchical limit of the memory controller.
bool Cgroup1Room(int64_t* room, int64_t* limit) {
  const std::string path = CgroupPath("memory");
  if (path == "-") return false;
  const std::string dir = CgroupDir("/sys/fs/cgroup/memory", path);
  int64_t max = ReadNumber(dir + "/memory.limit_in_bytes");
  const int64_t hier = StatField(dir + "/memory.stat", "hierarchical_memory_limit");
  if (hier > 0 && (max < 0 || hier < max)) max = hier;
  const int64_t used = ReadNumber(dir + "/memory.usage_in_bytes");
  if (max < 0 || max >= kNoLimit || used < 0) return false;
  *room = max - used + StatField(dir + "/memory.stat", "total_inactive_file") +
          StatField(dir + "/memory.stat", "total_active_file");
  *limit = max;
  return true;
}

std::string GiB(double bytes) {
  char out[32];
  std::snprintf(out, sizeof(out), "%.2f GiB", bytes / double(int64_t{1} << 30));
  return out;
}

}  // namespace

HostMemory ReadHostMemory() {
  HostMemory m;
  m.available = MemInfo("MemAvailable");
  m.swap = std::max<int64_t>(0, MemInfo("SwapFree"));
  m.source = "MemAvailable";
  if (m.available < 0) return m;
  int64_t room = 0, swap = m.swap, limit = 0;
  if (Cgroup2Room(&room, &swap, &limit) || Cgroup1Room(&room, &limit)) {
    m.swap = std::max<int64_t>(0, swap);
    if (room < m.available) {
      m.available = std::max<int64_t>(0, room);
      m.source = "the cgroup limit of " + std::to_string(limit) + " bytes";
    }
  }
  return m;
}

std::string NodeMemoryShortfall(size_t bytes, int workers, const HostMemory& mem,
                                const std::string& what, const std::string& advice) {
  const double node = static_cast<double>(bytes) * workers;
  if (mem.available < 0 ||
      node <= static_cast<double>(mem.available) + static_cast<double>(mem.swap))
    return "";
  return what + " needs " + GiB(static_cast<double>(bytes)) + " per worker, " + GiB(node) +
         " for the " + std::to_string(workers) + " worker" + (workers == 1 ? "" : "s") +
         " on this node, more than it can hold: " + GiB(static_cast<double>(mem.available)) +
         " available (" + mem.source + ") and " + GiB(static_cast<double>(mem.swap)) +
         " of swap; " + advice;
}

void CheckNodeMemory(size_t bytes, const std::string& what, const std::string& advice) {
  const disco::WorkerInfo& w = disco::ThisWorker();
  const HostMemory mem = ReadHostMemory();
  const std::string shortfall = NodeMemoryShortfall(bytes, w.local_size, mem, what, advice);
  disco::Tensor any_short = disco::Tensor::Empty(disco::Shape{1}, disco::DataType("int64"));
  *any_short.data_as<int64_t>() = shortfall.empty() ? 0 : 1;
  if (w.num_workers > 1) disco::AllReduceInFunction(any_short, disco::ReduceOp::kMax);
  DISCO_CHECK(shortfall.empty(), ValueError) << shortfall;
  DISCO_CHECK(*any_short.data_as<int64_t>() == 0, ValueError)
      << what << " needs " << GiB(static_cast<double>(bytes))
      << " per worker, more than another node can hold (its workers' errors give the sizes); "
      << advice;
  const double node = static_cast<double>(bytes) * w.local_size;
  if (mem.available >= 0 && node > static_cast<double>(mem.available) && w.local_rank == 0) {
    DISCO_LOG(WARN) << what << " needs " << GiB(node) << " for the " << w.local_size
                    << " worker(s) on this node, more than the "
                    << GiB(static_cast<double>(mem.available)) << " available (" << mem.source
                    << "): it will swap";
  }
}

}  // namespace llama
