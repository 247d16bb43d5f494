// How disco-llm-server holds its connections. cpp-httplib (Debian's 0.11.4) parses requests and
// writes responses (Server::process_request); the loop around them is this file's, because the
// library's own one gives a client as long as it likes: its read timeout is per recv, so a client
// that sends a byte every few seconds holds a thread for ever (and a stop waits for it), it drops
// requests pipelined behind the first one, it reads a chunked body past the body limit, it binds
// with SO_REUSEPORT (a second server on the port would share it) and listens with a backlog of 5.
//
// Here a request must arrive whole (line, headers, body) within `request_seconds` of its first
// byte and within `max_request_bytes`; a new connection waits `first_seconds` for its first byte,
// a kept-alive one `idle_seconds` for the next
// one; bytes read past one request stay for the next; when the server stops, a connection drops
// unless a request is already arriving (it is read and answered, 503). Connections are served by
// a pool that grows a thread per connection up to `max_threads`, so idle connections do not make
// the others wait behind them.
#ifndef DISCO_MODELS_LLAMA_SERVER_CONNECTION_H_
#define DISCO_MODELS_LLAMA_SERVER_CONNECTION_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llm_server {

struct ConnectionLimits {
  int first_seconds = 3;       // for a new connection's first byte (clients send at once)
  int idle_seconds = 5;        // for the next request on a kept-alive connection
  int request_seconds = 10;    // for a whole request, from its first byte
  int write_seconds = 5;       // for one write to a client that does not read
  int stop_grace_seconds = 1;  // for a request still arriving when the server stops
  size_t max_request_bytes = (1 << 20) + (64 << 10);  // head and body
  size_t max_threads = 512;                           // connections served at once
  size_t max_requests_per_connection = 100;
};

/// One client connection as cpp-httplib's parser and writer see it.
class Connection : public httplib::Stream {
 public:
  Connection(int fd, const ConnectionLimits& limits, const std::atomic<bool>& stopping);

  /// Waits for the next request's first byte; false when the client closed or idled too long, or
  /// the server stops and no request is arriving.
  bool AwaitRequest();
  /// Whether the request being read went past max_request_bytes (it is answered 413).
  bool over_limit() const { return over_limit_; }
  /// The request was answered before its body was read: the connection ends after the answer.
  void CloseAfterThisRequest() { close_after_ = true; }
  bool close_after() const { return close_after_ || over_limit_; }
  /// Whether the client has closed its side (a client waiting for a reply has not).
  bool PeerGone() const;
  /// The connection that the calling thread is serving, or null.
  static Connection* Current();

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

 private:
  using Clock = std::chrono::steady_clock;
  // Polls for `events` until `deadline` (or, once the server stops, its grace); false at the end.
  bool WaitFor(short events, Clock::time_point deadline) const;

  const int fd_;
  const ConnectionLimits& limits_;
  const std::atomic<bool>& stopping_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // unread bytes: buf_[begin_, end_)
  size_t request_bytes_ = 0;
  bool over_limit_ = false, close_after_ = false, first_ = true;
  Clock::time_point deadline_;
  mutable Clock::time_point stop_seen_{};
};

/// cpp-httplib's server with the connection loop above, an exclusive bind and a long backlog.
class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(ConnectionLimits limits);
  /// Binds `host:port` (0: a free port) without SO_REUSEPORT; the port, or -1 (errno says why,
  /// or is 0 when the host did not resolve).
  int Bind(const std::string& host, int port);
  /// Connections stop waiting for requests; call before stop().
  void BeginStop() { stopping_ = true; }
  const ConnectionLimits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(int sock) override;

  const ConnectionLimits limits_;
  std::atomic<bool> stopping_{false};
};

/// A thread per connection, started when none is idle, up to `max_threads`; then connections
/// wait their turn. shutdown() serves what is queued and joins.
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionPool() override { shutdown(); }
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void Work();

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_CONNECTION_H_
