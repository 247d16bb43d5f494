// How disco-llm-server holds its connections. cpp-httplib (Debian's 0.11.4) parses requests and
// writes responses (Server::process_request); the loop around them is this file's, because the
// library's own one gives a client as long as it likes: its read timeout is per recv, so a client
// that sends a byte every few seconds holds a thread for ever (and a stop waits for it), it drops
// requests pipelined behind the first one, it reads a chunked body past the body limit, it binds
// with SO_REUSEPORT (a second server on the port would share it) and listens with a backlog of 5.
//
// Here a request must arrive whole (line, headers, body) within `request_seconds` of its first
// byte and within `max_request_bytes`; a new connection waits `first_seconds` for its first byte,
// a kept-alive one `idle_seconds` for the next one; bytes read past one request stay for the
// next; when the server stops, a connection drops unless a request is already arriving (it is
// read and answered, 503). A connection waiting for its client's next request (a new one's
// first, a kept-alive one's next) waits on one thread's epoll set (Waiter), not on a thread of its
// own, and the Waiter reads the request there as it comes (Gather) until it is whole: its head,
// and its body (Content-Length, or chunks up to the last; "100 Continue" answered). Thousands of
// idle or trickling connections cost a descriptor each (and the bytes they sent), and a pool
// thread (up to `max_threads`, started as needed) takes a connection only once its request has
// arrived, for as long as it is answered: clients that send a byte now and then hold no thread.
#ifndef DISCO_MODELS_LLAMA_SERVER_CONNECTION_H_
#define DISCO_MODELS_LLAMA_SERVER_CONNECTION_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
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
  // Bytes of requests still arriving that the Waiter holds, all connections together; past it,
  // a connection whose request needs more is answered 503 and closed.
  size_t max_waiting_bytes = size_t{256} << 20;
};

/// One client connection as cpp-httplib's parser and writer see it; closes its socket when it
/// goes.
class Connection : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  Connection(int fd, const ConnectionLimits& limits, const std::atomic<bool>& stopping);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

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
  /// Bytes of a next request already read (pipelined behind the last one).
  bool HasBuffered() const { return begin_ < end_; }
  /// What Gather found: the request is still arriving; it is whole, or the client closed or
  /// failed (a thread takes the connection); or it is refused (Refuse answers it): it needs more
  /// than `room` (503), or its chunks are malformed (400) or past the limit (413).
  enum class Gathered { kMore, kWhole, kRefused };
  /// Reads what the client has sent, without waiting, growing the buffer by at most `room`
  /// bytes; answers "100 Continue" once to a client that asks for it before its body.
  Gathered Gather(size_t room);
  /// Answers Gather's refusal without waiting (the connection then closes).
  void Refuse();
  /// How the buffered request is framed, as far as the Waiter judges it: whole once its head
  /// (ended by an empty line) and its body (Content-Length, or chunks up to the last) are in, or
  /// as much as a request may be (max_request_bytes), or a head the parser refuses at once.
  struct Framing {
    bool whole = false;
    bool expects_continue = false;
    int refuse = 0;  // an HTTP status to answer at once (malformed or oversized chunks)
  };
  Framing Frame() const;
  /// The buffer's size (what a waiting connection holds).
  size_t buffer_bytes() const { return buf_.size(); }
  /// Back to a small buffer when nothing is buffered (a kept-alive connection once sent a large
  /// request).
  void ShrinkBuffer();
  /// Requests answered on this connection.
  size_t served() const { return served_; }
  void CountRequest() {
    ++served_;
    scan_ = Scan{};  // the next request's framing is scanned afresh
  }
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
  // Polls for `events` until `deadline` (or, once the server stops, its grace); false at the end.
  bool WaitFor(short events, Clock::time_point deadline) const;

  const int fd_;
  const ConnectionLimits& limits_;
  const std::atomic<bool>& stopping_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // unread bytes: buf_[begin_, end_)
  size_t request_bytes_ = 0, served_ = 0;
  bool over_limit_ = false, close_after_ = false, first_ = true;
  bool continued_ = false;  // "100 Continue" sent for the request arriving
  int refuse_ = 0;          // Gather's refusal
  // How far Frame has scanned the request arriving (offsets from begin_), so that each new piece
  // is scanned once: a request trickled in a byte at a time would otherwise be scanned from its
  // start at every byte.
  struct Scan {
    enum class Body { kNone, kLength, kChunked };
    size_t head_searched = 0;  // bytes searched for the head's end, not found
    size_t head = 0;           // the head's length, once found; then what it says of the body:
    Body body = Body::kNone;
    size_t length = 0;  // kLength's bytes
    bool expects_continue = false;
    size_t chunk = 0;       // kChunked: where the next chunk-size (or trailer) line begins
    bool trailers = false;  // past the last chunk
  };
  // Finds the head's end in the request at p (have bytes) and reads its framing into scan_; false
  // while the head is still arriving.
  bool ScanHead(const char* p, size_t have) const;
  mutable Scan scan_;
  Clock::time_point deadline_;
  mutable Clock::time_point stop_seen_{};
};

/// Connections waiting for their client's next bytes, on one thread's epoll set: when a client
/// sends (or closes), `ready` gets its connection; one whose deadline passes is closed.
class Waiter {
 public:
  using Ready = std::function<void(std::unique_ptr<Connection>)>;
  /// `limits` (request_seconds) outlives the Waiter.
  Waiter(Ready ready, const ConnectionLimits& limits);
  ~Waiter() { Stop(); }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;
  /// Waits for `c`'s client until `deadline` (once a request begins to arrive, until
  /// `request_seconds` after), reading the request as it comes.
  void Park(std::unique_ptr<Connection> c, Connection::Clock::time_point deadline);
  /// Ends the waiting: a connection whose client has sent something (or part of a request) goes
  /// to `ready` now, the others are closed, and so is any connection parked later.
  void Stop();

 private:
  struct Entry {
    std::unique_ptr<Connection> c;
    Connection::Clock::time_point deadline;
    bool arriving = false;  // a request has begun: the deadline is the request's
  };
  void Run();

  const Ready ready_;
  const ConnectionLimits& limits_;
  int epoll_ = -1;
  std::mutex mu_;
  std::unordered_map<int, Entry> waiting_;  // by socket
  size_t held_ = 0;                         // their buffers' bytes (max_waiting_bytes)
  bool stopped_ = false;
  std::thread thread_;
};

/// A thread per connection, started when none is idle, up to `max_threads`; then connections
/// wait their turn. shutdown() serves what is queued and joins; what comes after runs at once on
/// the caller's thread.
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

/// cpp-httplib's server with the connection loop above, an exclusive bind and a long backlog.
/// Its accept loop parks each new connection in the Waiter; the pool serves it from there.
class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(ConnectionLimits limits);
  ~HttpServer() override;
  /// Binds `host:port` (0: a free port) without SO_REUSEPORT; the port, or -1 (errno says why,
  /// or is 0 when the host did not resolve).
  int Bind(const std::string& host, int port);
  /// Connections stop waiting for requests (idle ones are closed); call before stop().
  void BeginStop();
  /// Waits for the connections still served (after stop() and the end of the listening thread).
  void FinishStop() { pool_.shutdown(); }
  const ConnectionLimits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(int sock) override;
  // Serves `c`'s requests while its client sends them; then parks it again, or closes it.
  void Serve(std::unique_ptr<Connection> c);

  const ConnectionLimits limits_;
  std::atomic<bool> stopping_{false};
  Waiter waiter_;
  ConnectionPool pool_;
};

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_CONNECTION_H_
