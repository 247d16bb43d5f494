#include "session/builtins.h"

#include <disco/function.h>
#include <disco/session.h>
#include <dlfcn.h>

#include <mutex>
#include <optional>

#include "ccl/builtins.h"
#include "core/device_memory.h"
#include "core/process_info.h"
#include "core/registry_errors.h"
#include "io/h5.h"

namespace disco {
namespace {

bool IsFirstOfGroup(const WorkerInfo& w) {
  int group_size = w.num_workers / w.num_groups;
  return w.worker_id % group_size == 0;
}

// `device`, with ThisWorkerGpu() replaced by the GPU InitCCL bound this worker to.
DLDevice ResolveDevice(DLDevice device, const char* fn) {
  if (!(device == ThisWorkerGpu())) return device;
  const WorkerInfo& w = ThisWorker();
  DISCO_CHECK(w.device.device_type == kDLCUDA, ValueError)
      << fn << ": " << DeviceToString(device) << " means this worker's GPU, but worker "
      << w.worker_id << " is bound to none (" << DeviceToString(w.device)
      << "); InitCCL('nccl') binds one";
  return w.device;
}

void RegisterAll() {
  Registry::Register("disco.worker_id", true).set_body_typed([]() -> int64_t {
    return ThisWorker().worker_id;
  });
  Registry::Register("disco.num_workers", true).set_body_typed([]() -> int64_t {
    return ThisWorker().num_workers;
  });
  Registry::Register("disco.device", true).set_body_typed([]() -> DLDevice {
    return ThisWorker().device;
  });
  // This worker's memory: Shape{resident KiB, peak resident KiB} (-1 where unknown), and a reset
  // of the peak (false when the kernel cannot), for measuring what one command costs.
  Registry::Register("disco.memory_kib", true).set_body_typed([]() {
    MemoryUse use = GetMemoryUse();
    return Shape{use.rss_kib, use.peak_kib};
  });
  Registry::Register("disco.reset_peak_memory", true).set_body_typed([]() {
    return ResetPeakMemory();
  });
  // Gives the freed device memory that disco's CUDA memory pools keep back to the GPUs, for other
  // allocators of the process (NCCL, cuBLAS, torch); returns the bytes released (0 on a worker
  // that never allocated device memory, or without CUDA).
  Registry::Register("disco.empty_cache", true).set_body_typed([]() -> int64_t {
    return memory::EmptyCache();
  });
  Registry::Register(kEmptyFunctionName, true)
      .set_body_typed(
          [](Shape shape, DLDataType dtype, DLDevice device, bool worker0_only,
             bool in_group) -> Any {
            const WorkerInfo& w = ThisWorker();
            if (worker0_only) {
              bool mine = in_group ? IsFirstOfGroup(w) : w.worker_id == 0;
              if (!mine) return Any();
            }
            return Any(Tensor::Empty(shape, dtype, ResolveDevice(device, "disco.empty")));
          },
          {"shape", "dtype", "device", "worker0_only", "in_group"});
  // A copy of `tensor` on `device` (ThisWorkerGpu(): this worker's GPU); h5::LoadTensors uses it
  // to place loaded shards.
  Registry::Register("disco.copy_to", true)
      .set_body_typed(
          [](Tensor tensor, DLDevice device) {
            Tensor out = Tensor::Empty(tensor.shape(), tensor.dtype(),
                                       ResolveDevice(device, "disco.copy_to"));
            out.CopyFrom(tensor);
            return out;
          },
          {"tensor", "device"});
  Registry::Register("disco.load_library", true)
      .set_body_typed(
          [](std::string path) {
            // RTLD_GLOBAL: a plugin may depend on symbols of another one loaded before it. Its
            // registrations run inside dlopen, where they must not throw: a name it registers
            // again is collected and reported here (its other functions stay registered).
            core::RegistrationErrors refused;
            void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
            DISCO_CHECK(handle != nullptr, ValueError)
                << "disco.load_library: cannot load '" << path << "': " << dlerror();
            if (!refused.errors().empty()) {
              std::string all;
              for (const std::string& e : refused.errors()) all += (all.empty() ? "" : "; ") + e;
              DISCO_THROW(ValueError) << "disco.load_library: '" << path << "' was loaded, but "
                                      << all << " (the library's other functions are registered)";
            }
          },
          {"path"});
}

}  // namespace

bool IsUniformEmptyCall(const Any* args, size_t n) {
  if (n != 5) return false;
  for (size_t i = 0; i < n; ++i) {
    if (args[i].type_code() == TypeCode::kDRef) return false;
  }
  std::optional<Shape> shape = args[0].as<Shape>();
  std::optional<DLDataType> dtype = args[1].as<DLDataType>();
  std::optional<DLDevice> device = args[2].as<DLDevice>();
  std::optional<bool> worker0_only = args[3].as<bool>();
  return shape && dtype && device && worker0_only && !*worker0_only &&
         (device->device_type == kDLCPU || *device == ThisWorkerGpu());
}

void RegisterBuiltins() {
  static std::once_flag once;
  std::call_once(once, RegisterAll);
  ccl::RegisterCclBuiltins();
  io::RegisterH5Builtins();
}

}  // namespace disco
