#include "llama/host_memory.h"

#include <disco/ccl.h>
#include <disco/error.h>
#include <disco/log.h>
#include <disco/tensor.h>
#include <disco/worker.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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

std::string GiB(double bytes) {
  char out[32];
  std::snprintf(out, sizeof(out), "%.2f GiB", bytes / double(int64_t{1} << 30));
  return out;
}

std::string FirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// This process's cgroup path for the v1 `controller`, or for the v2 hierarchy ("" controller);
// "-" when it has none.
std::string CgroupPath(const std::string& controller) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    if (controller.empty()) {
      if (line.compare(0, a, "0") == 0 && b == a + 1) return line.substr(b + 1);
      continue;
    }
    std::stringstream names(line.substr(a + 1, b - a - 1));
    for (std::string name; std::getline(names, name, ',');) {
      if (name == controller) return line.substr(b + 1);
    }
  }
  return "-";
}

// mountinfo writes a space, tab, newline or backslash in a path as an octal escape (\040).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Where `path` of the hierarchy (v1 with the memory controller, or v2) is mounted: the mount's
// directory for it, and the mount point (the walk up stops there). Empty when not mounted.
std::pair<std::string, std::string> CgroupDir(bool v2, const std::string& path) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string id, parent, dev, root, point, word;
    in >> id >> parent >> dev >> root >> point;
    root = Unescape(root);
    point = Unescape(point);
    while (in >> word && word != "-") {
    }
    std::string fstype, source, options;
    in >> fstype >> source >> options;
    const bool memory = ("," + options + ",").find(",memory,") != std::string::npos;
    if (v2 ? fstype != "cgroup2" : (fstype != "cgroup" || !memory)) continue;
    // The mount shows the hierarchy from `root` down (a container's own cgroup namespace: "/").
    if (root == "/") return {point + (path == "/" ? "" : path), point};
    if (path.compare(0, root.size(), root) == 0 &&
        (path.size() == root.size() || path[root.size()] == '/')) {
      return {point + path.substr(root.size()), point};
    }
    return {point, point};  // the process sits outside what is mounted: the mount's own limits
  }
  return {"", ""};
}

uint64_t IdOf(const std::string& s) { return std::hash<std::string>{}(s); }

// The host's boot: what its processes share, whatever hostname a container gives them.
std::string HostKey() { return FirstLine("/proc/sys/kernel/random/boot_id"); }

// A cgroup directory as the kernel knows it (device and inode), not by the path one mount shows.
std::string DirKey(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return dir;
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// The memory cgroups above this process that set a limit, innermost first (all of them); `host`
// is HostKey(), `host_name` the name messages give.
void CgroupLimits(std::vector<MemoryLimit>* out, int64_t swap, const std::string& host,
                  const std::string& host_name) {
  // v1's memory controller where it is mounted (hybrid systems mount v2 without it), else v2.
  bool v2 = false;
  std::string path = CgroupPath("memory");
  auto [dir, mount] = path == "-" ? std::pair<std::string, std::string>() : CgroupDir(false, path);
  if (dir.empty()) {
    v2 = true;
    path = CgroupPath("");
    if (path == "-") return;
    std::tie(dir, mount) = CgroupDir(true, path);
    if (dir.empty()) return;
  }
  for (;;) {
    const int64_t max = ReadNumber(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    const int64_t used = ReadNumber(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    const std::string stat = dir + "/memory.stat";
    // The page cache of files (not shared memory, which v2's "file" counts too).
    const int64_t cache =
        v2 ? StatField(stat, "inactive_file") + StatField(stat, "active_file")
           : StatField(stat, "total_inactive_file") + StatField(stat, "total_active_file");
    if (max >= 0 && max < kNoLimit && used >= 0) {
      int64_t room_swap = swap;
      // v2: the swap limit's room; v1: what memory + swap's limit leaves past the memory's.
      const int64_t smax =
          ReadNumber(dir + (v2 ? "/memory.swap.max" : "/memory.memsw.limit_in_bytes"));
      const int64_t sused =
          ReadNumber(dir + (v2 ? "/memory.swap.current" : "/memory.memsw.usage_in_bytes"));
      if (smax >= 0 && smax < kNoLimit && sused >= 0) {
        const int64_t room = v2 ? smax - sused : (smax - sused) - (max - used);
        room_swap = std::min(room_swap, std::max<int64_t>(0, room));
      }
      const int64_t free = std::max<int64_t>(0, max - used + cache);
      MemoryLimit l;
      l.id = IdOf(host + "|cgroup|" + DirKey(dir));
      l.room = free / 10 * 9 + room_swap;
      l.what = "the memory cgroup " + dir + " limited to " + GiB(static_cast<double>(max)) + " (" +
               GiB(static_cast<double>(free)) + " free, " + GiB(static_cast<double>(room_swap)) +
               " of swap) on host " + host_name;
      out->push_back(l);
    }
    if (dir.size() <= mount.size()) break;
    dir = dir.substr(0, dir.rfind('/'));
    if (dir.size() < mount.size()) break;
  }
}

}  // namespace

std::vector<MemoryLimit> ReadMemoryLimits() {
  std::vector<MemoryLimit> limits;
  const int64_t available = MemInfo("MemAvailable");
  if (available < 0) return limits;
  const int64_t swap = std::max<int64_t>(0, MemInfo("SwapFree"));
  const std::string key = HostKey(), name = HostName();
  MemoryLimit host;
  host.id = IdOf(key + "|host");
  host.room = available / 10 * 9 + swap;
  host.what = "host " + name + " (MemAvailable " + GiB(static_cast<double>(available)) + ", swap " +
              GiB(static_cast<double>(swap)) + ")";
  limits.push_back(host);
  std::vector<MemoryLimit> groups;
  CgroupLimits(&groups, swap, key, name);
  // Past the table's size, the tightest are kept (they are the ones a need meets first).
  std::stable_sort(groups.begin(), groups.end(),
                   [](const MemoryLimit& a, const MemoryLimit& b) { return a.room < b.room; });
  if (groups.size() >= static_cast<size_t>(kMaxMemoryLimits)) groups.resize(kMaxMemoryLimits - 1);
  limits.insert(limits.end(), groups.begin(), groups.end());
  return limits;
}

std::string MemoryShortfall(const std::vector<int64_t>& needs,
                            const std::vector<std::vector<MemoryLimit>>& limits, int me,
                            const std::string& what, const std::string& advice) {
  for (size_t w = 0; w < limits.size(); ++w) {
    for (const MemoryLimit& l : limits[w]) {
      double sum = 0;
      int bound = 0, first = -1;
      for (size_t v = 0; v < limits.size(); ++v) {
        for (const MemoryLimit& o : limits[v]) {
          if (o.id != l.id) continue;
          sum += static_cast<double>(needs[v]);
          ++bound;
          if (first < 0) first = static_cast<int>(v);
          break;
        }
      }
      if (first != static_cast<int>(w) || sum <= static_cast<double>(l.room)) continue;
      // Named as this worker knows it, else by a worker it binds (its own error names it).
      std::string name = "worker " + std::to_string(w) + "'s memory limit";
      for (const MemoryLimit& mine : limits[me]) {
        if (mine.id == l.id) name = mine.what;
      }
      return what + " needs " + GiB(static_cast<double>(needs[w])) + " per worker, " + GiB(sum) +
             " for the " + std::to_string(bound) + " worker" + (bound == 1 ? "" : "s") +
             " bound by " + name + ", more than the " + GiB(static_cast<double>(l.room)) +
             " it can give (90% of its free memory, and swap); " + advice;
    }
  }
  return "";
}

void CheckHostMemory(size_t bytes, const std::string& what, const std::string& advice) {
  const disco::WorkerInfo& w = disco::ThisWorker();
  const std::vector<MemoryLimit> mine = ReadMemoryLimits();
  // Every worker's limits and need, gathered by a sum: each fills its own rows (id, room, need),
  // zeros elsewhere.
  const int64_t n = w.num_workers, k = kMaxMemoryLimits;
  disco::Tensor all = disco::Tensor::Empty(disco::Shape{n * k * 3}, disco::DataType("int64"));
  auto* v = all.data_as<int64_t>();
  std::fill(v, v + n * k * 3, 0);
  int64_t* row = v + w.worker_id * k * 3;
  for (size_t i = 0; i < mine.size(); ++i) {
    row[i * 3] = static_cast<int64_t>(mine[i].id);
    row[i * 3 + 1] = mine[i].room;
    row[i * 3 + 2] = static_cast<int64_t>(bytes);
  }
  if (n > 1) disco::AllReduceInFunction(all, disco::ReduceOp::kSum);
  std::vector<int64_t> needs(n, 0);
  std::vector<std::vector<MemoryLimit>> limits(n);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t* e = v + (r * k + i) * 3;
      if (e[0] == 0 && e[1] == 0 && e[2] == 0) continue;
      needs[r] = e[2];
      MemoryLimit l;
      l.id = static_cast<uint64_t>(e[0]);
      l.room = e[1];
      limits[r].push_back(l);
    }
  }
  limits[w.worker_id] = mine;
  const std::string shortfall = MemoryShortfall(needs, limits, w.worker_id, what, advice);
  DISCO_CHECK(shortfall.empty(), ValueError) << shortfall;
}

}  // namespace llama
