// Who this process is in the job: rank, world size, host. Set once MPI is up; used by the log and
// error prefix "[rank R/N host] ".
#ifndef DISCO_CORE_PROCESS_INFO_H_
#define DISCO_CORE_PROCESS_INFO_H_

#include <cstdint>
#include <string>

namespace disco {

struct ProcessInfo {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;
  std::string host;
};

/// The process info (rank -1 before SetProcessInfo).
const ProcessInfo& GetProcessInfo();
/// Records rank, size and local rank, and the host name.
void SetProcessInfo(int rank, int world_size, int local_rank);
/// The host name of this machine.
std::string HostName();

/// This process's resident set and its peak since start (or since ResetPeakMemory), in KiB, from
/// /proc/self/status (VmRSS, VmHWM); -1 where the kernel does not say.
struct MemoryUse {
  int64_t rss_kib = -1;
  int64_t peak_kib = -1;
};
MemoryUse GetMemoryUse();
/// Lowers the peak to the current resident set (/proc/self/clear_refs); false when the kernel
/// cannot.
bool ResetPeakMemory();

}  // namespace disco

#endif  // DISCO_CORE_PROCESS_INFO_H_
