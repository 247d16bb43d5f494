/// \file disco/worker.h
/// \brief What a function running on a worker knows about where it runs: `ThisWorker()`.
#ifndef DISCO_WORKER_H_
#define DISCO_WORKER_H_

#include <disco/types.h>

namespace disco {

/// What a function running on a worker knows about where it runs.
struct WorkerInfo {
  int worker_id = 0;
  int num_workers = 1;
  int num_groups = 1;
  int group_id = 0;
  int local_rank = 0;
  DLDevice device{kDLCPU, 0};
};
/// The calling worker's info (valid inside functions run by the session).
const WorkerInfo& ThisWorker();

}  // namespace disco

#endif  // DISCO_WORKER_H_
