#include "ccl/context.h"

#include <disco/config.h>
#include <disco/log.h>
#include <disco/worker.h>

#include "ccl/mpi/communicator.h"
#include "ccl/traced.h"
#include "core/call_context.h"
#include "core/device_memory.h"
#include "core/trace.h"
#include "mpi/mpi_util.h"
#if DISCO_HAVE_NCCL
#include "ccl/nccl/communicator.h"
#endif

namespace disco {
namespace ccl {
namespace {
std::unique_ptr<Context>& Storage() {
  static std::unique_ptr<Context> ctx;
  return ctx;
}
}  // namespace

Context* CurrentContext() { return Storage().get(); }

void Reset() {
  if (Storage()) {
    Storage()->group.reset();
    Storage()->world.reset();
    Storage()->host_group.reset();
    Storage()->host_world.reset();
    Storage().reset();
  }
  WorkerInfo info = ThisWorker();
  info.device = CPU();
  detail::SetThisWorker(info);
}

bool NcclUsable() {
#if DISCO_HAVE_NCCL
  return memory::CudaDeviceCount() > 0;
#else
  return false;
#endif
}

void Init(const std::string& requested, const std::vector<int64_t>& device_ids) {
  DISCO_CHECK(requested == "auto" || requested == "mpi" || requested == "nccl", ValueError)
      << "InitCCL: unknown collective library '" << requested << "' (expected auto, mpi or nccl)";
  Reset();  // a second InitCCL replaces the first, freeing its communicators
  WorkerInfo info = ThisWorker();
  const int group_size = info.num_workers / info.num_groups;
  // Every rank must pick the same backend: "auto" is NCCL only when every rank has a GPU of its
  // own (not two ranks on one GPU, which NCCL does not support).
  int usable = NcclUsable() ? 1 : 0, all_usable = 0;
  DISCO_MPI_CALL(MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  std::string backend = requested;
  if (requested == "auto") {
    backend = "mpi";
#if DISCO_HAVE_NCCL
    if (all_usable && EveryRankHasItsOwnGpu(MPI_COMM_WORLD, info.local_rank, device_ids)) {
      backend = "nccl";
    }
#endif
  }
  if (backend == "nccl") {
#if DISCO_HAVE_NCCL
    DISCO_CHECK(all_usable, ValueError)
        << "InitCCL('nccl'): " << (usable ? "another worker sees" : "this worker sees")
        << " no CUDA device; use 'mpi' (or 'auto') on hosts without GPUs";
#else
    DISCO_THROW(ValueError) << "InitCCL('nccl'): this build of disco has no NCCL "
                               "(configure with CUDA and NCCL found, or use 'mpi')";
#endif
  }
  auto ctx = std::make_unique<Context>();
  ctx->backend = backend;
  ctx->group_size = group_size;
  if (backend == "mpi" || requested == "auto") {
    // Under "auto" with NCCL, host tensors still have collectives: over MPI.
    std::unique_ptr<Communicator> world = MakeMpiCommunicator(MPI_COMM_WORLD, 0, info.worker_id);
    std::unique_ptr<Communicator> group =
        MakeMpiCommunicator(MPI_COMM_WORLD, info.group_id, info.worker_id);
    if (backend == "mpi") {
      ctx->world = std::move(world);
      ctx->group = std::move(group);
    } else {
      ctx->host_world = std::move(world);
      ctx->host_group = std::move(group);
    }
  }
  if (backend == "nccl") {
#if DISCO_HAVE_NCCL
    auto comms = MakeNcclCommunicators(MPI_COMM_WORLD, info.local_rank, device_ids, info.group_id,
                                       info.worker_id, group_size);
    ctx->world = std::move(comms[0]);
    ctx->group = std::move(comms[1]);
#endif
  }
  if (trace::Enabled()) {  // DISCO_TRACE: every operation a span of the timeline
    ctx->world = Traced(std::move(ctx->world));
    ctx->group = Traced(std::move(ctx->group));
    ctx->host_world = Traced(std::move(ctx->host_world));
    ctx->host_group = Traced(std::move(ctx->host_group));
  }
  info.device = ctx->world->device();
  detail::SetThisWorker(info);
  DISCO_LOG(INFO) << "InitCCL: backend " << backend
                  << (ctx->host_world ? " (host tensors: mpi)" : "") << ", device "
                  << DeviceToString(info.device) << ", group " << info.group_id << " of "
                  << info.num_groups << " (" << group_size << " workers)";
  Storage() = std::move(ctx);
}

}  // namespace ccl
}  // namespace disco
