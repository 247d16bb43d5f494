#include "core/call_context.h"

#include <disco/tensor.h>

#include <variant>

#include "core/device_memory.h"

namespace disco {
namespace {
WorkerInfo& ThisWorkerStorage() {
  static WorkerInfo info;
  return info;
}
}  // namespace

namespace detail {
CallOrigins& MutableCallOrigins() {
  static CallOrigins origins;
  return origins;
}
const CallOrigins& CurrentCallOrigins() { return MutableCallOrigins(); }
void SetThisWorker(const WorkerInfo& info) { ThisWorkerStorage() = info; }
}  // namespace detail

const WorkerInfo& ThisWorker() { return ThisWorkerStorage(); }

void* ThisWorkerStream() {
  const DLDevice d = ThisWorkerStorage().device;
  return d.device_type == kDLCUDA ? memory::ComputeStream(d.device_id) : nullptr;
}

uint64_t TensorFingerprint(const Any& value) {
  const Tensor* t = std::get_if<Tensor>(&value.storage());
  if (t == nullptr || !t->defined()) return 0;
  const DLTensor& dl = t->dl_tensor();
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the metadata's words
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001B3ull; };
  mix(static_cast<uint64_t>(dl.ndim));
  for (int i = 0; i < dl.ndim; ++i) {
    mix(static_cast<uint64_t>(dl.shape[i]));
    mix(dl.strides != nullptr ? static_cast<uint64_t>(dl.strides[i]) : ~uint64_t{0});
  }
  mix((uint64_t{dl.dtype.code} << 24) | (uint64_t{dl.dtype.bits} << 16) | dl.dtype.lanes);
  mix((static_cast<uint64_t>(dl.device.device_type) << 32) |
      static_cast<uint32_t>(dl.device.device_id));
  return h | 1;  // never 0
}

}  // namespace disco
