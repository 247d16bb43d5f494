// Who this process is in the job: rank, world size, host. Set once MPI is up; used by the log and
// error prefix "[rank R/N host] ".
#ifndef DISCO_CORE_PROCESS_INFO_H_
#define DISCO_CORE_PROCESS_INFO_H_

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

}  // namespace disco

#endif  // DISCO_CORE_PROCESS_INFO_H_
