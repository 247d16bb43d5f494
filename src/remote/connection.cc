// One attached client of disco::Serve (connection.h): its request loop, and one method per kind of
// request.
#include "remote/connection.h"

#include <disco/log.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "core/device_memory.h"
#include "core/trace.h"
#include "protocol/graph.h"

namespace disco {
namespace remote {
namespace {

// The most a refused CopyToWorker0 is read (and dropped) to keep the stream in step.
constexpr size_t kMaxDrainBytes = size_t{64} << 20;
// A client silent this long parks the workers; so does a copy of this many bytes or more (it
// keeps rank 0 on the socket for milliseconds, while workers would spin for the next frame).
constexpr int kParkAfterMs = 20;
constexpr size_t kParkForCopyBytes = size_t{1} << 20;

}  // namespace

// Runs `f`; its failure (a socket's, inside a request) ends the connection.
template <typename F>
void ClientConnection::Io(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    throw IoError(e.what());
  }
}

ClientConnection::ClientConnection(Session* session, Socket sock, const ServeOptions& options,
                                   std::function<void()> release)
    : session_(session),
      impl_(session->impl()),
      sock_(std::move(sock)),
      peer_(sock_.PeerName()),
      options_(options),
      release_(std::move(release)) {}

ClientConnection::~ClientConnection() {
  CleanUp();
  Release();
  DISCO_LOG(INFO) << "disco-serve: client " << peer_ << " detached";
}

bool ClientConnection::Serve(int* exit_code) {
  for (;;) {
    const int idle_ms = options_.idle_timeout_s > 0 ? options_.idle_timeout_s * 1000 : -1;
    try {
      // A client that pauses: workers park (sleep instead of spinning) until its next request.
      const int first_ms = idle_ms < 0 ? kParkAfterMs : std::min(kParkAfterMs, idle_ms);
      bool ready = sock_.WaitReadable(first_ms);
      if (!ready) {
        if (!impl_->capturing()) impl_->ParkWorkers();  // (a capture sends them nothing)
        ready = sock_.WaitReadable(idle_ms < 0 ? -1 : idle_ms - first_ms);
      }
      if (!ready) {
        DISCO_LOG(WARN) << "disco-serve: client " << peer_ << " idle for "
                        << options_.idle_timeout_s << " s: disconnected";
        return false;
      }
      RecvPacket(&sock_, &in_, options_.max_packet_bytes, options_.request_timeout_ms);
    } catch (const std::exception& e) {
      // A closed, slow or lying peer: the stream cannot be trusted past this point.
      DISCO_LOG(WARN) << "disco-serve: client " << peer_ << " dropped: " << e.what();
      return false;
    }
    try {
      Handle();
    } catch (const std::exception& e) {
      DISCO_LOG(WARN) << "disco-serve: client " << peer_ << " dropped: " << e.what();
      return false;
    }
    if (stop_) {
      *exit_code = exit_code_;
      return end_job_;
    }
  }
}

/// Lets the next client in, once: after a detach has done so, the next client may already be
/// attached, and a second release would let a third in beside it.
void ClientConnection::Release() {
  if (released_) return;
  released_ = true;
  release_();
}

/// Frees the client's registers on every worker and settles the errors it never observed.
void ClientConnection::CleanUp() {
  if (cleaned_up_) return;
  cleaned_up_ = true;
  if (impl_ != nullptr && impl_->capturing()) {
    try {
      impl_->EndCapture(/*discard=*/true);
    } catch (const std::exception&) {
      // the client left in the middle of a capture: discarded, as it must be
    }
  }
  graphs_.clear();
  owned_.clear();
  try {
    session_->SyncAll();
  } catch (const RemoteError& e) {
    DISCO_LOG(WARN) << "disco-serve: client " << peer_
                    << " left remote errors it never observed: " << e.what();
  } catch (const std::exception& e) {
    DISCO_LOG(ERROR) << "disco-serve: cleaning up after client " << peer_ << ": " << e.what();
  }
}

// Decodes and runs one request and sends its answer. Socket failures propagate (the client is
// dropped); every other error becomes an error answer and the client may go on.
void ClientConnection::Handle() {
  const int64_t trace_start = trace::Enabled() ? trace::NowNs() : -1;
  bool ok = true;
  try {
    DecodeRequest(in_.data(), in_.size(), &req_);
    for (int64_t reg : req_.frees) owned_.erase(reg);
    std::vector<Any> results = Run(req_.op, &req_.operands);
    EncodeOkReply(&out_, results.data(), results.size());  // may refuse a value
  } catch (const IoError&) {
    throw;
  } catch (const std::exception& e) {
    ok = false;
    EncodeErrorReply(&out_, e);
  }
  if (ok) {
    if (out_.size() + sizeof(uint64_t) > reply_limit_) {
      std::string what = "the answer to " + std::string(OpName(req_.op)) + " takes " +
                         std::to_string(out_.size()) + " bytes, over the client's limit of " +
                         std::to_string(reply_limit_) +
                         " (read large tensors with CopyFromWorker0)";
      EncodeErrorReply(&out_, ValueError(detail::RankPrefix() + what));
      ok = false;
    }
  }
  if (ok && req_.op == Op::kCopyFrom) {  // the answer, then the data, first chunk glued on
    SendChunks(&sock_, copy_.data(), copy_.nbytes(), ChunkLimit(), options_.request_timeout_ms,
               &out_);
  } else {
    SendPacket(&sock_, out_.data(), out_.size(), options_.request_timeout_ms);
  }
  if (trace_start >= 0) {
    const char* op = OpName(req_.op);
    trace::Record(
        trace::Kind::kRemote, op, std::strlen(op), trace_start, trace::NowNs(),
        static_cast<int64_t>(in_.size()),
        static_cast<int64_t>(out_.size() + (ok && req_.op == Op::kCopyFrom ? copy_.nbytes() : 0)));
  }
  copy_ = Tensor();
  // A large request or answer does not pin its buffers for the rest of the connection.
  in_.ReleaseAbove(protocol::kKeepBufferBytes);
  out_.ReleaseAbove(protocol::kKeepBufferBytes);
}

// Runs one request: its operand count is checked, then the method for its kind runs.
std::vector<Any> ClientConnection::Run(Op op, std::vector<Any>* operands) {
  std::vector<Any>& a = *operands;
  auto expect = [&](size_t n) {
    const bool variadic = op == Op::kCall || op == Op::kReplayGraph || op == Op::kFreeGraph;
    DISCO_CHECK(a.size() == n || (variadic && a.size() >= n), ProtocolError)
        << OpName(op) << " takes " << n << " operands, got " << a.size();
  };
  switch (op) {
    case Op::kInfo:
      expect(2);
      return Info(a);
    case Op::kGetGlobalFunc:
      expect(1);
      return {Own(session_->GetGlobalFunc(a[0].cast<std::string>()))};
    case Op::kCall:
      expect(1);
      return Call(&a);
    case Op::kCopyTo:
      expect(4);
      CopyTo(a);
      return {};
    case Op::kCopyFrom:
      expect(4);
      CopyFrom(a);
      return {};
    case Op::kSyncWorker:
      expect(1);
      session_->SyncWorker(WorkerOperand(a[0], "SyncWorker"));
      return {};
    case Op::kSyncAll:
      expect(0);
      session_->SyncAll();
      return {};
    case Op::kDebugGet:
      expect(2);
      return {DebugGet(a)};
    case Op::kDebugSet:
      expect(3);
      DebugSet(&a);
      return {};
    case Op::kCaptureBegin:
      expect(1);
      return CaptureBegin(a);
    case Op::kCaptureEnd:
      expect(1);
      return CaptureEnd(a);
    case Op::kReplayGraph:
      expect(1);
      ReplayGraph(&a);
      return {};
    case Op::kFreeGraph:
      for (const Any& id : a) graphs_.erase(id.cast<int64_t>());
      return {};
    case Op::kDetach:
      expect(0);
      stop_ = true;
      CleanUp();
      Release();
      return {};
    case Op::kShutdownJob:
      expect(1);
      ShutdownJob(a);
      return {};
  }
  DISCO_THROW(ProtocolError) << "unknown request operation " << static_cast<int>(op);
}

// The client's limits on answers and chunks; the job's shape and the server's packet limit.
std::vector<Any> ClientConnection::Info(const std::vector<Any>& a) {
  int64_t reply_limit = a[0].cast<int64_t>(), chunk = a[1].cast<int64_t>();
  DISCO_CHECK(reply_limit > 0 && chunk > static_cast<int64_t>(ChunkOverheadBytes()), ValueError)
      << "Info: a reply limit of " << reply_limit << " bytes and chunks of " << chunk
      << " bytes leave no room for data";
  reply_limit_ = static_cast<size_t>(reply_limit);
  chunk_limit_ = std::min(static_cast<size_t>(chunk), options_.max_packet_bytes);
  return {Any(session_->num_workers()), Any(session_->num_groups()),
          Any(static_cast<int64_t>(options_.max_packet_bytes))};
}

std::vector<Any> ClientConnection::Call(std::vector<Any>* args) {
  std::vector<Any>& a = *args;
  // Inside a capture, an argument may be one of its placeholders (the session checks it).
  Resolve(&a[0], "CallPacked", /*placeholder_ok=*/false);
  for (size_t i = 1; i < a.size(); ++i) Resolve(&a[i], "CallPacked", impl_->capturing());
  DRef func = a[0].cast<DRef>();
  return {Own(session_->CallWithMovedArgs(func, a.data() + 1, a.size() - 1))};
}

// Reads a kCopyTo's chunks straight into worker 0's tensor. A copy that cannot be honoured
// still reads (and drops) its chunks, so the stream stays in step, then answers the error; one
// that announces more than kMaxDrainBytes is not read for nothing: the client is dropped.
void ClientConnection::CopyTo(const std::vector<Any>& a) {
  size_t nbytes = 0;
  try {
    int64_t n = a[3].cast<int64_t>();
    DISCO_CHECK(n >= 0, ValueError) << "a copy of " << n << " bytes";
    nbytes = static_cast<size_t>(n);
  } catch (const std::exception& e) {  // the chunks that follow cannot be told apart: drop
    throw IoError(std::string("CopyToWorker0 of unknown size: ") + e.what());
  }
  Tensor dst;
  try {
    dst = CheckedTensor(a, "CopyToWorker0");
  } catch (const std::exception& e) {
    if (nbytes > kMaxDrainBytes) {
      throw IoError(std::string(e.what()) + "; the " + std::to_string(nbytes) +
                    " bytes announced are not read for nothing: connection closed");
    }
    Io([&] { RecvChunks(&sock_, nullptr, nbytes, ChunkLimit(), Deadline()); });
    throw;
  }
  if (nbytes >= kParkForCopyBytes && !impl_->capturing()) impl_->ParkWorkers();
  if (memory::IsHost(dst.device())) {
    Io([&] { RecvChunks(&sock_, dst.data(), nbytes, ChunkLimit(), Deadline()); });
  } else {  // stage on the host, then one copy to the device
    Tensor host = Tensor::Empty(dst.shape(), dst.dtype());
    Io([&] { RecvChunks(&sock_, host.data(), nbytes, ChunkLimit(), Deadline()); });
    dst.CopyFrom(host);
  }
}

// Holds worker 0's tensor for the answer (Handle sends its data after it).
void ClientConnection::CopyFrom(const std::vector<Any>& a) {
  copy_ = CheckedTensor(a, "CopyFromWorker0");
  if (copy_.nbytes() >= kParkForCopyBytes && !impl_->capturing()) impl_->ParkWorkers();
  if (!memory::IsHost(copy_.device())) {  // stage device memory on the host
    Tensor host = Tensor::Empty(copy_.shape(), copy_.dtype());
    host.CopyFrom(copy_);
    copy_ = host;
  }
}

Any ClientConnection::DebugGet(const std::vector<Any>& a) {
  int64_t reg = OwnedReg(a[0], "DebugGetFromRemote");
  Any value = session_->DebugGetFromRemote(reg, WorkerOperand(a[1], "DebugGetFromRemote"));
  // Worker 0 is in process for the job, not for the client: its objects stay here too.
  DISCO_CHECK(value.type_code() != TypeCode::kObject && value.type_code() != TypeCode::kFunction,
              ValueError)
      << "DebugGetFromRemote: register " << reg << " on worker 0 holds a " << value.type_name()
      << ", which cannot be read remotely";
  return value;
}

void ClientConnection::DebugSet(std::vector<Any>* args) {
  std::vector<Any>& a = *args;
  Resolve(&a[2], "DebugSetRegister", /*placeholder_ok=*/false);
  session_->DebugSetRegister(OwnedReg(a[0], "DebugSetRegister"), a[2],
                             WorkerOperand(a[1], "DebugSetRegister"));
}

std::vector<Any> ClientConnection::CaptureBegin(const std::vector<Any>& a) {
  std::vector<Any> ids;
  const int64_t inputs = a[0].cast<int64_t>();
  DISCO_CHECK(inputs >= 0 && inputs <= protocol::kMaxGraphInputs, ValueError)
      << "Capture: " << inputs << " inputs (0 to " << protocol::kMaxGraphInputs << ")";
  for (const Any& p : impl_->BeginCapture(static_cast<int>(inputs))) {
    ids.push_back(Any(p.cast<DRef>().reg_id()));
  }
  return ids;
}

std::vector<Any> ClientConnection::CaptureEnd(const std::vector<Any>& a) {
  Graph g = impl_->EndCapture(a[0].cast<bool>());
  graphs_[g.id()] = g;
  return {Any(g.id()), Any(static_cast<int64_t>(g.num_calls()))};
}

void ClientConnection::ReplayGraph(std::vector<Any>* args) {
  std::vector<Any>& a = *args;
  auto it = graphs_.find(a[0].cast<int64_t>());
  DISCO_CHECK(it != graphs_.end(), ValueError)
      << "Graph::Replay: graph " << a[0].ToString() << " is not held by this client";
  for (size_t i = 1; i < a.size(); ++i) Resolve(&a[i], "Graph::Replay", impl_->capturing());
  it->second.Replay(std::vector<Any>(a.begin() + 1, a.end()));
}

void ClientConnection::ShutdownJob(const std::vector<Any>& a) {
  int64_t code = a[0].cast<int64_t>();
  DISCO_CHECK(code >= 0 && code <= 255, ValueError)
      << "shutdown: exit code " << code << " is outside 0..255";
  stop_ = true;
  end_job_ = true;
  exit_code_ = static_cast<int>(code);
}

// Worker 0's tensor in the client's register a[0], checked against the dtype, shape and byte
// count of the client's host tensor (a[1], a[2], a[3]).
Tensor ClientConnection::CheckedTensor(const std::vector<Any>& a, const char* what) {
  DLDataType dtype = a[1].cast<DLDataType>();
  Shape shape = a[2].cast<Shape>();
  Tensor t = impl_->Worker0Tensor(Owned(a[0], what), what);
  DISCO_CHECK(t.dtype() == dtype, ValueError)
      << what << ": dtype mismatch: remote tensor " << DataTypeToString(t.dtype())
      << ", host tensor " << DataTypeToString(dtype);
  DISCO_CHECK(t.shape() == shape, ValueError)
      << what << ": shape mismatch: remote tensor " << t.shape().ToString() << ", host tensor "
      << shape.ToString();
  DISCO_CHECK(static_cast<int64_t>(t.nbytes()) == a[3].cast<int64_t>(), ValueError)
      << what << ": the remote tensor holds " << t.nbytes() << " bytes, the host tensor "
      << a[3].cast<int64_t>();
  return t;
}

Any ClientConnection::Own(DRef ref) {
  int64_t reg = ref.reg_id();
  owned_[reg] = std::move(ref);
  return Any(reg);
}

const DRef& ClientConnection::Owned(const Any& v, const char* what) const {
  int64_t reg = v.type_code() == TypeCode::kDRef ? v.cast<DRef>().reg_id() : v.cast<int64_t>();
  auto it = owned_.find(reg);
  DISCO_CHECK(it != owned_.end(), ValueError)
      << what << ": register " << reg << " is not held by this client";
  return it->second;
}

// A DRef operand names a register by id: it becomes the server's own DRef for it. An id the
// client does not hold is refused at once, placeholders too unless `placeholder_ok` (a call's
// argument inside a capture: the session checks that it is one of that capture's inputs).
void ClientConnection::Resolve(Any* v, const char* what, bool placeholder_ok) const {
  if (v->type_code() != TypeCode::kDRef) return;
  DRef ref = v->cast<DRef>();
  if (!ref.defined()) return;  // an empty DRef stays empty (and is refused where it matters)
  const bool placeholder = detail::PlaceholderIndex(*v) >= 0;
  if (placeholder_ok && placeholder) return;
  DISCO_CHECK(!placeholder || owned_.count(ref.reg_id()) != 0, ValueError)
      << what << ": register " << ref.reg_id() << " is not held by this client (ids from 2^62 "
      << "are placeholders of a capture: arguments of calls inside that capture only)";
  *v = Any(Owned(*v, what));
}

// A worker id operand, checked as the int64 it came as (a narrowing first would wrap it).
int ClientConnection::WorkerOperand(const Any& v, const char* what) const {
  const int64_t id = v.cast<int64_t>();
  DISCO_CHECK(id >= 0 && id < session_->num_workers(), ValueError)
      << what << ": worker id " << id << " is out of range [0, " << session_->num_workers() << ")";
  return static_cast<int>(id);
}

}  // namespace remote
}  // namespace disco
