#include "core/call_context.h"

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

}  // namespace disco
