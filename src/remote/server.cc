// The server end of remote sessions, on rank 0 of a job: an acceptor thread that runs handshakes
// (and answers "busy" while a client is attached), and the main thread, which alone touches the
// session (MPI stays in one thread), serving one client's requests at a time.
#include <disco/log.h>
#include <disco/remote.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/device_memory.h"
#include "core/env.h"
#include "protocol/serializer.h"
#include "remote/rpc.h"
#include "remote/socket.h"
#include "session/session_impl.h"

namespace disco {
namespace {

using remote::Op;
using remote::Socket;

constexpr int kHandshakeTimeoutMs = 5000;
// A client silent this long parks the workers; so does a copy of this many bytes or more (it
// keeps rank 0 on the socket for milliseconds, while workers would spin for the next frame).
constexpr int kParkAfterMs = 20;
constexpr size_t kParkForCopyBytes = size_t{1} << 20;

bool IsLoopback(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0;
}

void WritePortFile(const std::string& path, int port) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << port << "\n";
    DISCO_CHECK(f.good(), ValueError) << "cannot write the port file '" << tmp << "'";
  }
  DISCO_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, ValueError)
      << "cannot move the port file into place at '" << path << "'";
}

// Accepts connections in a thread of its own and runs their handshakes; hands an accepted
// client to the serving thread, and answers "busy" while one is being served.
class Acceptor {
 public:
  Acceptor(Socket* listener, std::string key) : listener_(listener), key_(std::move(key)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Acceptor() {
    stop_ = true;
    thread_.join();
  }

  /// Waits for the next client that passed the handshake.
  Socket Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return next_.valid(); });
    return std::move(next_);
  }
  /// The served client has gone: the next one may come in.
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    attached_ = false;
  }

 private:
  void Run() {
    while (!stop_) {
      Socket c;
      try {
        c = listener_->Accept(200);
      } catch (const std::exception& e) {
        DISCO_LOG(WARN) << "disco-serve: accept failed: " << e.what();
        continue;
      }
      if (!c.valid()) continue;
      std::string peer = c.PeerName();
      bool busy;
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy = attached_;
      }
      remote::HandshakeCode code;
      try {
        code = remote::ServerHello(&c, key_, kHandshakeTimeoutMs, busy);
      } catch (const std::exception& e) {
        DISCO_LOG(WARN) << "disco-serve: refused " << peer << ": " << e.what();
        continue;
      }
      if (code != remote::HandshakeCode::kOk) {
        DISCO_LOG(WARN) << "disco-serve: refused " << peer << ": "
                        << remote::HandshakeCodeName(code);
        continue;
      }
      DISCO_LOG(INFO) << "disco-serve: client " << peer << " attached";
      std::lock_guard<std::mutex> lock(mu_);
      attached_ = true;
      next_ = std::move(c);
      cv_.notify_all();
    }
  }

  Socket* listener_;
  std::string key_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool attached_ = false;
  Socket next_;
  std::thread thread_;
};

// One attached client: its registers, its requests, its answers.
class ClientConnection {
 public:
  /// `release` lets the next client in; a client that detaches hears back only after it ran,
  /// so that it may attach again at once.
  ClientConnection(Session* session, Socket sock, const ServeOptions& options,
                   std::function<void()> release)
      : session_(session),
        impl_(session->impl()),
        sock_(std::move(sock)),
        peer_(sock_.PeerName()),
        options_(options),
        release_(std::move(release)) {}

  /// Serves requests until the client leaves; returns true when it asked to end the job (with
  /// `*exit_code`).
  bool Serve(int* exit_code) {
    for (;;) {
      const int idle_ms = options_.idle_timeout_s > 0 ? options_.idle_timeout_s * 1000 : -1;
      try {
        // A client that pauses: workers park (sleep instead of spinning) until its next request.
        const int first_ms = idle_ms < 0 ? kParkAfterMs : std::min(kParkAfterMs, idle_ms);
        bool ready = sock_.WaitReadable(first_ms);
        if (!ready) {
          impl_->ParkWorkers();
          ready = sock_.WaitReadable(idle_ms < 0 ? -1 : idle_ms - first_ms);
        }
        if (!ready) {
          DISCO_LOG(WARN) << "disco-serve: client " << peer_ << " idle for "
                          << options_.idle_timeout_s << " s: disconnected";
          return false;
        }
        remote::RecvPacket(&sock_, &in_, options_.max_packet_bytes, options_.request_timeout_ms);
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

  ~ClientConnection() {
    CleanUp();
    Release();
    DISCO_LOG(INFO) << "disco-serve: client " << peer_ << " detached";
  }

 private:
  /// Lets the next client in, once: after a detach has done so, the next client may already be
  /// attached, and a second release would let a third in beside it.
  void Release() {
    if (released_) return;
    released_ = true;
    release_();
  }

  /// Frees the client's registers on every worker and settles the errors it never observed.
  void CleanUp() {
    if (cleaned_up_) return;
    cleaned_up_ = true;
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
  void Handle() {
    bool ok = true;
    try {
      remote::DecodeRequest(in_.data(), in_.size(), &req_);
      for (int64_t reg : req_.frees) owned_.erase(reg);
      std::vector<Any> results = Run(req_.op, &req_.operands);
      remote::EncodeOkReply(&out_, results.data(), results.size());  // may refuse a value
    } catch (const IoError&) {
      throw;
    } catch (const std::exception& e) {
      ok = false;
      remote::EncodeErrorReply(&out_, e);
    }
    if (ok) {
      if (out_.size() + sizeof(uint64_t) > reply_limit_) {
        std::string what = "the answer to " + std::string(remote::OpName(req_.op)) + " takes " +
                           std::to_string(out_.size()) + " bytes, over the client's limit of " +
                           std::to_string(reply_limit_) +
                           " (read large tensors with CopyFromWorker0)";
        remote::EncodeErrorReply(&out_, ValueError(detail::RankPrefix() + what));
        ok = false;
      }
    }
    if (ok && req_.op == Op::kCopyFrom) {  // the answer, then the data, first chunk glued on
      remote::SendChunks(&sock_, copy_.data(), copy_.nbytes(), ChunkLimit(),
                         options_.request_timeout_ms, &out_);
    } else {
      remote::SendPacket(&sock_, out_.data(), out_.size(), options_.request_timeout_ms);
    }
    copy_ = Tensor();
  }

  // Socket failures inside a request (chunks) are not the client's mistakes to answer: they end
  // the connection.
  struct IoError : RuntimeError {
    using RuntimeError::RuntimeError;
  };

  std::vector<Any> Run(Op op, std::vector<Any>* operands) {
    std::vector<Any>& a = *operands;
    auto expect = [&](size_t n) {
      DISCO_CHECK(a.size() == n || (op == Op::kCall && a.size() >= 1), ProtocolError)
          << remote::OpName(op) << " takes " << n << " operands, got " << a.size();
    };
    switch (op) {
      case Op::kInfo: {
        expect(2);
        int64_t reply_limit = a[0].cast<int64_t>(), chunk = a[1].cast<int64_t>();
        DISCO_CHECK(reply_limit > 0 && chunk > static_cast<int64_t>(remote::ChunkOverheadBytes()),
                    ValueError)
            << "Info: a reply limit of " << reply_limit << " bytes and chunks of " << chunk
            << " bytes leave no room for data";
        reply_limit_ = static_cast<size_t>(reply_limit);
        chunk_limit_ = std::min(static_cast<size_t>(chunk), options_.max_packet_bytes);
        return {Any(session_->num_workers()), Any(session_->num_groups()),
                Any(static_cast<int64_t>(options_.max_packet_bytes))};
      }
      case Op::kGetGlobalFunc:
        expect(1);
        return {Own(session_->GetGlobalFunc(a[0].cast<std::string>()))};
      case Op::kCall: {
        expect(1);
        for (Any& v : a) Resolve(&v);
        DRef func = a[0].cast<DRef>();
        return {Own(session_->CallWithMovedArgs(func, a.data() + 1, a.size() - 1))};
      }
      case Op::kCopyTo:
        expect(4);
        CopyTo(a);
        return {};
      case Op::kCopyFrom:
        expect(4);
        copy_ = CheckedTensor(a, "CopyFromWorker0");
        if (copy_.nbytes() >= kParkForCopyBytes) impl_->ParkWorkers();
        if (!memory::IsHost(copy_.device())) {  // stage device memory on the host
          Tensor host = Tensor::Empty(copy_.shape(), copy_.dtype());
          host.CopyFrom(copy_);
          copy_ = host;
        }
        return {};
      case Op::kSyncWorker:
        expect(1);
        session_->SyncWorker(static_cast<int>(a[0].cast<int64_t>()));
        return {};
      case Op::kSyncAll:
        expect(0);
        session_->SyncAll();
        return {};
      case Op::kDebugGet: {
        expect(2);
        int64_t reg = OwnedReg(a[0], "DebugGetFromRemote");
        Any value = session_->DebugGetFromRemote(reg, static_cast<int>(a[1].cast<int64_t>()));
        // Worker 0 is in process for the job, not for the client: its objects stay here too.
        DISCO_CHECK(
            value.type_code() != TypeCode::kObject && value.type_code() != TypeCode::kFunction,
            ValueError)
            << "DebugGetFromRemote: register " << reg << " on worker 0 holds a "
            << value.type_name() << ", which cannot be read remotely";
        return {std::move(value)};
      }
      case Op::kDebugSet:
        expect(3);
        Resolve(&a[2]);
        session_->DebugSetRegister(OwnedReg(a[0], "DebugSetRegister"), a[2],
                                   static_cast<int>(a[1].cast<int64_t>()));
        return {};
      case Op::kDetach:
        expect(0);
        stop_ = true;
        CleanUp();
        Release();
        return {};
      case Op::kShutdownJob:
        expect(1);
        stop_ = true;
        end_job_ = true;
        exit_code_ = static_cast<int>(a[0].cast<int64_t>());
        return {};
    }
    DISCO_THROW(ProtocolError) << "unknown request operation " << static_cast<int>(op);
  }

  // Reads a kCopyTo's chunks straight into worker 0's tensor; a copy that cannot be honoured
  // still reads (and drops) them, so the stream stays in step, then answers the error.
  void CopyTo(const std::vector<Any>& a) {
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
    } catch (const std::exception&) {
      Io([&] { remote::RecvChunks(&sock_, nullptr, nbytes, ChunkLimit(), Deadline()); });
      throw;
    }
    if (nbytes >= kParkForCopyBytes) impl_->ParkWorkers();
    if (memory::IsHost(dst.device())) {
      Io([&] { remote::RecvChunks(&sock_, dst.data(), nbytes, ChunkLimit(), Deadline()); });
    } else {  // stage on the host, then one copy to the device
      Tensor host = Tensor::Empty(dst.shape(), dst.dtype());
      Io([&] { remote::RecvChunks(&sock_, host.data(), nbytes, ChunkLimit(), Deadline()); });
      dst.CopyFrom(host);
    }
  }

  // Worker 0's tensor in the client's register a[0], checked against the dtype, shape and byte
  // count of the client's host tensor (a[1], a[2], a[3]).
  Tensor CheckedTensor(const std::vector<Any>& a, const char* what) {
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

  template <typename F>
  void Io(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw IoError(e.what());
    }
  }

  int Deadline() const { return options_.request_timeout_ms; }
  size_t ChunkLimit() const { return chunk_limit_; }

  Any Own(DRef ref) {
    int64_t reg = ref.reg_id();
    owned_[reg] = std::move(ref);
    return Any(reg);
  }

  const DRef& Owned(const Any& v, const char* what) const {
    int64_t reg = v.type_code() == TypeCode::kDRef ? v.cast<DRef>().reg_id() : v.cast<int64_t>();
    auto it = owned_.find(reg);
    DISCO_CHECK(it != owned_.end(), ValueError)
        << what << ": register " << reg << " is not held by this client";
    return it->second;
  }
  int64_t OwnedReg(const Any& v, const char* what) const { return Owned(v, what).reg_id(); }

  // A DRef operand names a register by id: it becomes the server's own DRef for it.
  void Resolve(Any* v) const {
    if (v->type_code() != TypeCode::kDRef) return;
    DRef ref = v->cast<DRef>();
    if (!ref.defined()) return;  // an empty DRef stays empty (and is refused where it matters)
    *v = Any(Owned(*v, "argument"));
  }

  Session* session_;
  detail::SessionImpl* impl_;
  Socket sock_;
  std::string peer_;
  const ServeOptions& options_;
  std::function<void()> release_;
  bool cleaned_up_ = false;
  bool released_ = false;
  size_t reply_limit_ = size_t{1} << 30;
  size_t chunk_limit_ = size_t{1} << 20;
  bool stop_ = false;  // the client detached or ended the job
  bool end_job_ = false;
  int exit_code_ = 0;
  std::unordered_map<int64_t, DRef> owned_;
  protocol::ByteBuffer in_, out_;
  remote::Request req_;
  Tensor copy_;
};

}  // namespace

int Serve(Session& session, const ServeOptions& options) {
  DISCO_CHECK(session.impl() != nullptr, ValueError)
      << "Serve needs the job's own session (rank 0 of disco::Main), not a remote one";
  DISCO_CHECK(options.max_packet_bytes > remote::ChunkOverheadBytes() + 1024, ValueError)
      << "Serve: max_packet_bytes " << options.max_packet_bytes << " is too small";
  std::string key = options.key;
  if (key.empty()) key = env::GetString("DISCO_SERVE_KEY");
  DISCO_CHECK(!key.empty() || IsLoopback(options.host), ValueError)
      << "Serve: listening on " << options.host
      << " needs a key (--key or DISCO_SERVE_KEY); only loopback may go without one";
  Socket listener = Socket::Listen(options.host, options.port);
  int port = listener.port();
  if (!options.port_file.empty()) WritePortFile(options.port_file, port);
  std::printf("disco-serve: listening on %s:%d, %d workers in %d groups\n", options.host.c_str(),
              port, session.num_workers(), session.num_groups());
  std::fflush(stdout);

  Acceptor acceptor(&listener, key);
  for (int served = 0; options.max_clients == 0 || served < options.max_clients; ++served) {
    int exit_code = -1;
    bool end_job;
    session.impl()->ParkWorkers();  // no client: workers sleep until one comes
    {
      ClientConnection client(&session, acceptor.Next(), options, [&] { acceptor.Release(); });
      end_job = client.Serve(&exit_code);
    }
    if (end_job) {
      DISCO_LOG(INFO) << "disco-serve: a client ended the job with exit code " << exit_code;
      return exit_code;
    }
  }
  return 0;
}

}  // namespace disco
