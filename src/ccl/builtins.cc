// The collective builtins: argument checks, agreement, dispatch to the backend.
//
// Checks that depend only on the command (op name, flags, peer ids) fail the same way on every
// rank. Checks that depend on the tensors in registers may not: before moving data, the ranks of
// a collective agree (one small maximum over the ranks: Communicator::HostMax) on whether every
// rank passed, on the element count and on the dtype, so a bad tensor on one rank is an error on
// all of them.
#include "ccl/builtins.h"

#include <disco/ccl.h>
#include <disco/function.h>
#include <disco/worker.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>

#include "ccl/context.h"
#include "ccl/nccl/peers.h"
#include "ccl/reduce.h"
#include "core/call_context.h"
#include "core/device_memory.h"
#include "core/launcher.h"
#include "core/wait_record.h"
#include "mpi/mpi_util.h"

namespace disco {
namespace ccl {
namespace {

// The communicator of the backend InitCCL chose; its ranks agree on every collective.
Communicator& Comm(bool in_group, const char* fn) {
  Context* ctx = CurrentContext();
  DISCO_CHECK(ctx != nullptr, ValueError)
      << fn << ": collectives need Session::InitCCL first (no communicator on worker "
      << ThisWorker().worker_id << ")";
  wait_record::InCollective(fn);  // the watchdog's hang verdict: this rank is in a collective
  return in_group ? *ctx->group : *ctx->world;
}

// The communicator that moves `t`: the backend's, or under InitCCL("auto") with NCCL, the MPI
// one when `t` is in host memory. The ranks agree on the choice (Extent::location).
Communicator& DataComm(bool in_group, const char* fn, const Tensor& t) {
  Communicator& c = Comm(in_group, fn);
  Context* ctx = CurrentContext();
  Communicator* host = in_group ? ctx->host_group.get() : ctx->host_world.get();
  return host != nullptr && t.defined() && memory::IsHost(t.device()) ? *host : c;
}

// Tensor arguments arrive as Any and are converted here, not by the typed wrapper: a register that
// holds None (or anything else) on one worker must fail inside the agreed checks, or that worker
// would leave before agreeing and the others would wait for it forever.
std::optional<Tensor> OptionalTensorOf(const Any& a) {
  const Tensor* t = std::get_if<Tensor>(&a.storage());
  return t != nullptr ? std::optional<Tensor>(*t) : std::nullopt;
}
Tensor TensorOf(const Any& a) { return OptionalTensorOf(a).value_or(Tensor()); }

void CheckTensor(const Tensor& t, const Communicator& c, const char* fn, const char* arg) {
  DISCO_CHECK(t.defined(), TypeError)
      << fn << ": argument '" << arg << "' is not a tensor on worker " << ThisWorker().worker_id;
  DISCO_CHECK(IsCollectiveDType(t.dtype()), TypeError)
      << fn << ": argument '" << arg << "' has dtype " << DataTypeToString(t.dtype())
      << ", which collectives do not support (int8..int64, uint8..uint64, float16, bfloat16, "
         "float32, float64)";
  DISCO_CHECK(c.SupportsDType(t.dtype()), TypeError)
      << fn << ": argument '" << arg << "' has dtype " << DataTypeToString(t.dtype())
      << ", which the " << c.backend() << " backend cannot move (int16 and uint16 need mpi)";
  DLDevice want = c.device();
  bool ok = c.device().device_type == kDLCPU ? memory::IsHost(t.device()) : t.device() == want;
  DISCO_CHECK(ok, ValueError) << fn << ": argument '" << arg << "' is a " << t.ToString()
                              << ", but the " << c.backend() << " backend works on "
                              << (want.device_type == kDLCPU ? std::string("host tensors")
                                                             : DeviceToString(want) + " tensors");
}

// A lone send or receive (disco.send_to_worker / recv_from_worker) only between peers the backend
// connected at InitCCL. NCCL would connect any other pair inside the call, blocking this worker
// until the peer posts its side, which may come in a later command or never (a hang of the control
// plane). Both peers compute the same verdict from the world's shape alone (ccl/nccl/peers.h), so
// a send refused here is refused on the receiving side too: neither waits for the other.
void CheckPreConnected(const Communicator& c, const char* fn, int peer) {
  DISCO_CHECK(c.PreConnected(peer), ValueError)
      << fn << ": workers " << c.rank() << " and " << peer << " are not connected point to point: "
      << "with " << c.size() << " workers (more than " << kConnectAllMax << ") the " << c.backend()
      << " backend connects only ring neighbours and the same worker of the next and previous "
      << "group at InitCCL, and a lone send or receive to another peer would block both workers "
      << "until the other half came. Use disco.sendrecv(send, dest, recv, source) instead: every "
      << "worker calls it in one command (-1 for no peer), and its halves run as one grouped "
      << "operation, which connects any pair safely";
}

// What the ranks agree on about the tensor that sizes the transfer: its element count, its dtype
// (-1 for a missing tensor) and the backend that moves it. Equal counts of different dtypes would
// move different byte counts, and two backends would never meet: no backend can recover from it.
struct Extent {
  int64_t count = -1;
  int64_t dtype = -1;
  int64_t location = -1;
};
Extent ExtentOf(const Tensor& t, const Communicator& data) {
  if (!t.defined()) return {};
  DLDataType d = t.dtype();
  return {t.numel(), (int64_t{d.code} << 24) | (int64_t{d.bits} << 16) | d.lanes,
          static_cast<int64_t>(data.device().device_type)};
}

void CheckSameDType(const Tensor& a, const char* an, const Tensor& b, const char* bn,
                    const char* fn) {
  DISCO_CHECK(a.dtype() == b.dtype(), TypeError)
      << fn << ": dtype mismatch: '" << an << "' is " << DataTypeToString(a.dtype()) << ", '" << bn
      << "' is " << DataTypeToString(b.dtype());
}

// Both tensors present, supported, on the backend's device, of one dtype.
void CheckSendRecv(const Tensor& send, const Tensor& recv, const Communicator& c, const char* fn) {
  CheckTensor(send, c, fn, "send");
  CheckTensor(recv, c, fn, "recv");
  CheckSameDType(send, "send", recv, "recv", fn);
}

void CheckOp(ReduceOp op, DLDataType dtype, const char* fn) {
  DISCO_CHECK(ReduceOpSupports(op, dtype), ValueError)
      << fn << ": op '" << ReduceOpName(op) << "' is not defined for " << DataTypeToString(dtype)
      << " (avg needs a floating-point dtype)";
}

// On the root: `rooted` is given, of `other`'s dtype, with `factor` times its elements.
void CheckRootTensor(const std::optional<Tensor>& rooted, const char* rooted_name,
                     const Tensor& other, const char* other_name, int64_t factor,
                     const Communicator& c, const char* fn) {
  DISCO_CHECK(rooted.has_value(), ValueError)
      << fn << ": the root worker needs a '" << rooted_name << "' tensor, got None or a non-tensor";
  CheckTensor(*rooted, c, fn, rooted_name);
  CheckSameDType(*rooted, rooted_name, other, other_name, fn);
  DISCO_CHECK(rooted->numel() == other.numel() * factor, ValueError)
      << fn << ": '" << rooted_name << "' has " << rooted->numel() << " elements; it needs "
      << other.numel() * factor
      << (factor == 1 ? std::string(" (as many as '") + other_name + "')"
                      : " (" + std::to_string(factor) + " workers x '" + other_name + "' of " +
                            std::to_string(other.numel()) + ")");
}

// The builtin the running command called, and which of its arguments hold tensors: together
// with the registers' versions they name the collective's metadata the same way on every worker.
struct Agreement {
  const FunctionObj* self = nullptr;  // this builtin's registered function
  std::vector<int> tensor_args;       // argument positions of its tensors (at most 2)
  // Its checks read the same things on every rank (no root-only checks), so tensors of uniform
  // metadata pass or fail them alike everywhere and need no agreement round.
  bool same_checks_everywhere = true;
};

// A key for the collective now running; `valid` is false when it cannot be cached: the builtin was
// called from another function (not as the command itself), or a tensor came by value.
AgreedKey MakeKey(const Agreement& a, int64_t extra) {
  AgreedKey key;
  const CallOrigins& origins = detail::CurrentCallOrigins();
  if (a.self == nullptr || origins.function != a.self) return key;
  key.self = a.self;
  key.extra = extra;
  key.uniform = true;
  for (size_t i = 0; i < a.tensor_args.size() && i < 2; ++i) {
    int pos = a.tensor_args[i];
    if (pos >= static_cast<int>(origins.args.size()) || origins.args[pos].reg == 0) return key;
    key.reg[i] = origins.args[pos].reg;
    key.version[i] = origins.args[pos].version;
    key.fingerprint[i] = origins.args[pos].fingerprint;
    key.uniform = key.uniform && origins.args[pos].uniform;
  }
  key.valid = true;
  return key;
}

// Runs the checks; the ranks of `c` then agree (`data` is the communicator that will move the
// tensors). Every rank throws when any rank failed: the failing ranks their own error, the others
// one that points at them. A collective whose key already passed skips both (its tensors'
// metadata cannot have changed since). One whose tensors the controller made alike on every
// worker (key.uniform: disco.empty with arguments by value) skips the round: the checks, which
// read nothing but that metadata and the command, pass or fail alike on every rank.
//
// An argument that did not resolve on this worker (CallOrigins::arg_failure: its register holds an
// earlier failure here, perhaps not elsewhere) is this worker's error in the round, so that it is
// an error on every worker. Where the others skip the round (a key agreed before, or uniform
// tensors: decided from the command, the same everywhere), this worker cannot tell them: it ends
// the job rather than leave them waiting in the data movement.
void CheckAndAgree(Communicator& c, const Communicator& data, const char* fn, const Tensor& sizing,
                   const Agreement& a, int64_t extra, const std::function<void()>& checks) {
  Context* ctx = CurrentContext();
  AgreedKey key = MakeKey(a, extra);
  std::string arg_failure;
  if (a.self != nullptr && detail::CurrentCallOrigins().function == a.self) {
    CallOrigins& origins = detail::MutableCallOrigins();
    arg_failure = origins.arg_failure;
    origins.arg_failure_taken = !arg_failure.empty();
  }
  auto agreed = key.valid ? ctx->agreed.find(key) : ctx->agreed.end();
  const bool cached = agreed != ctx->agreed.end();
  const bool skip = cached || (key.valid && key.uniform && a.same_checks_everywhere);
  const CallOrigins& origins = detail::CurrentCallOrigins();
  const std::string where = origins.replay_call != nullptr ? " (" + *origins.replay_call + ")" : "";
  if (skip && !arg_failure.empty()) {
    EndJobWithError(std::string(fn) + where + " on worker " +
                    std::to_string(ThisWorker().worker_id) + ": " + arg_failure +
                    ". The other workers skip the agreement round for tensors that disco.empty "
                    "made alike everywhere (or that they agreed on before: at an earlier "
                    "replay, for a graph's tensors), so they are already moving data and this "
                    "worker cannot join them");
  }
  if (cached) {
    // The key names the same registers at the same versions, or a graph's registers that every
    // replay writes anew: their tensors must be what this worker agreed with.
    if (agreed->second[0] != key.fingerprint[0] || agreed->second[1] != key.fingerprint[1]) {
      EndJobWithError(
          std::string(fn) + where + " on worker " + std::to_string(ThisWorker().worker_id) +
          ": its tensors' shape, dtype or device changed since the workers agreed on them at an "
          "earlier replay (a graph's collectives keep their tensors' metadata at every replay, "
          "as CUDA graphs do: capture one graph per shape). The other workers skip the "
          "agreement round, so they are already moving data and this worker cannot join them");
    }
    return;
  }
  if (skip) {
    checks();
    return;
  }
  std::exception_ptr local;
  if (!arg_failure.empty()) {
    local = std::make_exception_ptr(ValueError(arg_failure));
  } else {
    try {
      checks();
    } catch (const Error&) {
      local = std::current_exception();
    }
  }
  const Extent e = ExtentOf(sizing, data);
  int64_t all[] = {local ? 1 : 0, e.count, -e.count, e.dtype, -e.dtype, e.location, -e.location};
  static_assert(sizeof all / sizeof all[0] == kAgreementValues, "the agreement's values");
  ++ctx->agreement_rounds;
  c.HostMax(all, kAgreementValues);
  if (local) std::rethrow_exception(local);
  DISCO_CHECK(all[0] == 0, ValueError)
      << fn << ": another worker of this collective rejected its arguments (its error says why); "
      << "nothing was sent";
  DISCO_CHECK(all[1] == -all[2], ValueError)
      << fn << ": the workers of this collective disagree on the element count (from " << -all[2]
      << " to " << all[1] << "); nothing was sent";
  DISCO_CHECK(all[3] == -all[4], TypeError)
      << fn << ": the workers of this collective disagree on the dtype (this worker has "
      << DataTypeToString(sizing.dtype()) << "); nothing was sent";
  DISCO_CHECK(all[5] == -all[6], ValueError)
      << fn << ": some workers of this collective hold host tensors and others device tensors "
      << "(this worker: " << sizing.ToString() << "); nothing was sent";
  if (key.valid) {
    if (ctx->agreed.size() >= kMaxAgreedKeys) ctx->agreed.clear();
    ctx->agreed[key] = {key.fingerprint[0], key.fingerprint[1]};
  }
}

// The builtin failed before its agreement round while an argument had failed on this worker
// (CallOrigins::arg_failure, not taken by a round). Before the round a builtin reads its tensors
// only into variables (TensorOf): what fails there is the command's (arity, the op's type or name)
// or InitCCL's, alike on every worker, so none is in the round waiting for this one -- unless
// another argument came from a register (an op, a flag), whose value may differ between workers.
// Alike: this worker raises its argument's failure (the others their own error) and the session
// goes on; else Worker::CallPacked ends the job.
void SettleFailureBeforeTheRound(const Agreement& a) {
  if (detail::CurrentCallOrigins().function != a.self) return;  // not the command itself
  CallOrigins& origins = detail::MutableCallOrigins();
  if (origins.arg_failure.empty() || origins.arg_failure_taken) return;
  for (size_t i = 0; i < origins.args.size(); ++i) {
    const bool tensor = std::find(a.tensor_args.begin(), a.tensor_args.end(),
                                  static_cast<int>(i)) != a.tensor_args.end();
    if (!tensor && origins.args[i].reg != 0) return;
  }
  origins.arg_failure_taken = true;
  throw ValueError(origins.arg_failure);
}

// Registers a collective builtin whose tensor arguments sit at `tensor_args`; the body receives
// the Agreement to pass to CheckAndAgree.
template <typename F>
void RegisterCollective(const std::string& name, std::vector<int> tensor_args,
                        std::vector<std::string> params, F make_body, bool rooted = false) {
  auto* agreement = new Agreement();  // lives as long as the registry entry
  agreement->tensor_args = std::move(tensor_args);
  agreement->same_checks_everywhere = !rooted;
  Registry& entry = Registry::Register(name, true);
  entry.set_body_typed(make_body(agreement), std::move(params));
  PackedBody typed = Registry::Get(name).get()->body;  // with the arity and type checks
  entry
      .set_body_packed([typed, agreement](const Args& args, Any* rv) {
        try {
          typed(args, rv);
        } catch (...) {
          SettleFailureBeforeTheRound(*agreement);
          throw;
        }
      })
      .mark_collective();
  agreement->self = Registry::Get(name).get().get();
}

int Root(bool in_group) { return 0; }  // the first worker of the world or of the group

// disco.broadcast_from_worker0 and disco.scatter_from_worker0: the root's `send` holds recv's
// elements once (broadcast) or once per member (scatter); every member receives `recv`.
void RegisterFromRoot(const char* fn, bool scatter) {
  RegisterCollective(
      fn, {0, 2}, {"send", "in_group", "recv"},
      [fn, scatter](const Agreement* agreement) {
        return [agreement, fn, scatter](Any send_arg, bool in_group, Any recv_arg) {
          std::optional<Tensor> send = OptionalTensorOf(send_arg);
          Tensor recv = TensorOf(recv_arg);
          Communicator& agree = Comm(in_group, fn);
          Communicator& c = DataComm(in_group, fn, recv);
          bool root = c.rank() == Root(in_group);
          CheckAndAgree(agree, c, fn, recv, *agreement, in_group, [&] {
            CheckTensor(recv, c, fn, "recv");
            if (root) CheckRootTensor(send, "send", recv, "recv", scatter ? c.size() : 1, c, fn);
          });
          if (scatter) {
            c.Scatter(send.value_or(Tensor()), recv, Root(in_group));
          } else {
            c.Broadcast(send.value_or(Tensor()), recv, Root(in_group));
          }
        };
      },
      /*rooted=*/true);
}

// The reductions and gathers over a group (or the world), each with its agreement round.
void RegisterReductions() {
  Registry::Register("disco.init_ccl", true)
      .set_body_typed([](std::string ccl, Shape device_ids) { Init(ccl, device_ids.dims()); },
                      {"ccl", "device_ids"});

  RegisterCollective("disco.allreduce", {0, 3}, {"send", "op", "in_group", "recv"},
                     [](const Agreement* agreement) {
                       return [agreement](Any send_arg, std::string op_name, bool in_group,
                                          Any recv_arg) {
                         Tensor send = TensorOf(send_arg);
                         Tensor recv = TensorOf(recv_arg);
                         const char* fn = "disco.allreduce";
                         Communicator& agree = Comm(in_group, fn);
                         Communicator& c = DataComm(in_group, fn, send);
                         // The op name is the same on every worker: a bad one fails everywhere
                         // alike.
                         ReduceOp op = ParseReduceOp(op_name);
                         CheckAndAgree(agree, c, fn, send, *agreement,
                                       static_cast<int64_t>(op) * 2 + in_group, [&] {
                                         CheckSendRecv(send, recv, c, fn);
                                         DISCO_CHECK(send.numel() == recv.numel(), ValueError)
                                             << fn << ": 'send' has " << send.numel()
                                             << " elements, 'recv' " << recv.numel();
                                         CheckOp(op, send.dtype(), fn);
                                       });
                         c.AllReduce(send, recv, op);
                       };
                     });

  RegisterCollective(
      "disco.allgather", {0, 2}, {"send", "in_group", "recv"}, [](const Agreement* agreement) {
        return [agreement](Any send_arg, bool in_group, Any recv_arg) {
          Tensor send = TensorOf(send_arg);
          Tensor recv = TensorOf(recv_arg);
          const char* fn = "disco.allgather";
          Communicator& agree = Comm(in_group, fn);
          Communicator& c = DataComm(in_group, fn, send);
          CheckAndAgree(agree, c, fn, send, *agreement, in_group, [&] {
            CheckSendRecv(send, recv, c, fn);
            DISCO_CHECK(recv.numel() == send.numel() * c.size(), ValueError)
                << fn << ": 'recv' has " << recv.numel() << " elements; it needs " << c.size()
                << " x " << send.numel() << " = " << send.numel() * c.size();
          });
          c.AllGather(send, recv);
        };
      });

  RegisterCollective(
      "disco.reduce_scatter", {0, 3}, {"send", "op", "in_group", "recv"},
      [](const Agreement* agreement) {
        return [agreement](Any send_arg, std::string op_name, bool in_group, Any recv_arg) {
          Tensor send = TensorOf(send_arg);
          Tensor recv = TensorOf(recv_arg);
          const char* fn = "disco.reduce_scatter";
          Communicator& agree = Comm(in_group, fn);
          Communicator& c = DataComm(in_group, fn, send);
          // The op name is the same on every worker: a bad one fails everywhere alike.
          ReduceOp op = ParseReduceOp(op_name);
          CheckAndAgree(
              agree, c, fn, send, *agreement, static_cast<int64_t>(op) * 2 + in_group, [&] {
                CheckSendRecv(send, recv, c, fn);
                DISCO_CHECK(send.numel() % c.size() == 0, ValueError)
                    << fn << ": 'send' has " << send.numel() << " elements, which the " << c.size()
                    << " workers cannot share equally";
                DISCO_CHECK(recv.numel() == send.numel() / c.size(), ValueError)
                    << fn << ": 'recv' has " << recv.numel() << " elements; it needs "
                    << send.numel() / c.size() << " (" << send.numel() << " / " << c.size() << ")";
                CheckOp(op, send.dtype(), fn);
              });
          c.ReduceScatter(send, recv, op);
        };
      });
}

// The collectives rooted at worker 0 (of the group), and the barrier.
void RegisterRooted() {
  RegisterFromRoot("disco.broadcast_from_worker0", /*scatter=*/false);
  RegisterFromRoot("disco.scatter_from_worker0", /*scatter=*/true);

  RegisterCollective(
      "disco.gather_to_worker0", {0, 2}, {"send", "in_group", "recv"},
      [](const Agreement* agreement) {
        return [agreement](Any send_arg, bool in_group, Any recv_arg) {
          Tensor send = TensorOf(send_arg);
          std::optional<Tensor> recv = OptionalTensorOf(recv_arg);
          const char* fn = "disco.gather_to_worker0";
          Communicator& agree = Comm(in_group, fn);
          Communicator& c = DataComm(in_group, fn, send);
          bool root = c.rank() == Root(in_group);
          CheckAndAgree(agree, c, fn, send, *agreement, in_group, [&] {
            CheckTensor(send, c, fn, "send");
            if (root) CheckRootTensor(recv, "recv", send, "send", c.size(), c, fn);
          });
          c.Gather(send, recv.value_or(Tensor()), Root(in_group));
        };
      },
      /*rooted=*/true);

  RegisterCollective("disco.recv_from_worker0", {0}, {"buffer"}, [](const Agreement* agreement) {
    return [agreement](Any buffer_arg) {
      Tensor buffer = TensorOf(buffer_arg);
      const char* fn = "disco.recv_from_worker0";
      Communicator& agree = Comm(false, fn);
      Communicator& c = DataComm(false, fn, buffer);
      CheckAndAgree(agree, c, fn, buffer, *agreement, 0,
                    [&] { CheckTensor(buffer, c, fn, "buffer"); });
      c.Broadcast(buffer, buffer, 0);
    };
  });

  Registry::Register("disco.barrier", true)
      .set_body_typed([](bool in_group) { Comm(in_group, "disco.barrier").Barrier(); },
                      {"in_group"})
      .mark_collective();
}

// A peer of a point-to-point call: a worker other than this one (or -1, none, when `may_skip`).
void CheckPeer(const char* fn, int64_t peer, bool may_skip) {
  const WorkerInfo& w = ThisWorker();
  if (may_skip && peer == -1) return;
  DISCO_CHECK(peer >= 0 && peer < w.num_workers, ValueError)
      << fn << ": peer " << peer << " is out of range [0, " << w.num_workers << ")"
      << (may_skip ? " (-1: none)" : "");
  DISCO_CHECK(peer != w.worker_id, ValueError)
      << fn << ": worker " << w.worker_id << " cannot exchange with itself";
}

// Both halves at once; `send` is read only when dest >= 0, `recv` written only when source >= 0.
void SendRecv(const char* fn, const Any& send_arg, int dest, const Any& recv_arg, int source) {
  Tensor send = TensorOf(send_arg), recv = TensorOf(recv_arg);
  Communicator& c = DataComm(false, fn, dest >= 0 ? send : recv);
  if (dest >= 0) CheckTensor(send, c, fn, "send");
  if (source >= 0) CheckTensor(recv, c, fn, "recv");
  c.SendRecv(send, dest, recv, source);
}

// Point to point: global worker ids on the world communicator. A send returns without waiting
// for its receiver, so a send and the matching receive may be separate commands; the sends are
// marked collective so that worker 0 runs one only once the controller's next frame (which
// normally carries the matching receive) is out: NCCL's send may block the host until the
// receiver posts its receive, and that frame must not wait for worker 0. A function that both
// sends and receives uses disco.sendrecv or disco.shift_to_next_group (one operation), never a
// send then a receive.
void RegisterPointToPoint() {
  for (bool is_send : {true, false}) {
    const char* fn = is_send ? "disco.send_to_worker" : "disco.recv_from_worker";
    Registry& entry = Registry::Register(fn, true).set_body_typed(
        [fn, is_send](Tensor buffer, int64_t peer) {
          Communicator& c = DataComm(false, fn, buffer);
          CheckPeer(fn, peer, false);
          CheckPreConnected(c, fn, static_cast<int>(peer));
          CheckTensor(buffer, c, fn, "buffer");
          if (is_send) {
            c.Send(buffer, static_cast<int>(peer));
          } else {
            wait_record::WaitingFor(static_cast<int>(peer));
            c.Recv(buffer, static_cast<int>(peer));
          }
        },
        {"buffer", "peer"});
    if (is_send) entry.mark_collective();
  }
  Registry::Register("disco.send_to_next_group", true)
      .set_body_typed(
          [](Tensor buffer) {
            const char* fn = "disco.send_to_next_group";
            Communicator& c = DataComm(false, fn, buffer);
            CheckTensor(buffer, c, fn, "buffer");
            const WorkerInfo& w = ThisWorker();
            int group_size = w.num_workers / w.num_groups;
            if (w.group_id + 1 < w.num_groups) c.Send(buffer, w.worker_id + group_size);
          },
          {"buffer"})
      .mark_collective();
  Registry::Register("disco.recv_from_prev_group", true)
      .set_body_typed(
          [](Tensor buffer) {
            const char* fn = "disco.recv_from_prev_group";
            Communicator& c = DataComm(false, fn, buffer);
            CheckTensor(buffer, c, fn, "buffer");
            const WorkerInfo& w = ThisWorker();
            int group_size = w.num_workers / w.num_groups;
            if (w.group_id > 0) c.Recv(buffer, w.worker_id - group_size);
          },
          {"buffer"});
  Registry::Register("disco.sendrecv", true)
      .set_body_typed(
          [](Any send, int64_t dest, Any recv, int64_t source) {
            const char* fn = "disco.sendrecv";
            CheckPeer(fn, dest, true);
            CheckPeer(fn, source, true);
            SendRecv(fn, send, static_cast<int>(dest), recv, static_cast<int>(source));
          },
          {"send", "dest", "recv", "source"})
      .mark_collective();
  Registry::Register("disco.shift_to_next_group", true)
      .set_body_typed(
          [](Any send, Any recv) {
            const WorkerInfo& w = ThisWorker();
            int group_size = w.num_workers / w.num_groups;
            int dest = w.group_id + 1 < w.num_groups ? w.worker_id + group_size : -1;
            int source = w.group_id > 0 ? w.worker_id - group_size : -1;
            SendRecv("disco.shift_to_next_group", send, dest, recv, source);
          },
          {"send", "recv"})
      .mark_collective();
}

}  // namespace

void RegisterCclBuiltins() {
  static std::once_flag once;
  std::call_once(once, [] {
    RegisterReductions();
    RegisterRooted();
    RegisterPointToPoint();
  });
}

}  // namespace ccl

// The caller guarantees the same metadata on every worker (disco/ccl.h): the checks below read
// only metadata, so they fail on every worker or on none, and no agreement round is needed.
void AllReduceInFunction(const Tensor& send, const Tensor& recv, ReduceOp op, bool in_group) {
  const char* fn = "disco::AllReduceInFunction";
  ccl::Communicator& c = ccl::DataComm(in_group, fn, send);
  ccl::CheckSendRecv(send, recv, c, fn);
  DISCO_CHECK(send.numel() == recv.numel(), ValueError)
      << fn << ": 'send' has " << send.numel() << " elements, 'recv' " << recv.numel();
  ccl::CheckOp(op, send.dtype(), fn);
  c.AllReduceQueued(send, recv, op);
}
}  // namespace disco
