// A worker: the register file and the execution of commands. The same class serves worker 0 (run
// in line by the controller on rank 0, from the controller's own values) and workers 1..N-1 (run
// by RunWorkerLoop from decoded frames).
#ifndef DISCO_SESSION_WORKER_H_
#define DISCO_SESSION_WORKER_H_

#include <disco/any.h>
#include <disco/session.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/call_context.h"
#include "protocol/serializer.h"
#include "session/config.h"

namespace disco {

class MpiTransport;

class Worker {
 public:
  /// Receives every error this worker reports (rank 0: queued locally; others: sent to rank 0).
  using ErrorSink = std::function<void(const protocol::ErrorReport&)>;

  Worker(const WorkerInfo& info, ErrorSink sink);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const WorkerInfo& info() const { return info_; }
  /// Number of errors reported so far.
  uint64_t errors_reported() const { return errors_reported_; }

  /// Frees registers (ids the controller allocated; ids never stored are ignored).
  void KillRegs(const int64_t* regs, size_t n);
  /// Stores the global function `name` (or the failure "unknown global function") in `reg`.
  void GetGlobalFunc(uint64_t seq, int64_t reg, const std::string& name);
  /// Calls the function in `func_reg` with `args` (DRef arguments resolved to registers), storing
  /// the result (or the failure) in `result_reg`.
  /// `collective_command`: the controller's worker 0 found a collective in `func_reg` (the
  /// frame's kFlagCollective); a worker whose function register does not hold it then ends the
  /// job, since the other workers would wait for it in the collective.
  /// `label`, when given, names the call in errors and in the watchdog instead of the function's
  /// name (a replayed graph's call: "graph 3 call 5 'my.fn'").
  void CallPacked(uint64_t seq, int64_t result_reg, int64_t func_reg, const Any* args, size_t n,
                  bool collective_command = false, const std::string* label = nullptr);
  /// Installs the program of a captured graph (protocol/graph.h): reserves its registers, runs
  /// its install steps (lookups, disco.empty) and keeps its calls under its id. A malformed
  /// program is a ProtocolError.
  void InstallGraph(uint64_t seq, const Any* operands, size_t n);
  /// Runs the calls of graph `id` with `inputs` in place of its placeholders.
  void ReplayGraph(uint64_t seq, int64_t id, const Any* inputs, size_t n);
  /// Forgets graph `id` (nothing when unknown).
  void FreeGraph(int64_t id) { graphs_.erase(id); }
  size_t num_graphs() const { return graphs_.size(); }
  /// Stores `value` (a DRef is resolved) in `reg`. A tensor value is copied: into the tensor the
  /// register holds (dtype and element count must match, as TVM's byte-size check; the register
  /// keeps its shape; else an error is reported and the register keeps its value), or into a new
  /// tensor of the register's own.
  void DebugSetRegister(uint64_t seq, int64_t reg, const Any& value);
  /// The tensor `reg` holds, or an undefined tensor (missing, poisoned or not a tensor).
  Tensor ExistingTensor(int64_t reg) const;
  /// Throws ValueError unless `src` may be copied into `dst` (the tensor of register `reg`).
  void CheckCopyInto(const Tensor& dst, const Tensor& src, int64_t reg) const;
  /// Records that command `seq` wrote `reg` on another worker (keeps versions in step).
  void TouchRegister(uint64_t seq, int64_t reg);
  /// The value of `reg`, by value (tensors copied to the host); for a poisoned or missing
  /// register, the status and a message instead.
  protocol::DebugStatus DebugGetRegister(int64_t reg, Any* out) const;
  /// The tensor in `reg` (for CopyToWorker0/CopyFromWorker0); throws naming the register when it
  /// is missing, poisoned or not a tensor.
  Tensor GetTensor(int64_t reg, const char* what) const;
  /// Makes room for `reg` (at most one past the end) before the command that stores it runs: a
  /// call deferred on worker 0 (SessionImpl) must not leave a hole that a later command's
  /// register, stored first, would fall beyond.
  void ReserveRegister(int64_t reg) { Slot(reg); }
  /// The name of the function `reg` holds ("" when it holds none).
  std::string FunctionName(int64_t reg) const;
  /// True when `reg` holds a Function (marked collective: HoldsCollective).
  bool HoldsFunction(int64_t reg) const;
  bool HoldsCollective(int64_t reg) const;
  /// Registers currently in use (for tests of the free list).
  size_t num_live_registers() const;
  size_t register_capacity() const { return regs_.size(); }

 private:
  struct Failure {
    std::string function;
    std::string message;
  };
  struct Register {
    Any value;
    std::shared_ptr<const Failure> failure;
    bool used = false;
    // Sequence number of the last command that wrote the register. Every worker records it for
    // every command (a debug write on one worker included), so it is the same on all workers.
    uint64_t version = 0;
    // The register was written by a call of disco.empty whose arguments all came by value and
    // that asked for a tensor on every worker, in host memory or on each worker's own GPU: its
    // metadata is the command's, the same on every worker. Decided from the command alone (never
    // from the call's outcome on this worker), so the same on all workers; cleared by any other
    // write. Collectives on such registers skip the agreement round.
    bool uniform = false;
    // The register holds the result of GetGlobalFunc("disco.empty") (set from the command's
    // name, on every worker alike).
    bool empty_lookup = false;
    // The graph whose replay last wrote the register (0: a command outside replays). Every replay
    // of the graph writes the same register, the same on every worker: collectives key their
    // agreement on the graph instead of the version, so that a replay does not agree again
    // (they compare the tensors' metadata instead, CallOrigins).
    int64_t graph = 0;
  };

  Register* Slot(int64_t reg);
  const Register* Find(int64_t reg) const;
  void Store(uint64_t seq, int64_t reg, Any value);
  void Fail(uint64_t seq, int64_t reg, const std::string& function, const std::string& message);
  /// Reports an error of command `seq` without touching the register.
  void Report(uint64_t seq, int64_t reg, const std::string& function, const std::string& message);
  const Any& Resolve(const Any& arg, size_t index, const std::string& function) const;
  // CallPacked's parts: the failure when register `func_reg` holds no callable function, and the
  // arguments with registers resolved (in scratch_, with their origins for a collective).
  void FailWithoutFunction(uint64_t seq, int64_t result_reg, int64_t func_reg, const Register* fr,
                           bool collective_command);
  const Any* ResolveArgs(const Any* args, size_t n, const Function& f, CallOrigins* origins);

  // A captured graph as this worker runs it.
  struct GraphCall {
    int64_t result_reg = 0;
    int64_t func_reg = 0;
    bool collective = false;
    std::vector<Any> args;
    std::vector<std::pair<uint32_t, uint32_t>> inputs;  // (argument position, input index)
    // The fast path's arguments, bound in place at each replay: `args` with the placeholders'
    // and the registers' positions filled in (refs: the positions of registers in `args`).
    mutable std::vector<Any> bound;
    std::vector<uint32_t> refs;
    std::string label;
    // The function the register held at install, for the replay's fast path (calls that are not
    // collectives): no lookup, no per-call flight record; undefined: through CallPacked.
    Function func;
  };
  struct GraphProgram {
    int64_t num_inputs = 0;
    std::vector<GraphCall> calls;
    std::string label;  // "graph 3"
  };
  /// One call of a replay on the fast path.
  void RunGraphCall(uint64_t seq, const GraphCall& call, const Any* inputs);
  /// The arguments of `call` with `inputs` in place of its placeholders: in graph_args_, or the
  /// call's own when it has none (registers stay registers: CallPacked resolves them).
  const Any* GraphArgs(const GraphCall& call, const Any* inputs);

  WorkerInfo info_;
  ErrorSink sink_;
  std::unordered_map<int64_t, GraphProgram> graphs_;
  int64_t replaying_ = 0;  // the graph whose replay runs now, 0 outside replays
  std::vector<Any> graph_args_;
  uint64_t errors_reported_ = 0;
  std::vector<Register> regs_;
  std::vector<Any> scratch_;
};

/// Runs the loop of a worker on ranks 1..N-1 until shutdown; returns the job's exit code.
int RunWorkerLoop(MpiTransport* transport, const SessionConfig& config, const WorkerInfo& info);

namespace detail {
/// Fault injection for tests: this rank's worker loop corrupts the next command frame it
/// receives (its magic), as a damaged message on one rank would.
void TestCorruptNextFrame();
/// The worker of this process (for introspection by tests and debug builtins); null outside a
/// session.
const Worker* CurrentWorker();
}  // namespace detail

}  // namespace disco

#endif  // DISCO_SESSION_WORKER_H_
