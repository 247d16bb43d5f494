// What a function running on a worker may know about the command that runs it, below the session
// that sets it: the worker's identity (ThisWorker(), disco/worker.h) and where each argument of
// the running command came from. The collectives (src/ccl) read these; the worker loop
// (src/session/worker.cc) writes them. One worker per process: plain process-wide state.
#ifndef DISCO_CORE_CALL_CONTEXT_H_
#define DISCO_CORE_CALL_CONTEXT_H_

#include <disco/function.h>
#include <disco/worker.h>

#include <cstdint>
#include <vector>

namespace disco {

/// Where an argument of the command running on this worker came from: the register it was read
/// from and that register's version (reg 0: passed by value). The command frame is the same on
/// every worker and so are versions, so these are too. Collectives use them to recognise
/// arguments whose metadata every worker already agreed on.
struct ArgOrigin {
  int64_t reg = 0;
  uint64_t version = 0;
  /// The register's tensor has the same metadata on every worker: disco.empty made it from
  /// arguments by value (decided from the command, so the same on every worker).
  bool uniform = false;
  /// The shape, dtype and device of the tensor the argument resolved to on this worker (0: not a
  /// tensor). Per worker: a collective that skips its agreement round for a key agreed before
  /// compares it with the one it agreed with (a graph's registers keep their key at every replay
  /// while their tensors are new).
  uint64_t fingerprint = 0;
};
struct CallOrigins {
  const FunctionObj* function = nullptr;  // the function the command called (not nested calls)
  std::vector<ArgOrigin> args;
  /// Why an argument of a collective command did not resolve on this worker (its register holds
  /// the failure of an earlier call, or does not exist here), while other workers may hold a good
  /// value: the worker passes None in its place, and the collective's agreement takes this
  /// message (setting `arg_failure_taken`) so that every worker of the collective raises. Empty
  /// when every argument resolved. A collective that did not take it ends the job (the others
  /// would wait for this worker).
  std::string arg_failure;
  bool arg_failure_taken = false;
  /// The replay call running the command ("graph 3 call 5 'fn'"), or null outside a replay.
  const std::string* replay_call = nullptr;
};

/// A fingerprint of a value's tensor metadata (shape, strides, dtype, device); 0 for anything that
/// is not a tensor.
uint64_t TensorFingerprint(const Any& value);

namespace detail {
/// The origins of the command running now (function null outside one).
const CallOrigins& CurrentCallOrigins();
/// The worker loop's handle on them, set before each call and cleared after.
CallOrigins& MutableCallOrigins();
/// Sets the WorkerInfo returned by ThisWorker() (the worker loop; InitCCL sets the device).
void SetThisWorker(const WorkerInfo& info);
}  // namespace detail

}  // namespace disco

#endif  // DISCO_CORE_CALL_CONTEXT_H_
