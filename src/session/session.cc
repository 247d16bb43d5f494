#include <disco/log.h>
#include <disco/session.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "ccl/context.h"
#include "core/env.h"
#include "core/trace.h"
#include "core/wait_record.h"
#include "session/session_impl.h"
#include "session/watchdog.h"

namespace disco {

// ---- SessionConfig ------------------------------------------------------------------------------

SessionConfig SessionConfig::FromEnv(int num_workers) {
  SessionConfig c;
  c.inline_bytes = env::GetInt("DISCO_INLINE_BYTES", protocol::kMinInlineBytes, 1 << 20);
  c.max_frame_bytes = env::GetInt("DISCO_MAX_FRAME_BYTES", 1 << 16, INT32_MAX);
  c.num_groups = env::GetInt("DISCO_NUM_GROUPS", 1, num_workers);
  c.timeout_s = env::GetInt("DISCO_TIMEOUT", 0, int64_t{365} * 24 * 3600);
  const std::string prepost = env::GetString("DISCO_PREPOST_FRAMES");
  DISCO_CHECK(prepost.empty() || prepost == "auto" || prepost == "0" || prepost == "1", ValueError)
      << "DISCO_PREPOST_FRAMES='" << prepost << "' is not auto, 0 or 1";
  c.prepost_frames = prepost == "0" ? 0 : prepost == "1" ? 1 : -1;
  DISCO_CHECK(num_workers % c.num_groups == 0, ValueError)
      << "DISCO_NUM_GROUPS=" << c.num_groups << " does not divide the " << num_workers
      << " workers";
  // Knobs read later (by InitCCL, the HDF5 store) are checked now too: a typo ends the job at
  // start with one line, not at the first use, or never.
  for (const char* flag : {"DISCO_CCL_SHM", "DISCO_CCL_SYNC_SEND", "DISCO_H5_INDEPENDENT"}) {
    env::GetInt(flag, 0, 1);
  }
  std::string ccl = env::GetString("DISCO_CCL");
  DISCO_CHECK(ccl.empty() || ccl == "auto" || ccl == "mpi" || ccl == "nccl", ValueError)
      << "DISCO_CCL='" << ccl << "' is not auto, mpi or nccl";
  return c;
}

size_t SessionConfig::max_payload() const {
  return static_cast<size_t>(max_frame_bytes) - protocol::kHeaderBytes;
}

// ---- DRef ---------------------------------------------------------------------------------------

namespace detail {
namespace {
// The live sessions of this process (the job's own, and any number of remote ones) and the last
// generation handed out; DRefs compare generations so that a DRef outliving its session (a
// static, say) frees nothing.
std::vector<SessionBackend*> g_live_sessions;
uint64_t g_last_generation = 0;
}  // namespace

SessionBackend::SessionBackend() : generation_(++g_last_generation) {
  g_live_sessions.push_back(this);
}

SessionBackend::~SessionBackend() { Retire(); }

void SessionBackend::Retire() {
  auto it = std::find(g_live_sessions.begin(), g_live_sessions.end(), this);
  if (it != g_live_sessions.end()) g_live_sessions.erase(it);
}

const DRef& SessionBackend::Builtin(const std::string& name) {
  auto it = builtins_.find(name);
  if (it == builtins_.end()) it = builtins_.emplace(name, GetGlobalFunc(name)).first;
  return it->second;
}

SessionBackend* LiveSession(uint64_t generation) {
  if (generation == 0) return nullptr;
  for (SessionBackend* s : g_live_sessions) {
    if (s->generation() == generation) return s;
  }
  return nullptr;
}
}  // namespace detail

DRef DRef::Make(int64_t reg_id, uint64_t session) {
  DRef ref;
  ref.obj_ = new Obj{reg_id, 1, session};
  return ref;
}

void DRef::Release(Obj* obj) noexcept {
  if (detail::SessionBackend* s = detail::LiveSession(obj->session)) s->DeallocReg(obj->reg_id);
  delete obj;
}

namespace {
detail::SessionBackend* SessionOf(const DRef& ref, const char* what) {
  DISCO_CHECK(ref.defined(), ValueError) << what << " of an empty DRef";
  detail::SessionBackend* s = detail::LiveSession(ref.session());
  DISCO_CHECK(s != nullptr, ValueError)
      << what << " of DRef(" << ref.reg_id() << "), whose session has ended";
  return s;
}
}  // namespace

Any DRef::DebugGetFromRemote(int worker) const {
  return SessionOf(*this, "DebugGetFromRemote")->DebugGetFromRemote(reg_id(), worker);
}

void DRef::DebugCopyFrom(int worker, const Any& value) const {
  SessionOf(*this, "DebugCopyFrom")->DebugSetRegister(reg_id(), value, worker);
}

namespace detail {

// ---- SessionImpl --------------------------------------------------------------------------------

SessionImpl::SessionImpl(MpiTransport* transport, const SessionConfig& config,
                         const WorkerInfo& worker0)
    : transport_(transport),
      config_(config),
      worker0_(worker0, [this](const protocol::ErrorReport& r) { OnError(r); }),
      errors_received_(transport->size(), 0) {
  frame_.Reserve(static_cast<size_t>(config_.inline_bytes));
  prepost_frames_ = config_.prepost_frames == 1 ||
                    (config_.prepost_frames == -1 && transport->size() > kPrepostMinRanks);
}

SessionImpl::~SessionImpl() {
  Retire();  // before members go: the DRefs they hold must not call back into a half-torn object
}

void SessionImpl::CheckLive(const char* what) const {
  DISCO_CHECK(!shut_down_, ValueError) << what << " after the session was shut down";
}

void SessionImpl::CheckWorker(int worker_id, const char* what) const {
  DISCO_CHECK(worker_id >= 0 && worker_id < num_workers(), ValueError)
      << what << ": worker id " << worker_id << " is out of range [0, " << num_workers() << ")";
}

void SessionImpl::CheckRegister(int64_t reg, const char* what) const {
  DISCO_CHECK(reg >= 1 && reg < reg_count_, ValueError)
      << what << ": register " << reg << " does not exist (registers 1.." << reg_count_ - 1
      << " have been allocated)";
}

void SessionImpl::CheckOwnRefs(const DRef* func, const Any* values, size_t n,
                               const char* what) const {
  auto own = [&](const DRef& ref, const std::string& which) {
    // session() == 0: an unowned id (DRef::Unowned), checked by the workers like any id.
    DISCO_CHECK(!ref.defined() || ref.session() == 0 || ref.session() == generation(), ValueError)
        << what << ": " << which << " is DRef(" << ref.reg_id()
        << ") of another session (a remote session's, or one that ended); registers of one "
           "session mean nothing in another";
  };
  if (func != nullptr) own(*func, "the function");
  for (size_t i = 0; i < n; ++i) {
    if (const DRef* ref = std::get_if<DRef>(&values[i].storage())) {
      own(*ref, "argument " + std::to_string(i));
    }
  }
}

int64_t SessionImpl::AllocateReg() {
  if (!free_regs_.empty()) {
    int64_t reg = free_regs_.back();
    free_regs_.pop_back();
    return reg;
  }
  return reg_count_++;
}

DRef SessionImpl::MakeDRef(int64_t reg) { return DRef::Make(reg, generation()); }

void SessionImpl::DeallocReg(int64_t reg) noexcept {
  if (shut_down_) return;
  try {
    if (deferred_.active) {
      worker0_kills_.push_back(reg);  // after the deferred call, as the workers will do
    } else {
      worker0_.KillRegs(&reg, 1);
    }
    pending_kills_.push_back(reg);
    if (pending_kills_.size() >= kMaxPendingKills) FlushKills();
  } catch (const std::exception& e) {
    DISCO_LOG(ERROR) << "freeing register " << reg << " failed: " << e.what();
  }
}

void SessionImpl::FlushWorker0() {
  if (deferred_.active) {
    deferred_.active = false;
    worker0_.CallPacked(deferred_.seq, deferred_.result_reg, deferred_.func_reg,
                        deferred_.args.data(), deferred_.args.size());
    deferred_.args.clear();  // may free DRefs: their kills now run at once
  }
  if (!worker0_kills_.empty()) {
    std::vector<int64_t> kills;
    kills.swap(worker0_kills_);
    worker0_.KillRegs(kills.data(), kills.size());
  }
}

void SessionImpl::FlushKills() {
  if (!pending_kills_.empty()) Broadcast(protocol::Action::kKillReg, nullptr, 0, nullptr, 0);
}

uint64_t SessionImpl::Broadcast(protocol::Action action, const Any* head, size_t num_head,
                                const Any* args, size_t num_args, uint16_t flags) {
  if (!pending_graph_frees_.empty() && action != protocol::Action::kFreeGraph) {
    std::vector<Any> ids;
    for (int64_t id : pending_graph_frees_) ids.push_back(Any(id));
    pending_graph_frees_.clear();
    Broadcast(protocol::Action::kFreeGraph, nullptr, 0, ids.data(), ids.size());
  }
  const size_t inline_bytes = static_cast<size_t>(config_.inline_bytes);
  if (parked_) {  // parked workers sleep in a barrier: join it, then they take frames again
    transport_->Unpark();
    parked_ = false;
  }
  for (;;) {
    const uint64_t seq = seq_ + 1;
    size_t total = protocol::EncodeCommand(&frame_, action, seq, pending_kills_, head, num_head,
                                           args, num_args, &bulk_, protocol::kOutOfLineMinBytes);
    size_t bulk_total = 0;
    for (const protocol::BulkSegment& b : bulk_) bulk_total += b.size;
    DISCO_CHECK(bulk_total <= config_.max_payload(), ValueError)
        << protocol::ActionName(action) << ": " << bulk_total
        << " bytes of tensor and bytes arguments exceed DISCO_MAX_FRAME_BYTES="
        << config_.max_frame_bytes;
    DISCO_CHECK(total - protocol::kHeaderBytes <= config_.max_payload(), ValueError)
        << protocol::ActionName(action) << ": " << total - protocol::kHeaderBytes
        << " bytes of arguments exceed DISCO_MAX_FRAME_BYTES=" << config_.max_frame_bytes;
    // Only a one-broadcast frame goes out eagerly whatever the workers are doing. A longer one
    // may wait for workers that wait, in a collective, for worker 0's deferred call: run that
    // first (it may free registers and send frames of its own), then encode again.
    if (deferred_.active && (total > inline_bytes || !bulk_.empty())) {
      FlushWorker0();
      continue;
    }
    seq_ = seq;
    const int64_t trace_start = trace::Enabled() ? trace::NowNs() : -1;
    if (transport_->size() > 1) {
      if (flags != 0) protocol::SetFlags(frame_.data(), flags);
      if (total <= inline_bytes) frame_.Resize(inline_bytes);  // padding: a whole inline frame
      BroadcastInline(inline_bytes, flags);
      if (total > inline_bytes) {
        transport_->Broadcast(frame_.data() + inline_bytes, total - inline_bytes);
      }
      for (const protocol::BulkSegment& b : bulk_) {
        transport_->Broadcast(const_cast<void*>(b.data), b.size);  // MPI_Bcast's root only reads
      }
    }
    if (trace_start >= 0) {
      const char* name = protocol::ActionName(action);
      trace::Record(trace::Kind::kCommand, name, std::strlen(name), trace_start, trace::NowNs(),
                    static_cast<int64_t>(seq), static_cast<int64_t>(total + bulk_total));
    }
    bulk_.clear();
    frame_.ReleaseAbove(std::max(protocol::kKeepBufferBytes, inline_bytes));
    free_regs_.insert(free_regs_.end(), pending_kills_.begin(), pending_kills_.end());
    pending_kills_.clear();
    return seq;
  }
}

void SessionImpl::TestBroadcastRaw(const uint8_t* data, size_t n) {
  const size_t inline_bytes = static_cast<size_t>(config_.inline_bytes);
  DISCO_ICHECK_LE(n, inline_bytes);
  frame_.Resize(inline_bytes);
  std::fill(frame_.data(), frame_.data() + inline_bytes, 0);
  std::copy(data, data + n, frame_.data());
  BroadcastInline(inline_bytes, 0);
}

void SessionImpl::BroadcastInline(size_t inline_bytes, uint16_t flags) {
  if (next_nonblocking_) {
    transport_->BroadcastNonblocking(frame_.data(), inline_bytes);
  } else {
    transport_->Broadcast(frame_.data(), inline_bytes);
  }
  next_nonblocking_ = (flags & protocol::kFlagNextFrameNonblocking) != 0;
}

DRef SessionImpl::GetGlobalFunc(const std::string& name) {
  CheckLive("GetGlobalFunc");
  if (recording_ != nullptr) return RecordLookup(name);
  int64_t reg = AllocateReg();
  Any head[2] = {Any(reg), Any(name)};
  uint64_t seq;
  try {
    seq = Broadcast(protocol::Action::kGetGlobalFunc, head, 2, nullptr, 0);
  } catch (...) {
    free_regs_.push_back(reg);
    throw;
  }
  // A lookup does not need worker 0's deferred call, which stays deferred: a send deferred there
  // may wait for the receive that the command after this lookup carries (the first use of a
  // builtin looks it up first). Unless the register comes back from a kill that worker 0 applies
  // only after the deferred call.
  if (std::find(worker0_kills_.begin(), worker0_kills_.end(), reg) != worker0_kills_.end()) {
    FlushWorker0();
  }
  worker0_.GetGlobalFunc(seq, reg, name);
  return MakeDRef(reg);
}

DRef SessionImpl::CallWithPacked(const DRef& func, const Any* args, size_t num_args, bool movable) {
  CheckLive("CallPacked");
  if (recording_ != nullptr) return RecordCall(func, args, num_args);
  for (size_t i = 0; i < num_args; ++i) {
    DISCO_CHECK(PlaceholderIndex(args[i]) < 0 && !NestsPlaceholder(args[i]), ValueError)
        << "CallPacked: argument " << i
        << " is or holds a placeholder of a capture, used outside Session::Capture";
  }
  DISCO_CHECK(func.defined(), ValueError) << "CallPacked with an empty function DRef";
  CheckOwnRefs(&func, args, num_args, "CallPacked");
  int64_t reg = AllocateReg();
  Any head[2] = {Any(reg), Any(func)};
  const bool collective = worker0_.HoldsCollective(func.reg_id());
  uint64_t seq;
  try {
    const uint16_t flags = collective
                               ? (protocol::kFlagCollective |
                                  (prepost_frames_ ? protocol::kFlagNextFrameNonblocking : 0))
                               : 0;
    seq = Broadcast(protocol::Action::kCallPacked, head, 2, args, num_args, flags);
  } catch (...) {
    free_regs_.push_back(reg);
    throw;
  }
  FlushWorker0();  // the previous call, now that this frame is on its way
  bool run_now = !collective;
  for (size_t i = 0; i < num_args && !run_now; ++i) {
    run_now = args[i].type_code() == TypeCode::kTensor;
  }
  if (run_now) {
    worker0_.CallPacked(seq, reg, func.reg_id(), args, num_args);
  } else {
    worker0_.ReserveRegister(reg);  // lookups run before the deferred call, and may need reg + 1
    deferred_.active = true;
    deferred_.seq = seq;
    deferred_.result_reg = reg;
    deferred_.func_reg = func.reg_id();
    if (movable) {
      Any* m = const_cast<Any*>(args);
      deferred_.args.assign(std::make_move_iterator(m), std::make_move_iterator(m + num_args));
    } else {
      deferred_.args.assign(args, args + num_args);
    }
  }
  return MakeDRef(reg);
}

void SessionImpl::ParkWorkers() {
  CheckLive("ParkWorkers");
  CheckNotCapturing("ParkWorkers");
  if (parked_ || transport_->size() == 1) return;
  FlushWorker0();  // a deferred collective needs the workers awake
  Broadcast(protocol::Action::kPark, nullptr, 0, nullptr, 0);
  parked_ = true;
}

Tensor SessionImpl::Worker0Tensor(const DRef& remote, const char* what) {
  CheckLive(what);
  CheckNotCapturing(what);
  FlushWorker0();
  DISCO_CHECK(remote.defined(), ValueError) << what << " with an empty DRef";
  CheckOwnRefs(&remote, nullptr, 0, what);
  return worker0_.GetTensor(remote.reg_id(), what);
}

void SessionImpl::CopyToWorker0(const Tensor& host, const DRef& remote) {
  Worker0Tensor(remote, "CopyToWorker0").CopyFrom(host);
}

void SessionImpl::CopyFromWorker0(const Tensor& host, const DRef& remote) {
  Tensor dst = host;
  dst.CopyFrom(Worker0Tensor(remote, "CopyFromWorker0"));
}

void SessionImpl::OnError(const protocol::ErrorReport& report) {
  pending_errors_.push_back(report);
}

void SessionImpl::ReceiveError(int source) {
  const int worker =
      transport_->Receive(source, MpiTransport::kTagError, &reply_buf_, config_.max_payload());
  protocol::Reply reply;
  protocol::DecodeReply(reply_buf_.data(), reply_buf_.size(), &reply);
  DISCO_CHECK(reply.kind == protocol::ReplyKind::kError, ProtocolError)
      << "worker " << worker << " sent a non-error message on the error channel";
  ++errors_received_[worker];
  ++errors_received_total_;
  pending_errors_.push_back(std::move(reply.error));
}

void SessionImpl::CollectErrors(int worker, uint64_t sent) {
  while (errors_received_[worker] < sent) ReceiveError(worker);
}

// Every worker's error reports, in O(log P): the workers' counts are summed by a reduce, and only
// the reports not received yet are read, from whichever workers sent them (each worker sends its
// reports before it joins the reduce, so they are all on their way).
void SessionImpl::CollectAllErrors() {
  const uint64_t total = transport_->ReduceSumU64(0);
  while (errors_received_total_ < total) ReceiveError(MPI_ANY_SOURCE);
}

void SessionImpl::DrainErrors() {
  int source = 0;
  while (transport_->Probe(MpiTransport::kTagError, &source)) {
    CollectErrors(source, errors_received_[source] + 1);
  }
}

void SessionImpl::RaisePending() {
  if (pending_errors_.empty()) return;
  std::vector<protocol::ErrorReport> errors;
  errors.swap(pending_errors_);
  // In command order; within a command, the causes before the echoes: a rank that failed because
  // another one did says "(its error says why)" (mpi::AgreeOnSuccess and the collectives'
  // agreement), and the error to read first is the cause.
  auto echo = [](const protocol::ErrorReport& e) {
    return e.message.find("(its error says why)") != std::string::npos;
  };
  std::stable_sort(errors.begin(), errors.end(), [&](const auto& a, const auto& b) {
    if (a.seq != b.seq) return a.seq < b.seq;
    if (echo(a) != echo(b)) return !echo(a);
    return a.worker < b.worker;
  });
  const protocol::ErrorReport& first = errors.front();
  std::ostringstream os;
  os << "worker " << first.worker << " failed in '" << first.function << "' (command #" << first.seq
     << ", register " << first.reg << "): " << first.message;
  if (errors.size() > 1) {
    os << "\n  and " << errors.size() - 1 << " more error report(s):";
    size_t shown = 0;
    for (size_t i = 1; i < errors.size() && shown < 8; ++i, ++shown) {
      const auto& e = errors[i];
      std::string msg = e.message.size() > 200 ? e.message.substr(0, 200) + "..." : e.message;
      os << "\n  worker " << e.worker << " in '" << e.function << "' (command #" << e.seq
         << "): " << msg;
    }
    if (errors.size() - 1 > shown) os << "\n  ...";
  }
  throw RemoteError(os.str(), first.worker);
}

void SessionImpl::ReceiveReply(int worker, protocol::Reply* reply) {
  transport_->Receive(worker, MpiTransport::kTagReply, &reply_buf_, config_.max_payload());
  protocol::DecodeReply(reply_buf_.data(), reply_buf_.size(), reply);
  reply_buf_.ReleaseAbove(protocol::kKeepBufferBytes);  // the reply's values own their data
}

void SessionImpl::SyncWorker(int worker_id) {
  CheckLive("SyncWorker");
  CheckNotCapturing("SyncWorker");
  trace::Span span(trace::Kind::kSync, "SyncWorker");
  span.set(0, worker_id);
  FlushWorker0();  // (worker 0's commands clear the activity as they end: it is set after)
  wait_record::Doing doing("the controller waits in SyncWorker");
  CheckWorker(worker_id, "SyncWorker");
  if (worker_id != 0) {
    Any head[1] = {Any(worker_id)};
    Broadcast(protocol::Action::kSyncWorker, head, 1, nullptr, 0);
    protocol::Reply reply;
    // A sync ack is 9 bytes: one receive, no probe.
    transport_->ReceiveSmall(worker_id, MpiTransport::kTagReply, &reply_buf_, 64);
    protocol::DecodeReply(reply_buf_.data(), reply_buf_.size(), &reply);
    DISCO_CHECK(reply.kind == protocol::ReplyKind::kSyncAck, ProtocolError)
        << "worker " << worker_id << " answered a sync with reply kind "
        << static_cast<int>(reply.kind);
    CollectErrors(worker_id, reply.errors_sent);
  }
  DrainErrors();
  RaisePending();
}

void SessionImpl::SyncAll() {
  CheckLive("SyncAll");
  CheckNotCapturing("SyncAll");
  trace::Span span(trace::Kind::kSync, "SyncAll");
  span.set(0, -1);
  FlushWorker0();
  wait_record::Doing doing("the controller waits in SyncAll");
  if (transport_->size() > 1) {
    Any head[1] = {Any(-1)};
    Broadcast(protocol::Action::kSyncWorker, head, 1, nullptr, 0);
    CollectAllErrors();
  }
  RaisePending();
}

Any SessionImpl::DebugGetFromRemote(int64_t reg_id, int worker_id) {
  CheckLive("DebugGetFromRemote");
  CheckNotCapturing("DebugGetFromRemote");
  FlushWorker0();
  CheckWorker(worker_id, "DebugGetFromRemote");
  CheckRegister(reg_id, "DebugGetFromRemote");
  Any value;
  protocol::DebugStatus status;
  if (worker_id == 0) {
    status = worker0_.DebugGetRegister(reg_id, &value);
  } else {
    Any head[2] = {Any(reg_id), Any(worker_id)};
    Broadcast(protocol::Action::kDebugGetFromRemote, head, 2, nullptr, 0);
    protocol::Reply reply;
    ReceiveReply(worker_id, &reply);
    DISCO_CHECK(reply.kind == protocol::ReplyKind::kDebugValue, ProtocolError)
        << "worker " << worker_id << " answered a debug read with reply kind "
        << static_cast<int>(reply.kind);
    CollectErrors(worker_id, reply.errors_sent);
    status = reply.status;
    value = std::move(reply.value);
  }
  DrainErrors();
  RaisePending();
  switch (status) {
    case protocol::DebugStatus::kValue:
      return value;
    case protocol::DebugStatus::kPoisoned:
      throw RemoteError(value.cast<std::string>(), worker_id);
    case protocol::DebugStatus::kNoSuchRegister:
    case protocol::DebugStatus::kUnsendable:
      throw ValueError(value.cast<std::string>());
  }
  return value;
}

namespace {
// A function register holds the same function on every worker: the controller sends a call as a
// collective or not by worker 0's, and a worker that held another function would run something
// else (or enter the collective alone: a hang). So a debug write neither overwrites a function
// nor writes one (Worker::DebugSetRegister refuses both too, should a worker's view differ).
void CheckNoFunctionWrite(const Worker& worker0, int64_t reg_id, const Any& value) {
  DISCO_CHECK(!worker0.HoldsFunction(reg_id), ValueError)
      << "DebugSetRegister: register " << reg_id << " holds the function '"
      << worker0.FunctionName(reg_id)
      << "', which cannot be overwritten (every worker must hold the same function in a register)";
  const DRef* ref = std::get_if<DRef>(&value.storage());
  const bool function = value.type_code() == TypeCode::kFunction ||
                        (ref != nullptr && worker0.HoldsFunction(ref->reg_id()));
  DISCO_CHECK(!function, ValueError)
      << "DebugSetRegister: the value for register " << reg_id << " is a function ("
      << (ref != nullptr ? "register " + std::to_string(ref->reg_id()) : std::string("by value"))
      << "), which cannot be written into a register (every worker must hold the same function in "
         "a register; use GetGlobalFunc)";
}
}  // namespace

void SessionImpl::DebugSetRegister(int64_t reg_id, const Any& value, int worker_id) {
  CheckLive("DebugSetRegister");
  CheckNotCapturing("DebugSetRegister");
  FlushWorker0();
  CheckWorker(worker_id, "DebugSetRegister");
  CheckRegister(reg_id, "DebugSetRegister");
  CheckOwnRefs(nullptr, &value, 1, "DebugSetRegister");
  CheckNoFunctionWrite(worker0_, reg_id, value);
  if (worker_id == 0) {  // in process: a tensor that cannot be copied in is refused at once
    const Tensor* src = std::get_if<Tensor>(&value.storage());
    Tensor dst = src != nullptr ? worker0_.ExistingTensor(reg_id) : Tensor();
    if (dst.defined()) worker0_.CheckCopyInto(dst, *src, reg_id);
  }
  // Every worker hears of the write, so register versions stay the same everywhere; worker 0's
  // value stays in process (it may be an Object that cannot be sent).
  Any head[3] = {Any(reg_id), Any(worker_id), worker_id == 0 ? Any() : value};
  uint64_t seq = Broadcast(protocol::Action::kDebugSetRegister, head, 3, nullptr, 0);
  if (worker_id == 0) {
    worker0_.DebugSetRegister(seq, reg_id, value);
  } else {
    worker0_.TouchRegister(seq, reg_id);
  }
}

int SessionImpl::Shutdown(int exit_code) {
  if (shut_down_) return final_exit_code_;
  CheckNotCapturing("Shutdown");
  FlushWorker0();
  ClearBuiltins();
  watchdog::ShuttingDown();  // the workers stop answering liveness pings as they leave
  Any head[1] = {Any(exit_code)};
  Broadcast(protocol::Action::kShutdown, head, 1, nullptr, 0);
  shut_down_ = true;
  ccl::Reset();  // every rank frees its communicators on the shutdown command
  if (transport_->size() > 1) CollectAllErrors();
  int code = exit_code;
  if (!pending_errors_.empty()) {
    for (const protocol::ErrorReport& e : pending_errors_) {
      DISCO_LOG(ERROR) << "unobserved remote error (never raised by a sync): worker " << e.worker
                       << " failed in '" << e.function << "' (command #" << e.seq
                       << "): " << e.message;
    }
    pending_errors_.clear();
    if (code == 0) code = 1;
  }
  if (transport_->size() > 1) code = static_cast<int>(transport_->BroadcastI64(code));
  final_exit_code_ = code;
  return code;
}

}  // namespace detail

// ---- Session ------------------------------------------------------------------------------------

Session::Session(std::shared_ptr<detail::SessionBackend> impl) : impl_(std::move(impl)) {}
detail::SessionImpl* Session::impl() const {
  return dynamic_cast<detail::SessionImpl*>(impl_.get());
}
Session::~Session() = default;

int Session::num_workers() const { return impl_->num_workers(); }
int Session::num_groups() const { return impl_->num_groups(); }
DRef Session::GetGlobalFunc(const std::string& name) { return impl_->GetGlobalFunc(name); }
DRef Session::CallWithPacked(const DRef& func, const Any* args, size_t num_args) {
  return impl_->CallWithPacked(func, args, num_args, /*movable=*/false);
}
DRef Session::CallWithMovedArgs(const DRef& func, Any* args, size_t num_args) {
  return impl_->CallWithPacked(func, args, num_args, /*movable=*/true);
}
void Session::CopyToWorker0(const Tensor& host, const DRef& remote) {
  impl_->CopyToWorker0(host, remote);
}
void Session::CopyFromWorker0(const Tensor& host, const DRef& remote) {
  impl_->CopyFromWorker0(host, remote);
}
void Session::SyncWorker(int worker_id) { impl_->SyncWorker(worker_id); }
void Session::SyncAll() { impl_->SyncAll(); }
Any Session::DebugGetFromRemote(int64_t reg_id, int worker_id) {
  return impl_->DebugGetFromRemote(reg_id, worker_id);
}
void Session::DebugSetRegister(int64_t reg_id, const Any& value, int worker_id) {
  impl_->DebugSetRegister(reg_id, value, worker_id);
}
void Session::Shutdown() { impl_->Shutdown(0); }

void Session::InitCCL(const std::string& ccl, const std::vector<int64_t>& device_ids) {
  impl_->RefuseInCapture("InitCCL");
  std::string chosen = ccl;
  const char* forced = std::getenv("DISCO_CCL");
  if (forced != nullptr && *forced != '\0') chosen = env::GetString("DISCO_CCL");
  DISCO_CHECK(chosen == "auto" || chosen == "mpi" || chosen == "nccl", ValueError)
      << "InitCCL: unknown collective library '" << chosen << "'"
      << (forced != nullptr && *forced != '\0' ? " (from DISCO_CCL)" : "")
      << " (expected auto, mpi or nccl)";
  CallPacked(impl_->Builtin("disco.init_ccl"), chosen, Shape(device_ids));
  SyncAll();
}

namespace {
Any OrNone(const DRef& ref) { return ref.defined() ? Any(ref) : Any(); }

// A collective's DRefs: an empty one (a default DRef, Python's None) is named, not sent.
void CheckCollectiveRefs(const char* fn, const DRef& send, const DRef& recv) {
  DISCO_CHECK(send.defined(), ValueError) << fn << ": send is an empty DRef";
  DISCO_CHECK(recv.defined(), ValueError)
      << fn << ": recv is an empty DRef (for in place, pass the same DRef as send and recv)";
}
}  // namespace

DRef Session::AllReduce(const DRef& send, const std::string& op, bool in_group, const DRef& recv) {
  CheckCollectiveRefs("AllReduce", send, recv);
  return CallPacked(impl_->Builtin("disco.allreduce"), send, op, in_group, recv);
}
DRef Session::AllGather(const DRef& send, bool in_group, const DRef& recv) {
  CheckCollectiveRefs("AllGather", send, recv);
  return CallPacked(impl_->Builtin("disco.allgather"), send, in_group, recv);
}
DRef Session::ReduceScatter(const DRef& send, const std::string& op, bool in_group,
                            const DRef& recv) {
  CheckCollectiveRefs("ReduceScatter", send, recv);
  return CallPacked(impl_->Builtin("disco.reduce_scatter"), send, op, in_group, recv);
}
DRef Session::CopyToWorker0(const Tensor& host) {
  DISCO_CHECK(host.defined(), ValueError) << "CopyToWorker0 of an undefined tensor";
  DRef remote = Empty(host.shape(), host.dtype(), CPU(), /*worker0_only=*/true);
  CopyToWorker0(host, remote);
  return remote;
}

DRef Session::Broadcast(const Tensor& host, bool in_group) {
  DISCO_CHECK(host.defined(), ValueError) << "Broadcast of an undefined tensor";
  DRef out = Empty(host.shape(), host.dtype());
  CopyToWorker0(host, out);
  // Worker 0 holds the data: a broadcast over the world reaches every group's members alike.
  Broadcast(out, /*in_group=*/false, out);
  (void)in_group;
  return out;
}

DRef Session::Scatter(const Tensor& host, bool in_group) {
  DISCO_CHECK(host.defined() && host.ndim() >= 1, ValueError)
      << "Scatter needs a host tensor of at least one dimension";
  const int parts = in_group ? num_workers() / num_groups() : num_workers();
  DISCO_CHECK(host.shape()[0] % parts == 0, ValueError)
      << "Scatter: the first extent of " << host.shape().ToString() << " cannot be split into "
      << parts << " equal parts";
  std::vector<int64_t> dims(host.shape().begin(), host.shape().end());
  dims[0] /= parts;
  DRef out = Empty(Shape(dims), host.dtype());
  if (!in_group || num_groups() == 1) {
    DRef whole = CopyToWorker0(host);
    Scatter(whole, /*in_group=*/false, out);
    return out;
  }
  // Each group's first worker needs the whole tensor: worker 0 broadcasts it, then each group
  // scatters its copy.
  DRef whole = Broadcast(host, /*in_group=*/false);
  Scatter(whole, /*in_group=*/true, out);
  return out;
}

DRef Session::Broadcast(const DRef& send, bool in_group, const DRef& recv) {
  return CallPacked(impl_->Builtin("disco.broadcast_from_worker0"), OrNone(send), in_group, recv);
}
DRef Session::Scatter(const DRef& send, bool in_group, const DRef& recv) {
  return CallPacked(impl_->Builtin("disco.scatter_from_worker0"), OrNone(send), in_group, recv);
}
DRef Session::Gather(const DRef& send, bool in_group, const DRef& recv) {
  return CallPacked(impl_->Builtin("disco.gather_to_worker0"), send, in_group, OrNone(recv));
}
DRef Session::RecvFromWorker0(const DRef& buffer) {
  return CallPacked(impl_->Builtin("disco.recv_from_worker0"), buffer);
}
DRef Session::SendToNextGroup(const DRef& buffer) {
  return CallPacked(impl_->Builtin("disco.send_to_next_group"), buffer);
}
DRef Session::RecvFromPrevGroup(const DRef& buffer) {
  return CallPacked(impl_->Builtin("disco.recv_from_prev_group"), buffer);
}
DRef Session::ShiftToNextGroup(const DRef& send, const DRef& recv) {
  return CallPacked(impl_->Builtin("disco.shift_to_next_group"), send, recv);
}
DRef Session::SendToWorker(const DRef& buffer, int peer) {
  return CallPacked(impl_->Builtin("disco.send_to_worker"), buffer, peer);
}
DRef Session::RecvFromWorker(const DRef& buffer, int peer) {
  return CallPacked(impl_->Builtin("disco.recv_from_worker"), buffer, peer);
}
DRef Session::Barrier(bool in_group) {
  return CallPacked(impl_->Builtin("disco.barrier"), in_group);
}

DRef Session::Empty(const Shape& shape, DLDataType dtype, DLDevice device, bool worker0_only,
                    bool in_group) {
  return CallPacked(impl_->Builtin("disco.empty"), shape, dtype, device, worker0_only, in_group);
}

}  // namespace disco
