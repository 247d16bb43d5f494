#include <disco/error.h>
#include <unistd.h>

#include <mutex>

#include "core/process_info.h"

namespace disco {
namespace {

std::mutex& InfoMutex() {
  static std::mutex mu;
  return mu;
}
ProcessInfo& MutableInfo() {
  static ProcessInfo info;
  return info;
}
std::string& CachedPrefix() {
  static std::string prefix;
  return prefix;
}

}  // namespace

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

const ProcessInfo& GetProcessInfo() { return MutableInfo(); }

void SetProcessInfo(int rank, int world_size, int local_rank) {
  std::lock_guard<std::mutex> lock(InfoMutex());
  ProcessInfo& info = MutableInfo();
  info.rank = rank;
  info.world_size = world_size;
  info.local_rank = local_rank;
  info.host = HostName();
  CachedPrefix() =
      "[rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " " + info.host + "] ";
}

namespace detail {
std::string RankPrefix() {
  std::lock_guard<std::mutex> lock(InfoMutex());
  if (CachedPrefix().empty()) return "[rank -/- " + HostName() + "] ";
  return CachedPrefix();
}
}  // namespace detail
}  // namespace disco
