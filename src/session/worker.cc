#include "session/worker.h"

#include <disco/function.h>
#include <disco/log.h>

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include "ccl/context.h"
#include "core/device_memory.h"
#include "core/launcher.h"
#include "core/trace.h"
#include "protocol/graph.h"
#include "session/builtins.h"
#include "session/mpi_transport.h"
#include "session/watchdog.h"

namespace disco {
namespace {

// Error reports stay below Open MPI's shared-memory eager limit, so reporting never blocks.
constexpr size_t kMaxErrorMessage = 3000;

std::string Truncate(const std::string& s) {
  if (s.size() <= kMaxErrorMessage) return s;
  return s.substr(0, kMaxErrorMessage) + "... (" + std::to_string(s.size()) + " bytes in all)";
}

// The message of the exception being handled: what() of a std::exception, else its type.
std::string CurrentExceptionText() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    std::string type = "unknown type";
    if (const std::type_info* t = abi::__cxa_current_exception_type()) {
      int status = 0;
      char* name = abi::__cxa_demangle(t->name(), nullptr, nullptr, &status);
      type = status == 0 && name != nullptr ? name : t->name();
      std::free(name);
    }
    return detail::RankPrefix() + "threw a " + type + ", which is not a std::exception";
  }
}

std::string StripRankPrefix(const std::string& what) {
  const std::string prefix = detail::RankPrefix();
  return what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what;
}

// `v` with every tensor in it (arrays and maps included) copied to the host: what a debug read
// returns (by value, never sharing the register's memory).
Any HostCopy(const Any& v) {
  if (const Tensor* t = std::get_if<Tensor>(&v.storage())) {
    Tensor copy = Tensor::Empty(t->shape(), t->dtype(), CPU());
    copy.CopyFrom(*t);
    return Any(std::move(copy));
  }
  if (const Array* a = std::get_if<Array>(&v.storage())) {
    std::vector<Any> items;
    items.reserve(a->size());
    for (const Any& x : a->items()) items.push_back(HostCopy(x));
    return Any(Array(std::move(items)));
  }
  if (const Map* m = std::get_if<Map>(&v.storage())) {
    std::map<std::string, Any> items;
    for (const auto& kv : m->items()) items.emplace(kv.first, HostCopy(kv.second));
    return Any(Map(std::move(items)));
  }
  return v;
}

}  // namespace

static const Worker*& CurrentWorkerStorage() {
  static const Worker* worker = nullptr;
  return worker;
}

namespace detail {
const Worker* CurrentWorker() { return CurrentWorkerStorage(); }
}  // namespace detail

Worker::Worker(const WorkerInfo& info, ErrorSink sink) : info_(info), sink_(std::move(sink)) {
  regs_.resize(1);  // register 0 is never handed out
  CurrentWorkerStorage() = this;
}

Worker::~Worker() {
  if (CurrentWorkerStorage() == this) CurrentWorkerStorage() = nullptr;
}

Worker::Register* Worker::Slot(int64_t reg) {
  // The controller hands out ids in order, so a new id is at most one past the end; anything
  // else is a corrupt command, and must not make us allocate what it claims.
  DISCO_CHECK(reg >= 1 && static_cast<uint64_t>(reg) <= regs_.size(), ProtocolError)
      << "register id " << reg << " is outside the register file (size " << regs_.size() << ")";
  if (static_cast<size_t>(reg) == regs_.size()) regs_.emplace_back();
  return &regs_[reg];
}

const Worker::Register* Worker::Find(int64_t reg) const {
  if (reg < 1 || static_cast<uint64_t>(reg) >= regs_.size() || !regs_[reg].used) return nullptr;
  return &regs_[reg];
}

void Worker::Store(uint64_t seq, int64_t reg, Any value) {
  Register* slot = Slot(reg);
  slot->version = seq;
  slot->value = std::move(value);
  slot->failure.reset();
  slot->used = true;
  slot->uniform = false;
  slot->empty_lookup = false;
  slot->graph = replaying_;
}

void Worker::Fail(uint64_t seq, int64_t reg, const std::string& function,
                  const std::string& message) {
  Register* slot = Slot(reg);
  slot->version = seq;
  slot->value = Any();
  slot->failure = std::make_shared<const Failure>(Failure{function, Truncate(message)});
  slot->used = true;
  slot->uniform = false;
  slot->empty_lookup = false;
  slot->graph = replaying_;
  Report(seq, reg, function, slot->failure->message);
}

void Worker::Report(uint64_t seq, int64_t reg, const std::string& function,
                    const std::string& message) {
  ++errors_reported_;
  protocol::ErrorReport report;
  report.worker = info_.worker_id;
  report.seq = seq;
  report.reg = reg;
  report.function = function;
  report.message = Truncate(message);
  DISCO_LOG(DEBUG) << "worker " << info_.worker_id << ": '" << function << "' failed: " << message;
  sink_(report);
}

void Worker::KillRegs(const int64_t* regs, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    int64_t reg = regs[i];
    DISCO_CHECK(reg >= 1, ProtocolError) << "kill of register id " << reg;
    if (static_cast<uint64_t>(reg) < regs_.size()) {
      Register& r = regs_[reg];
      if (r.value.type_code() != TypeCode::kNone) r.value = Any();
      r.failure.reset();
      r.used = false;
      r.version = 0;
      r.uniform = false;
      r.empty_lookup = false;
    }
  }
}

const Any& Worker::Resolve(const Any& arg, size_t index, const std::string& function) const {
  const DRef* ref = std::get_if<DRef>(&arg.storage());
  if (ref == nullptr) return arg;
  int64_t reg = ref->reg_id();
  const Register* r = Find(reg);
  DISCO_CHECK(r != nullptr, ValueError)
      << function << ": argument " << index << " names register " << reg
      << ", which does not exist on worker " << info_.worker_id;
  DISCO_CHECK(r->failure == nullptr, ValueError)
      << function << ": argument " << index << " is register " << reg
      << ", which holds the failure of an earlier call to '" << r->failure->function
      << "': " << r->failure->message;
  return r->value;
}

void Worker::GetGlobalFunc(uint64_t seq, int64_t reg, const std::string& name) {
  Function f = Registry::Get(name);
  if (!f.defined()) {
    Fail(seq, reg, name,
         detail::RankPrefix() + "unknown global function '" + name +
             "' (not registered on worker " + std::to_string(info_.worker_id) +
             "; load its library with disco.load_library?)");
    return;
  }
  Store(seq, reg, Any(std::move(f)));
  regs_[reg].empty_lookup = name == kEmptyFunctionName;
}

void Worker::CallPacked(uint64_t seq, int64_t result_reg, int64_t func_reg, const Any* args,
                        size_t n, bool collective_command, const std::string* label) {
  // The hot path builds no strings: names and messages are made only when something fails.
  const Register* fr = Find(func_reg);
  const Function* f = nullptr;
  if (fr != nullptr && fr->failure == nullptr) f = std::get_if<Function>(&fr->value.storage());
  // Whether the result's metadata is the command's: from the command alone, whatever happens here.
  const bool uniform = fr != nullptr && fr->empty_lookup && IsUniformEmptyCall(args, n);
  if (f == nullptr) {
    FailWithoutFunction(seq, result_reg, func_reg, fr, collective_command);
    regs_[result_reg].uniform = uniform;
    return;
  }
  // Functions never touch the register file, so `f` stays valid during the call.
  Any rv;
  // A GPU worker's functions run with its GPU current, whichever thread runs worker 0's commands.
  const DLDevice gpu = ThisWorker().device;
  if (gpu.device_type == kDLCUDA) memory::MakeDeviceCurrent(gpu.device_id);
  // A replay's calls are inside the replay's own record (ReplayGraph).
  if (label == nullptr) watchdog::Begin(seq, "call_packed", f->name());
  if (f->get()->collective || collective_command) watchdog::MarkCollective();
  struct EndGuard {
    bool active;
    ~EndGuard() {
      if (active) watchdog::End();
    }
  } end_guard{label == nullptr};
  // Only collectives read where their arguments came from (see CallOrigins).
  const bool collective = f->get()->collective;
  CallOrigins& origins = detail::MutableCallOrigins();
  if (collective) {
    origins.args.assign(n, ArgOrigin{});
    origins.arg_failure.clear();
    origins.arg_failure_taken = false;
    origins.replay_call = label;
  }
  std::string failure;
  try {
    const Any* call_args = ResolveArgs(args, n, *f, &origins);
    origins.function = collective ? f->get().get() : nullptr;
    rv = f->CallPacked(call_args, n);
    origins.function = nullptr;
    origins.replay_call = nullptr;
    scratch_.clear();
  } catch (...) {
    // Whatever the function threw (a ProtocolError of its own, or no std::exception at all:
    // `throw 42;`) is its failure; only Store/Fail below raise for a corrupt command, and that
    // ends the job.
    origins.function = nullptr;
    origins.replay_call = nullptr;
    scratch_.clear();
    failure = CurrentExceptionText();
    if (failure.empty()) failure = "(no message)";
  }
  if (collective && !origins.arg_failure.empty() && !origins.arg_failure_taken) {
    // The collective could not take the failure into an agreement (a non-tensor argument, or one
    // without an agreement round): the other workers are in it and would wait for this one.
    EndJobWithError("worker " + std::to_string(info_.worker_id) + " cannot join the collective '" +
                    f->name() + "' (command #" + std::to_string(seq) +
                    "): " + StripRankPrefix(origins.arg_failure) +
                    "; the other workers would wait for this one in the collective");
  }
  if (!failure.empty()) {
    Fail(seq, result_reg,
         label != nullptr ? *label : (f->name().empty() ? "<anonymous>" : f->name()), failure);
  } else {
    Store(seq, result_reg, std::move(rv));
  }
  regs_[result_reg].uniform = uniform;
}

void Worker::FailWithoutFunction(uint64_t seq, int64_t result_reg, int64_t func_reg,
                                 const Register* fr, bool collective_command) {
  std::string label = "<register " + std::to_string(func_reg) + ">";
  std::string why;
  if (fr == nullptr) {
    why = "the function register " + std::to_string(func_reg) + " does not exist on worker " +
          std::to_string(info_.worker_id);
  } else if (fr->failure != nullptr) {
    label = fr->failure->function;
    why = "the function register " + std::to_string(func_reg) +
          " holds the failure of an earlier call to '" + fr->failure->function +
          "': " + fr->failure->message;
  } else {
    why = "register " + std::to_string(func_reg) + " holds a " + fr->value.type_name() +
          ", not a Function";
  }
  if (collective_command) {
    EndJobWithError("worker " + std::to_string(info_.worker_id) + " cannot run command #" +
                    std::to_string(seq) + ", a collective call on worker 0: " + why +
                    "; the other workers would wait for this one in the collective");
  }
  Fail(seq, result_reg, label, detail::RankPrefix() + why);
}

// Registers named by the arguments resolved from the first one on (none: `args` itself); for a
// collective, where each came from (see CallOrigins), and None for one that failed here.
const Any* Worker::ResolveArgs(const Any* args, size_t n, const Function& fn,
                               CallOrigins* call_origins) {
  const bool collective = fn.get()->collective;
  CallOrigins& origins = *call_origins;
  for (size_t i = 0; i < n; ++i) {
    if (args[i].type_code() != TypeCode::kDRef) continue;
    scratch_.assign(args, args + n);
    for (size_t j = i; j < n; ++j) {
      const DRef* ref = std::get_if<DRef>(&args[j].storage());
      if (!collective) {
        scratch_[j] = Resolve(args[j], j, fn.name());
        continue;
      }
      if (ref == nullptr) continue;
      // A collective joins its agreement even when an argument failed here: it gets None, and
      // the agreement raises the failure on every worker (a hang otherwise).
      try {
        scratch_[j] = Resolve(args[j], j, fn.name());
      } catch (const Error& e) {
        if (origins.arg_failure.empty()) origins.arg_failure = e.what();
        scratch_[j] = Any();
      }
      const Register* r = Find(ref->reg_id());
      if (r == nullptr && ref->reg_id() >= 1 &&
          static_cast<uint64_t>(ref->reg_id()) < regs_.size()) {
        r = &regs_[ref->reg_id()];  // poisoned registers are found too; a free one is not
      }
      origins.args[j] = ArgOrigin{ref->reg_id(), 0, false, TensorFingerprint(scratch_[j])};
      if (r != nullptr) {
        // A graph's register has one key at every replay of the graph (bit 63: no sequence
        // number reaches it).
        origins.args[j].version =
            r->graph != 0 ? (uint64_t{1} << 63) | static_cast<uint64_t>(r->graph) : r->version;
        origins.args[j].uniform = r->uniform;
      }
    }
    return scratch_.data();
  }
  return args;
}

void Worker::DebugSetRegister(uint64_t seq, int64_t reg, const Any& value) {
  // A function register holds the same function on every worker (the controller refuses both
  // writes where worker 0 sees them: SessionImpl::DebugSetRegister); the register keeps its value.
  auto refuse_function = [&] {
    TouchRegister(seq, reg);
    Report(seq, reg, "DebugSetRegister",
           detail::RankPrefix() + "register " + std::to_string(reg) + " on worker " +
               std::to_string(info_.worker_id) +
               ": a function register cannot be written, nor a function into a register");
  };
  if (HoldsFunction(reg)) return refuse_function();
  Any resolved;
  try {
    resolved = Resolve(value, 2, "DebugSetRegister");
  } catch (const std::exception& e) {
    Fail(seq, reg, "DebugSetRegister", e.what());
    return;
  }
  if (resolved.type_code() == TypeCode::kFunction) return refuse_function();
  const Tensor* src = std::get_if<Tensor>(&resolved.storage());
  if (src == nullptr) {
    Store(seq, reg, std::move(resolved));
    return;
  }
  // As TVM's Disco: a register that holds a tensor gets the data copied into that tensor; another
  // register gets a copy of its own. Either way the caller's tensor is never shared (worker 0 runs
  // in the caller's process).
  try {
    Tensor dst = ExistingTensor(reg);
    if (!dst.defined()) {
      dst = Tensor::Empty(src->shape(), src->dtype(), src->device());
      dst.CopyFrom(*src);
      Store(seq, reg, Any(std::move(dst)));
      return;
    }
    CheckCopyInto(dst, *src, reg);
    dst.CopyFrom(*src);
    TouchRegister(seq, reg);  // as on the other workers
  } catch (const std::exception& e) {
    TouchRegister(seq, reg);  // the register keeps its value; its version follows the others'
    Report(seq, reg, "DebugSetRegister", e.what());
  }
}

Tensor Worker::ExistingTensor(int64_t reg) const {
  const Register* r = Find(reg);
  if (r == nullptr || r->failure != nullptr) return Tensor();
  const Tensor* t = std::get_if<Tensor>(&r->value.storage());
  return t != nullptr ? *t : Tensor();
}

void Worker::CheckCopyInto(const Tensor& dst, const Tensor& src, int64_t reg) const {
  // As TVM's Disco, which checks only the byte size: the register keeps its shape, and a value of
  // another shape with the same elements (a flat array into a (3, 3, 2) register) fills it.
  DISCO_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), ValueError)
      << "DebugSetRegister: register " << reg << " on worker " << info_.worker_id << " holds a "
      << dst.ToString() << ", and the value is a " << src.ToString()
      << "; the data is copied into the register's tensor, so dtype and element count must match";
}

void Worker::TouchRegister(uint64_t seq, int64_t reg) {
  if (reg >= 1 && static_cast<uint64_t>(reg) < regs_.size()) {
    regs_[reg].version = seq;
    regs_[reg].uniform = false;  // the written worker's value may differ now
    regs_[reg].empty_lookup = false;
  }
}

protocol::DebugStatus Worker::DebugGetRegister(int64_t reg, Any* out) const {
  const Register* r = Find(reg);
  if (r == nullptr) {
    *out = Any(detail::RankPrefix() + "register " + std::to_string(reg) +
               " does not exist on worker " + std::to_string(info_.worker_id));
    return protocol::DebugStatus::kNoSuchRegister;
  }
  if (r->failure != nullptr) {
    *out = Any("register " + std::to_string(reg) + " on worker " + std::to_string(info_.worker_id) +
               " holds the failure of '" + r->failure->function + "': " + r->failure->message);
    return protocol::DebugStatus::kPoisoned;
  }
  try {
    *out = HostCopy(r->value);
  } catch (const std::exception& e) {
    *out = Any("register " + std::to_string(reg) + " on worker " + std::to_string(info_.worker_id) +
               ": copying " + r->value.ToString() + " to the host failed: " + e.what());
    return protocol::DebugStatus::kUnsendable;
  }
  return protocol::DebugStatus::kValue;
}

Tensor Worker::GetTensor(int64_t reg, const char* what) const {
  const Register* r = Find(reg);
  DISCO_CHECK(r != nullptr, ValueError)
      << what << ": register " << reg << " does not exist on worker " << info_.worker_id;
  if (r->failure != nullptr) {
    throw RemoteError(detail::RankPrefix() + what + ": register " + std::to_string(reg) +
                          " on worker 0 holds the failure of '" + r->failure->function +
                          "': " + r->failure->message,
                      info_.worker_id);
  }
  const Tensor* t = std::get_if<Tensor>(&r->value.storage());
  DISCO_CHECK(t != nullptr, TypeError)
      << what << ": register " << reg << " holds a " << r->value.type_name() << ", not a Tensor";
  return *t;
}

std::string Worker::FunctionName(int64_t reg) const {
  const Register* r = Find(reg);
  if (r == nullptr || r->failure != nullptr) return "";
  const Function* f = std::get_if<Function>(&r->value.storage());
  return f != nullptr && f->defined() ? f->name() : "";
}

bool Worker::HoldsFunction(int64_t reg) const {
  const Register* r = Find(reg);
  return r != nullptr && r->failure == nullptr && r->value.type_code() == TypeCode::kFunction;
}

bool Worker::HoldsCollective(int64_t reg) const {
  const Register* r = Find(reg);
  if (r == nullptr || r->failure != nullptr) return false;
  const Function* f = std::get_if<Function>(&r->value.storage());
  return f != nullptr && f->defined() && f->get()->collective;
}

void Worker::InstallGraph(uint64_t seq, const Any* ops, size_t n) {
  protocol::GraphProgram spec = protocol::DecodeGraphProgram(ops, n, seq);
  for (int64_t reg : spec.reserved) ReserveRegister(reg);
  GraphProgram program;
  program.num_inputs = spec.num_inputs;
  program.label = "graph " + std::to_string(spec.id);
  for (protocol::GraphStep& step : spec.steps) {
    if (step.kind == protocol::GraphStep::kLookup) {
      GetGlobalFunc(seq, step.result_reg, step.name);
      continue;
    }
    if (step.kind == protocol::GraphStep::kInstallCall) {
      CallPacked(seq, step.result_reg, step.func_reg, step.args.data(), step.args.size(),
                 step.collective);
      continue;
    }
    Slot(step.result_reg);  // in the register file before any replay writes it (RunGraphCall)
    GraphCall call;
    call.result_reg = step.result_reg;
    call.func_reg = step.func_reg;
    call.collective = step.collective;
    call.args = std::move(step.args);
    call.inputs = std::move(step.inputs);
    const Register* fr = Find(call.func_reg);
    const Function* f = fr != nullptr && fr->failure == nullptr
                            ? std::get_if<Function>(&fr->value.storage())
                            : nullptr;
    if (f != nullptr && f->defined() && !call.collective && !f->get()->collective) call.func = *f;
    for (uint32_t pos = 0; pos < call.args.size(); ++pos) {
      if (call.args[pos].type_code() == TypeCode::kDRef) call.refs.push_back(pos);
    }
    if (call.func.defined()) call.bound = call.args;
    call.label = program.label + " call " + std::to_string(program.calls.size()) + " '" +
                 (f != nullptr ? f->name() : "<register " + std::to_string(call.func_reg) + ">") +
                 "'";
    program.calls.push_back(std::move(call));
  }
  if (spec.id != 0) graphs_[spec.id] = std::move(program);
}

void Worker::ReplayGraph(uint64_t seq, int64_t id, const Any* inputs, size_t n) {
  auto it = graphs_.find(id);
  DISCO_CHECK(it != graphs_.end(), ProtocolError)
      << "replay_graph command #" << seq << ": graph " << id << " is not installed on worker "
      << info_.worker_id;
  const GraphProgram& program = it->second;
  DISCO_CHECK(static_cast<int64_t>(n) == program.num_inputs, ProtocolError)
      << "replay_graph command #" << seq << ": " << n << " inputs for graph " << id
      << ", which takes " << program.num_inputs;
  // One flight record for the replay; the watchdog names the call it is at.
  watchdog::Begin(seq, "replay_graph", program.label);
  replaying_ = id;
  struct EndGuard {
    int64_t* replaying;
    ~EndGuard() {
      *replaying = 0;
      watchdog::End();
    }
  } end_guard{&replaying_};
  for (size_t i = 0; i < program.calls.size(); ++i) {
    const GraphCall& call = program.calls[i];
    watchdog::Step(static_cast<int64_t>(i), call.label.c_str());
    const int64_t trace_start = trace::Enabled() ? trace::NowNs() : -1;
    if (call.func.defined()) {
      RunGraphCall(seq, call, inputs);
    } else {
      // CallPacked resolves registers itself (and lets a collective agree on a failed one).
      CallPacked(seq, call.result_reg, call.func_reg, GraphArgs(call, inputs), call.args.size(),
                 call.collective, &call.label);
    }
    if (trace_start >= 0) {  // each call of a replay, inside the replay's own span
      trace::Record(trace::Kind::kRun, call.label, trace_start, trace::NowNs(),
                    static_cast<int64_t>(seq));
    }
  }
  graph_args_.clear();
}

const Any* Worker::GraphArgs(const GraphCall& call, const Any* inputs) {
  if (call.inputs.empty()) return call.args.data();
  graph_args_.assign(call.args.begin(), call.args.end());
  for (const auto& [pos, input] : call.inputs) graph_args_[pos] = inputs[input];
  return graph_args_.data();
}

namespace {

// A bound argument that holds nothing but its value (a number, a flag, none) stays until the next
// replay binds it again; anything else (a tensor, an object) is let go now, so that a replay does
// not keep the last one alive.
void Unbind(Any* a) {
  const TypeCode c = a->type_code();
  if (c != TypeCode::kNone && c != TypeCode::kBool && c != TypeCode::kInt &&
      c != TypeCode::kFloat) {
    *a = Any();
  }
}

}  // namespace

void Worker::RunGraphCall(uint64_t seq, const GraphCall& call, const Any* inputs) {
  // The result register was reserved at install, and a function cannot grow the register file:
  // the slot is found once and the function writes its value there (Store's work without its
  // general checks; a failure then replaces it). The arguments are bound in the call's own
  // buffer: only the placeholders' and the registers' positions change between replays.
  Register& slot = regs_[static_cast<size_t>(call.result_reg)];
  Any* args = call.bound.data();
  auto unbind = [&] {
    for (const auto& [pos, input] : call.inputs) Unbind(&args[pos]);
    for (uint32_t pos : call.refs) Unbind(&args[pos]);
  };
  try {
    for (const auto& [pos, input] : call.inputs) {
      args[pos] = inputs[input];
      // Registers given as inputs are their values here, as in any call (a failed one throws).
      if (args[pos].type_code() == TypeCode::kDRef) {
        args[pos] = Resolve(inputs[input], pos, call.label);
      }
    }
    for (uint32_t pos : call.refs) args[pos] = Resolve(call.args[pos], pos, call.label);
    // A function that returns nothing leaves None: a packed body may not write its result at all
    // (typed ones always do: FunctionObj::writes_result).
    if (!call.func.get()->writes_result && slot.value.type_code() != TypeCode::kNone) {
      slot.value = Any();
    }
    call.func.get()->body(Args(args, call.args.size()), &slot.value);
  } catch (...) {
    unbind();
    Fail(seq, call.result_reg, call.label, CurrentExceptionText());
    return;
  }
  unbind();
  slot.version = seq;
  if (slot.failure != nullptr) slot.failure.reset();
  slot.used = true;
  slot.uniform = false;
  slot.empty_lookup = false;
  slot.graph = replaying_;
}

size_t Worker::num_live_registers() const {
  return static_cast<size_t>(
      std::count_if(regs_.begin(), regs_.end(), [](const Register& r) { return r.used; }));
}

}  // namespace disco
