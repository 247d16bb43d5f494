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
  /// This worker's rank among the workers on its node.
  int local_rank = 0;
  DLDevice device{kDLCPU, 0};
  /// How many workers run on this node (as torchrun's LOCAL_WORLD_SIZE).
  int local_size = 1;
};
/// The calling worker's info (valid inside functions run by the session).
const WorkerInfo& ThisWorker();

/// The CUDA stream (a `cudaStream_t`) of this worker's GPU, when `ThisWorker().device` is one
/// (after InitCCL("nccl"), or "auto" choosing NCCL); nullptr otherwise. disco's allocations, frees
/// and copies of tensors on that GPU run on it, and so does `AllReduceInFunction` on CUDA tensors
/// (queued, without waiting for the device): a worker function that launches its kernels and
/// cuBLAS calls on this stream needs no synchronization of its own, and its host code does not
/// wait for the GPU. It is a blocking stream (cudaStreamDefault): it and the legacy default stream
/// (stream 0) wait for each other's earlier work, so code that launches on stream 0 stays correct
/// (but serializes with it). One per GPU and process, kept until the process ends.
void* ThisWorkerStream();

}  // namespace disco

#endif  // DISCO_WORKER_H_
