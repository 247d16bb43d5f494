// One attached client of disco::Serve, served on the main thread (which alone touches the session:
// MPI stays in one thread): its registers, its graphs, its requests and their answers.
#ifndef DISCO_REMOTE_CONNECTION_H_
#define DISCO_REMOTE_CONNECTION_H_

#include <disco/graph.h>
#include <disco/remote.h>
#include <disco/session.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "protocol/serializer.h"
#include "remote/rpc.h"
#include "remote/socket.h"
#include "session/session_impl.h"

namespace disco {
namespace remote {

// One attached client: its registers, its requests, its answers.
class ClientConnection {
 public:
  /// `release` lets the next client in; a client that detaches hears back only after it ran,
  /// so that it may attach again at once.
  ClientConnection(Session* session, Socket sock, const ServeOptions& options,
                   std::function<void()> release);
  ~ClientConnection();

  /// Serves requests until the client leaves; returns true when it asked to end the job (with
  /// `*exit_code`).
  bool Serve(int* exit_code);

 private:
  // Socket failures inside a request (chunks) are not the client's mistakes to answer: they end
  // the connection.
  struct IoError : RuntimeError {
    using RuntimeError::RuntimeError;
  };

  void Release();
  void CleanUp();
  void Handle();

  // The requests, one method per kind (Run dispatches; the operand count is checked).
  std::vector<Any> Run(Op op, std::vector<Any>* operands);
  std::vector<Any> Info(const std::vector<Any>& a);
  std::vector<Any> Call(std::vector<Any>* a);
  void CopyTo(const std::vector<Any>& a);
  void CopyFrom(const std::vector<Any>& a);
  Any DebugGet(const std::vector<Any>& a);
  void DebugSet(std::vector<Any>* a);
  std::vector<Any> CaptureBegin(const std::vector<Any>& a);
  std::vector<Any> CaptureEnd(const std::vector<Any>& a);
  void ReplayGraph(std::vector<Any>* a);
  void ShutdownJob(const std::vector<Any>& a);

  Tensor CheckedTensor(const std::vector<Any>& a, const char* what);
  template <typename F>
  void Io(F&& f);
  int Deadline() const { return options_.request_timeout_ms; }
  size_t ChunkLimit() const { return chunk_limit_; }
  Any Own(DRef ref);
  const DRef& Owned(const Any& v, const char* what) const;
  int64_t OwnedReg(const Any& v, const char* what) const { return Owned(v, what).reg_id(); }
  void Resolve(Any* v, const char* what, bool placeholder_ok) const;
  int WorkerOperand(const Any& v, const char* what) const;

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
  std::unordered_map<int64_t, Graph> graphs_;  // the client's graphs, by id
  protocol::ByteBuffer in_, out_;
  Request req_;
  Tensor copy_;
};

}  // namespace remote
}  // namespace disco

#endif  // DISCO_REMOTE_CONNECTION_H_
