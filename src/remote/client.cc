// The client end of a remote session: a SessionBackend whose every action is one request and one
// answer over TCP (remote/rpc.h), DRefs naming registers the server holds for this client.
#include <disco/log.h>
#include <disco/remote.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "protocol/serializer.h"
#include "remote/key.h"
#include "remote/rpc.h"
#include "remote/socket.h"
#include "session/session_backend.h"

namespace disco {
namespace {

using remote::Op;

class RemoteSession final : public detail::SessionBackend {
 public:
  RemoteSession(remote::Socket sock, std::string where, const ConnectOptions& options)
      : sock_(std::move(sock)), where_(std::move(where)), options_(options) {
    Any limits[2] = {Any(static_cast<int64_t>(options_.max_reply_bytes)),
                     Any(static_cast<int64_t>(options_.chunk_bytes))};
    std::vector<Any> info = Request(Op::kInfo, limits, 2);
    DISCO_CHECK(info.size() == 3, ProtocolError)
        << "the server at " << where_ << " answered Info with " << info.size() << " values";
    workers_ = static_cast<int>(info[0].cast<int64_t>());
    groups_ = static_cast<int>(info[1].cast<int64_t>());
    server_max_packet_ = static_cast<size_t>(info[2].cast<int64_t>());
  }

  ~RemoteSession() override {
    Retire();  // DRefs dropped from here on (the builtins below) need no free request
    try {
      Detach();
    } catch (const std::exception& e) {
      DISCO_LOG(WARN) << "remote session " << where_ << ": " << e.what();
    }
  }

  int num_workers() const override { return workers_; }
  int num_groups() const override { return groups_; }

  DRef GetGlobalFunc(const std::string& name) override {
    Any operand(name);
    return ResultRef(Request(Op::kGetGlobalFunc, &operand, 1), "GetGlobalFunc");
  }

  DRef CallWithPacked(const DRef& func, const Any* args, size_t num_args, bool) override {
    DISCO_CHECK(func.defined(), ValueError) << "CallPacked of an empty DRef";
    std::vector<Any> operands;
    operands.reserve(num_args + 1);
    operands.emplace_back(func);
    for (size_t i = 0; i < num_args; ++i) operands.push_back(args[i]);
    CheckOwnRefs(operands.data(), operands.size(), "CallPacked");
    return ResultRef(Request(Op::kCall, operands.data(), operands.size()), "CallPacked");
  }

  void CopyToWorker0(const Tensor& host, const DRef& remote) override {
    RefuseInCapture("CopyToWorker0");
    Any operands[4] = {CheckCopy(host, remote, "CopyToWorker0"), Any(host.dtype()),
                       Any(host.shape()), Any(static_cast<int64_t>(host.nbytes()))};
    Exchange(Op::kCopyTo, operands, 4, &host);
  }

  void CopyFromWorker0(const Tensor& host, const DRef& remote) override {
    RefuseInCapture("CopyFromWorker0");
    Any operands[4] = {CheckCopy(host, remote, "CopyFromWorker0"), Any(host.dtype()),
                       Any(host.shape()), Any(static_cast<int64_t>(host.nbytes()))};
    Request(Op::kCopyFrom, operands, 4);
    Guard([&] {
      remote::RecvChunks(&sock_, host.data(), host.nbytes(), ChunkLimit(),
                         options_.reply_timeout_ms);
    });
  }

  void SyncWorker(int worker_id) override {
    RefuseInCapture("SyncWorker");
    Any operand(worker_id);
    Request(Op::kSyncWorker, &operand, 1);
  }

  void SyncAll() override {
    RefuseInCapture("SyncAll");
    Request(Op::kSyncAll, nullptr, 0);
  }

  Any DebugGetFromRemote(int64_t reg_id, int worker_id) override {
    RefuseInCapture("DebugGetFromRemote");
    Any operands[2] = {Any(reg_id), Any(worker_id)};
    std::vector<Any> results = Request(Op::kDebugGet, operands, 2);
    DISCO_CHECK(results.size() == 1, ProtocolError)
        << "the server answered DebugGetFromRemote with " << results.size() << " values";
    return std::move(results[0]);
  }

  void DebugSetRegister(int64_t reg_id, const Any& value, int worker_id) override {
    RefuseInCapture("DebugSetRegister");
    Any operands[3] = {Any(reg_id), Any(worker_id), value};
    CheckOwnRefs(operands + 2, 1, "DebugSetRegister");
    Request(Op::kDebugSet, operands, 3);
  }

  int Shutdown(int) override {
    RefuseInCapture("Shutdown");
    Detach();
    return 0;
  }

  /// Ends the served job (the connection closes with it).
  void ShutdownJob(int exit_code) {
    DISCO_CHECK(exit_code >= 0 && exit_code <= 255, ValueError)
        << "ShutdownRemoteJob: exit code " << exit_code
        << " is outside 0..255 (a process exit status would wrap it; 256 would read as success)";
    Any operand(exit_code);
    Request(Op::kShutdownJob, &operand, 1);
    ClearBuiltins();
    sock_.Close();
    closed_ = true;
  }

  void DeallocReg(int64_t reg) noexcept override {
    if (!closed_) frees_.push_back(reg);
  }

  // Capture and replay: the server records the calls made between begin and end (they travel as
  // usual), installs the graph in the job and keeps it for this client.
  std::vector<Any> BeginCapture(int num_inputs) override {
    RefuseInCapture("a nested Capture");
    Any n(static_cast<int64_t>(num_inputs));
    std::vector<Any> inputs;
    for (const Any& id : Request(Op::kCaptureBegin, &n, 1)) {
      inputs.push_back(Any(DRef::Unowned(id.cast<int64_t>())));
    }
    capturing_ = true;
    refused_in_capture_.clear();
    num_capture_inputs_ = num_inputs;
    return inputs;
  }
  Graph EndCapture(bool discard) override {
    DISCO_CHECK(capturing_, ValueError) << "EndCapture without a capture";
    capturing_ = false;
    if (discard || !refused_in_capture_.empty()) {
      Any yes(true);
      Request(Op::kCaptureEnd, &yes, 1);  // the server's ValueError: the capture was discarded
      DISCO_THROW(ValueError) << "Capture: "
                              << (refused_in_capture_.empty()
                                      ? std::string("the body raised")
                                      : "the body called " + refused_in_capture_ +
                                            ", which cannot be recorded")
                              << "; the capture was discarded";
    }
    Any no(false);
    std::vector<Any> r = Request(Op::kCaptureEnd, &no, 1);
    DISCO_CHECK(r.size() == 2, ProtocolError) << "the server answered Capture without a graph";
    auto state = std::make_shared<detail::GraphState>();
    state->session = generation();
    state->id = r[0].cast<int64_t>();
    state->num_inputs = num_capture_inputs_;
    state->num_calls = static_cast<size_t>(r[1].cast<int64_t>());
    return Graph(std::move(state));
  }
  void ReplayGraph(int64_t id, const std::vector<Any>& inputs) override {
    std::vector<Any> operands;
    operands.reserve(inputs.size() + 1);
    operands.push_back(Any(id));
    operands.insert(operands.end(), inputs.begin(), inputs.end());
    Request(Op::kReplayGraph, operands.data(), operands.size());
  }
  void FreeGraph(int64_t id) noexcept override {
    if (!closed_) graph_frees_.push_back(id);
  }
  void RefuseInCapture(const char* what) override {
    if (!capturing_) return;
    if (refused_in_capture_.empty()) refused_in_capture_ = what;
    DISCO_THROW(ValueError) << what
                            << " cannot be recorded in Session::Capture (only calls, collectives, "
                               "point-to-point and Empty can); the capture is discarded";
  }

 private:
  void Detach() {
    if (closed_) return;
    ClearBuiltins();
    try {
      if (!broken_) Request(Op::kDetach, nullptr, 0);
    } catch (const RuntimeError& e) {  // the server is gone: detached all the same
      DISCO_LOG(WARN) << "remote session " << where_ << ": detaching: " << e.what();
    }
    sock_.Close();
    closed_ = true;
  }

  void CheckOpen(Op op) const {
    DISCO_CHECK(!closed_, ValueError)
        << remote::OpName(op) << " after the remote session with " << where_ << " was shut down";
    DISCO_CHECK(!broken_, RuntimeError) << remote::OpName(op) << ": the connection to " << where_
                                        << " is broken (" << broken_why_ << ")";
  }

  // Runs socket I/O; a failure leaves the stream in an unknown state, so the connection is
  // marked broken and every later call says why.
  template <typename F>
  void Guard(F&& io) {
    try {
      io();
    } catch (const std::exception& e) {
      broken_ = true;
      broken_why_ = e.what();
      sock_.Close();
      DISCO_THROW(RuntimeError) << "remote session " << where_ << ": " << e.what();
    }
  }

  // Sends one request (with `upload`, the tensor's data follows as chunks, the first in the same
  // system call) and returns the answer's values; an error answer is thrown with its type.
  std::vector<Any> Exchange(Op op, const Any* operands, size_t n, const Tensor* upload) {
    CheckOpen(op);
    remote::EncodeRequest(&buf_, op, frees_, operands, n);
    DISCO_CHECK(op == Op::kInfo || buf_.size() + sizeof(uint64_t) <= server_max_packet_, ValueError)
        << remote::OpName(op) << ": a request of " << buf_.size()
        << " bytes exceeds the server's limit of " << server_max_packet_
        << " bytes (copy large tensors with CopyToWorker0)";
    Guard([&] {
      if (upload != nullptr) {
        remote::SendChunks(&sock_, upload->data(), upload->nbytes(), ChunkLimit(),
                           options_.reply_timeout_ms, &buf_);
      } else {
        remote::SendPacket(&sock_, buf_.data(), buf_.size(), options_.reply_timeout_ms);
      }
      frees_.clear();
      remote::RecvPacket(&sock_, &buf_, options_.max_reply_bytes, options_.reply_timeout_ms);
    });
    std::vector<Any> values = remote::DecodeReply(buf_.data(), buf_.size());
    buf_.ReleaseAbove(protocol::kKeepBufferBytes);  // the values own their data
    return values;
  }

  std::vector<Any> Request(Op op, const Any* operands, size_t n) {
    if (op != Op::kFreeGraph) FlushGraphFrees();
    return Exchange(op, operands, n, /*upload=*/nullptr);
  }

  // Graphs freed since the last request go out in one request of their own first.
  void FlushGraphFrees() {
    if (graph_frees_.empty() || closed_ || broken_) return;
    std::vector<Any> ids;
    for (int64_t id : graph_frees_) ids.push_back(Any(id));
    graph_frees_.clear();
    Request(Op::kFreeGraph, ids.data(), ids.size());
  }

  DRef ResultRef(const std::vector<Any>& results, const char* what) {
    DISCO_CHECK(results.size() == 1 && results[0].type_code() == TypeCode::kInt, ProtocolError)
        << "the server answered " << what << " without a register id";
    return DRef::Make(results[0].cast<int64_t>(), generation());
  }

  void CheckOwnRefs(const Any* values, size_t n, const char* what) const {
    for (size_t i = 0; i < n; ++i) {
      if (values[i].type_code() != TypeCode::kDRef) continue;
      DRef ref = values[i].cast<DRef>();
      if (detail::PlaceholderIndex(values[i]) >= 0) continue;  // a capture's input
      DISCO_CHECK(!ref.defined() || ref.session() == generation(), ValueError)
          << what << ": argument " << i << " is DRef(" << ref.reg_id()
          << ") of another session, not of the remote session with " << where_;
    }
  }

  Any CheckCopy(const Tensor& host, const DRef& remote, const char* what) const {
    DISCO_CHECK(remote.defined(), ValueError) << what << " with an empty DRef";
    DISCO_CHECK(remote.session() == generation(), ValueError)
        << what << ": DRef(" << remote.reg_id() << ") belongs to another session";
    DISCO_CHECK(host.defined() && memory::IsHost(host.device()), ValueError)
        << what << ": a remote session copies host tensors only, got "
        << (host.defined() ? DeviceToString(host.device()) : std::string("an undefined tensor"));
    return Any(remote);
  }

  size_t ChunkLimit() const { return std::min(options_.chunk_bytes, server_max_packet_); }

  remote::Socket sock_;
  std::string where_;
  ConnectOptions options_;
  int workers_ = 0;
  int groups_ = 0;
  size_t server_max_packet_ = 1 << 20;
  protocol::ByteBuffer buf_;
  std::vector<int64_t> frees_;
  std::vector<int64_t> graph_frees_;
  bool capturing_ = false;          // between a capture's begin and end
  std::string refused_in_capture_;  // the first call of its body that cannot be recorded
  int num_capture_inputs_ = 0;
  bool closed_ = false;
  bool broken_ = false;
  std::string broken_why_;
};

}  // namespace

Session Connect(const std::string& host, int port, const std::string& key,
                const ConnectOptions& options) {
  std::string where = host + ":" + std::to_string(port);
  std::string source;
  const std::string the_key = remote::ClientKey(key, options.key_file, port, &source);
  // A refused key may be a stale key file: one that a server on this port wrote earlier.
  std::string about_key = " (" + source + ")";
  if (source.compare(0, 12, "the key file") == 0) {
    about_key = " (" + source + " may be stale: left by an earlier server on this port, or " +
                "written by another server than this one)";
  }
  static const std::string kOtherVersion =
      " (the server speaks another version of the remote protocol than this client's " +
      std::to_string(remote::kRemoteVersion) + ": use a client and server of one disco release)";
  remote::Socket sock;
  remote::HandshakeCode code;
  try {
    sock = remote::Socket::Connect(host, port, options.connect_timeout_ms);
    code = remote::ClientHello(&sock, the_key, options.connect_timeout_ms);
  } catch (const Error& e) {
    const bool proof = std::string(e.what()).find("did not prove") != std::string::npos;
    DISCO_THROW(RuntimeError) << "cannot attach to the disco server at " << where << ": "
                              << e.what() << (proof ? about_key : std::string());
  }
  DISCO_CHECK(code == remote::HandshakeCode::kOk, RuntimeError)
      << "the disco server at " << where
      << " refused the connection: " << remote::HandshakeCodeName(code)
      << (code == remote::HandshakeCode::kBadKey ? about_key : std::string())
      << (code == remote::HandshakeCode::kBadVersion ? kOtherVersion : "");
  return Session(std::make_shared<RemoteSession>(std::move(sock), where, options));
}

void ShutdownRemoteJob(Session& session, int exit_code) {
  auto* remote = dynamic_cast<RemoteSession*>(session.backend());
  DISCO_CHECK(remote != nullptr, ValueError)
      << "ShutdownRemoteJob needs a session from disco::Connect";
  remote->ShutdownJob(exit_code);
}

}  // namespace disco
