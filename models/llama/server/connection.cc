#include "llama/server/connection.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>

namespace llm_server {
namespace {

thread_local Connection* current = nullptr;

constexpr size_t kBufferBytes = 16 << 10;  // a connection's buffer, unless a request needs more

// Sets the thread's current connection for a scope.
class CurrentScope {
 public:
  explicit CurrentScope(Connection* c) { current = c; }
  ~CurrentScope() { current = nullptr; }
  CurrentScope(const CurrentScope&) = delete;
  CurrentScope& operator=(const CurrentScope&) = delete;
};

void AddressOf(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "0";
  if (rc == 0) {
    getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                NI_NUMERICHOST | NI_NUMERICSERV);
  }
  ip = host;
  port = std::atoi(serv);
}

// Ends a connection whose client may still be sending (a body left unread): closing with unread
// bytes would reset it, and the client could lose the answer already sent. So, as web servers
// do, the answer is followed by a half close and what still comes is read and dropped for a
// while.
void LingeringClose(int fd) {
  shutdown(fd, SHUT_WR);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  char buf[16384];
  for (size_t dropped = 0; dropped < (size_t{8} << 20);) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
}

}  // namespace

Connection::Connection(int fd, const ConnectionLimits& limits, const std::atomic<bool>& stopping)
    : fd_(fd), limits_(limits), stopping_(stopping), buf_(kBufferBytes) {}

Connection::~Connection() {
  shutdown(fd_, SHUT_RDWR);
  close(fd_);
}

Connection* Connection::Current() { return current; }

bool Connection::WaitFor(short events, Clock::time_point deadline) const {
  for (;;) {
    Clock::time_point now = Clock::now();
    if (stopping_.load()) {
      if (stop_seen_ == Clock::time_point{}) stop_seen_ = now;
      deadline = std::min(deadline, stop_seen_ + std::chrono::seconds(limits_.stop_grace_seconds));
    }
    if (now >= deadline) return false;
    // Slices of 100 ms: a stop is seen soon.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    pollfd p{fd_, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 100)));
    if (n < 0 && errno != EINTR) return false;
    if (n > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }
}

bool Connection::AwaitRequest() {
  request_bytes_ = 0;
  continued_ = false;
  over_limit_ = close_after_ = false;
  if (begin_ == end_) {
    // Nothing buffered: wait for the client (a stopping server waits no more than its grace); a
    // connection from the Waiter is readable already (its client sent something, or closed).
    const int wait = first_ ? limits_.first_seconds : limits_.idle_seconds;
    first_ = false;
    if (!WaitFor(POLLIN, Clock::now() + std::chrono::seconds(wait))) return false;
    char byte;
    const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK);
    if (n <= 0) return false;  // closed (or reset)
  }
  deadline_ = Clock::now() + std::chrono::seconds(limits_.request_seconds);
  return true;
}

void Connection::ShrinkBuffer() {
  if (begin_ == end_ && buf_.size() > kBufferBytes) {
    std::vector<char>(kBufferBytes).swap(buf_);
    begin_ = end_ = 0;
  }
}

Connection::Gathered Connection::Gather(size_t room) {
  if (begin_ > 0) {  // what is left of the buffer moves to its start
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  const size_t most = limits_.max_request_bytes + 1;  // one past: the parser answers 413
  for (;;) {
    if (end_ == buf_.size()) {
      const size_t grown = std::min(most, buf_.size() * 2);
      if (buf_.size() >= most) return Gathered::kWhole;
      if (grown - buf_.size() > room) {
        refuse_ = 503;
        return Gathered::kRefused;
      }
      room -= grown - buf_.size();
      buf_.resize(grown);
    }
    const ssize_t n = recv(fd_, buf_.data() + end_, buf_.size() - end_, MSG_DONTWAIT);
    if (n > 0) {
      end_ += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      return Gathered::kWhole;  // closed or failed: the thread reads what came and ends it
    }
  }
  const Framing f = Frame();
  if (f.refuse != 0) {
    refuse_ = f.refuse;
    return Gathered::kRefused;
  }
  if (f.whole) return Gathered::kWhole;
  if (f.expects_continue && !continued_) {
    // The client waits for this before it sends the body (the parser sends its own again, once
    // the body is in: a client reads any number of 1xx answers before the final one).
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    continued_ = send(fd_, kContinue, sizeof kContinue - 1, MSG_DONTWAIT | MSG_NOSIGNAL) ==
                 static_cast<ssize_t>(sizeof kContinue - 1);
  }
  return Gathered::kMore;
}

void Connection::Refuse() {
  const char* reason = refuse_ == 413   ? "Payload Too Large"
                       : refuse_ == 503 ? "Service Unavailable"
                                        : "Bad Request";
  char answer[128];
  const int n = std::snprintf(answer, sizeof answer,
                              "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                              refuse_, reason);
  (void)send(fd_, answer, static_cast<size_t>(n), MSG_DONTWAIT | MSG_NOSIGNAL);
}

namespace {

// Whether the len characters at `text` are `lower` (lower case), whatever their case.
bool EqualsLower(const char* lower, size_t len, const char* text) {
  return std::equal(lower, lower + len, text, [](char a, char b) {
    return a == std::tolower(static_cast<unsigned char>(b));
  });
}

// The value of header `name` (lower case, with its colon) in the head [p, end) of CRLF lines, or
// nullptr; `found` counts its lines.
const char* HeaderValue(const char* p, const char* end, const char* name, int* found) {
  const size_t len = std::strlen(name);
  const char* value = nullptr;
  for (const char* line = p; line < end;) {
    const char* eol = static_cast<const char*>(std::memchr(line, '\n', end - line));
    if (eol == nullptr) eol = end;
    if (static_cast<size_t>(eol - line) > len && EqualsLower(name, len, line)) {
      value = line + len;
      ++*found;
    }
    line = eol + 1;
  }
  return value;
}

// Whether the header value at `v` (after its colon, up to its line's end before `end`) is `token`,
// whatever its case and the spaces around it.
bool Token(const char* v, const char* end, const char* token) {
  const char* eol = static_cast<const char*>(std::memchr(v, '\r', end - v));
  if (eol == nullptr) eol = end;
  while (v < eol && (*v == ' ' || *v == '\t')) ++v;
  while (eol > v && (eol[-1] == ' ' || eol[-1] == '\t')) --eol;
  const size_t len = std::strlen(token);
  return static_cast<size_t>(eol - v) == len && EqualsLower(token, len, v);
}

// The chunked body of the request in [p, p + have), scanned from *at (a chunk-size line, or with
// *trailers a trailer line): whole (0), still arriving (-1: *at and *trailers then say where the
// unit still arriving begins), or an HTTP status to answer at once (400: a size line that is not
// hex ended by CRLF, data not followed by CRLF; 413: a chunk past the limit `most`). Whole means
// chunks of a hex size line (extensions after ';' allowed) and CRLF-ended data, then a chunk of
// size 0 and trailer lines up to an empty one. The Waiter answers a refusal itself: cpp-httplib
// would wait for the data of a huge chunk until the request deadline, holding a thread.
int ChunkedStatus(const char* p, size_t have, size_t* at, bool* trailers, size_t most) {
  const char* end = p + have;
  // The next line from `from`: its end (the LF), or nullptr while it arrives; a bare LF is refused.
  auto line_end = [&](const char* from, int* status) -> const char* {
    const char* lf = static_cast<const char*>(std::memchr(from, '\n', end - from));
    if (lf != nullptr && (lf == from || lf[-1] != '\r')) *status = 400;
    return lf;
  };
  int status = 0;
  while (!*trailers) {
    const char* line = p + *at;
    const char* lf = line_end(line, &status);
    if (status != 0) return status;
    if (lf == nullptr) return end - line > 1024 ? 400 : -1;  // a size line that never ends
    size_t size = 0;
    int digits = 0;
    const char* q = line;
    for (; q < lf - 1 && std::isxdigit(static_cast<unsigned char>(*q)); ++q) {
      size = size * 16 + static_cast<size_t>(std::isdigit(static_cast<unsigned char>(*q))
                                                 ? *q - '0'
                                                 : std::tolower(*q) - 'a' + 10);
      if (++digits > 8 && size != 0) return 413;  // leading zeros aside, past any limit
    }
    if (digits == 0 || (q < lf - 1 && *q != ';')) return 400;
    const size_t next = static_cast<size_t>(lf - p) + 1;
    if (size == 0) {
      *at = next;
      *trailers = true;
      break;
    }
    if (size > most) return 413;
    const size_t data_end = next + size;  // the data, then its CRLF
    if (data_end + 2 > have) return -1;   // *at stays at this chunk's size line
    if (p[data_end] != '\r' || p[data_end + 1] != '\n') return 400;
    *at = data_end + 2;
  }
  for (;;) {  // trailers, up to an empty line
    const char* lf = line_end(p + *at, &status);
    if (status != 0) return status;
    if (lf == nullptr) return -1;
    if (lf == p + *at + 1) return 0;
    *at = static_cast<size_t>(lf - p) + 1;
  }
}

}  // namespace

Connection::Framing Connection::Frame() const {
  Framing f;
  const char* p = buf_.data() + begin_;
  const size_t have = end_ - begin_;
  f.whole = have >= limits_.max_request_bytes;
  if (f.whole) return f;                                // over the limit: 413
  if (scan_.head == 0 && !ScanHead(p, have)) return f;  // the head is still arriving
  f.expects_continue = scan_.expects_continue;
  switch (scan_.body) {
    case Scan::Body::kNone:
      f.whole = true;
      break;
    case Scan::Body::kLength:
      f.whole = have >= scan_.head + scan_.length;
      break;
    case Scan::Body::kChunked: {
      if (scan_.chunk == 0) scan_.chunk = scan_.head;
      const int status =
          ChunkedStatus(p, have, &scan_.chunk, &scan_.trailers, limits_.max_request_bytes);
      f.whole = status >= 0;
      f.refuse = status > 0 ? status : 0;
      break;
    }
  }
  return f;
}

bool Connection::ScanHead(const char* p, size_t have) const {
  static const char kEnd[] = "\r\n\r\n";  // searched for in what came since the last search
  const char* from = p + (scan_.head_searched > 3 ? scan_.head_searched - 3 : 0);
  const char* head_end = std::search(from, p + have, kEnd, kEnd + 4);
  scan_.head_searched = have;
  if (head_end == p + have) return false;
  scan_.head = static_cast<size_t>(head_end - p) + 4;
  int lengths = 0, encodings = 0, expects = 0;
  const char* length = HeaderValue(p, head_end, "content-length:", &lengths);
  const char* encoding = HeaderValue(p, head_end, "transfer-encoding:", &encodings);
  const char* expect = HeaderValue(p, head_end, "expect:", &expects);
  // No body, an ambiguous one or another coding: whole, the parser answers it at once.
  scan_.body = Scan::Body::kNone;
  if (lengths + encodings != 1) return true;
  scan_.expects_continue = expects == 1 && Token(expect, head_end, "100-continue");
  if (encodings == 1) {
    if (Token(encoding, head_end, "chunked")) scan_.body = Scan::Body::kChunked;
    return true;
  }
  while (*length == ' ' || *length == '\t') ++length;
  size_t body = 0;
  for (; *length >= '0' && *length <= '9'; ++length) {
    body = body * 10 + static_cast<size_t>(*length - '0');
    if (body > limits_.max_request_bytes) return true;  // over the limit: 413 at once
  }
  scan_.body = Scan::Body::kLength;
  scan_.length = body;
  return true;
}

bool Connection::PeerGone() const {
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool Connection::is_readable() const { return begin_ < end_ || WaitFor(POLLIN, deadline_); }

bool Connection::is_writable() const {
  pollfd p{fd_, POLLOUT, 0};
  return poll(&p, 1, limits_.write_seconds * 1000) > 0 && (p.revents & POLLOUT) != 0 &&
         (p.revents & (POLLHUP | POLLERR)) == 0;
}

ssize_t Connection::read(char* ptr, size_t size) {
  if (begin_ == end_) {
    if (!is_readable()) return -1;
    ssize_t n;
    do {
      n = recv(fd_, buf_.data(), buf_.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    begin_ = 0;
    end_ = static_cast<size_t>(n);
  }
  // Only what the parser takes counts: bytes of a pipelined next request stay buffered for it.
  const size_t k = std::min(size, end_ - begin_);
  if (request_bytes_ + k > limits_.max_request_bytes) {
    over_limit_ = true;
    return -1;
  }
  std::memcpy(ptr, buf_.data() + begin_, k);
  begin_ += k;
  request_bytes_ += k;
  return static_cast<ssize_t>(k);
}

ssize_t Connection::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n;
  do {
    n = send(fd_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

void Connection::get_remote_ip_and_port(std::string& ip, int& port) const {
  AddressOf(fd_, true, ip, port);
}

void Connection::get_local_ip_and_port(std::string& ip, int& port) const {
  AddressOf(fd_, false, ip, port);
}

Waiter::Waiter(Ready ready, const ConnectionLimits& limits)
    : ready_(std::move(ready)), limits_(limits), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
  if (epoll_ < 0) throw std::system_error(errno, std::generic_category(), "epoll_create1");
  thread_ = std::thread([this] { Run(); });
}

void Waiter::Park(std::unique_ptr<Connection> c, Connection::Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return;  // c goes: closed
  const int fd = c->socket();
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) return;  // cannot wait: closed
  const bool arriving = c->HasBuffered();  // part of a pipelined request came with the last one
  if (arriving) {
    deadline = std::min(deadline,
                        Connection::Clock::now() + std::chrono::seconds(limits_.request_seconds));
  }
  held_ += c->buffer_bytes();
  waiting_[fd] = Entry{std::move(c), deadline, arriving};
}

void Waiter::Run() {
  std::vector<epoll_event> events(256);
  for (;;) {
    // Slices of 100 ms: deadlines and a stop are seen soon.
    const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 100);
    std::vector<std::unique_ptr<Connection>> ready, expired, refused;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      const auto now = Connection::Clock::now();
      for (int i = 0; i < n; ++i) {
        auto it = waiting_.find(events[static_cast<size_t>(i)].data.fd);
        if (it == waiting_.end()) continue;
        Entry& e = it->second;
        const size_t before = e.c->buffer_bytes();
        const size_t room = limits_.max_waiting_bytes - std::min(held_, limits_.max_waiting_bytes);
        const Connection::Gathered g = e.c->Gather(room);
        held_ += e.c->buffer_bytes() - before;
        if (g == Connection::Gathered::kMore) {  // it has request_seconds from its first byte
          if (!e.arriving) e.deadline = now + std::chrono::seconds(limits_.request_seconds);
          e.arriving = true;
          continue;
        }
        epoll_ctl(epoll_, EPOLL_CTL_DEL, it->first, nullptr);
        held_ -= e.c->buffer_bytes();
        (g == Connection::Gathered::kWhole ? ready : refused).push_back(std::move(e.c));
        waiting_.erase(it);
      }
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        epoll_ctl(epoll_, EPOLL_CTL_DEL, it->first, nullptr);
        held_ -= it->second.c->buffer_bytes();
        expired.push_back(std::move(it->second.c));
        it = waiting_.erase(it);
      }
    }
    for (auto& c : ready) ready_(std::move(c));
    // Refused ones are answered (503, 400, 413); they and the expired ones close here.
    for (auto& c : refused) c->Refuse();
  }
}

void Waiter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  if (thread_.joinable()) thread_.join();
  std::unordered_map<int, Entry> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(waiting_);
    held_ = 0;
  }
  for (auto& [fd, e] : left) {  // a request arriving (or sent) is read and answered (503)
    pollfd p{fd, POLLIN, 0};
    if (e.arriving || (poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0)) ready_(std::move(e.c));
  }
  left.clear();  // the others close
  if (epoll_ >= 0) close(epoll_);
  epoll_ = -1;
}

namespace {

// The library's accept loop hands each new socket to its task queue: this one runs the task at
// once (HttpServer::process_and_close_socket only parks the connection).
class ParkAtOnce : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

HttpServer::HttpServer(ConnectionLimits limits)
    : limits_(limits),
      waiter_(
          [this](std::unique_ptr<Connection> c) {
            Connection* raw = c.release();  // a std::function task must be copyable
            pool_.enqueue([this, raw] { Serve(std::unique_ptr<Connection>(raw)); });
          },
          limits_),
      pool_(limits.max_threads) {
  // SO_REUSEADDR (a restarted server binds over connections in TIME_WAIT) but not the library's
  // SO_REUSEPORT: a second server on a port in use must fail, not share its clients.
  set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  new_task_queue = [] { return new ParkAtOnce; };
}

HttpServer::~HttpServer() {
  BeginStop();
  pool_.shutdown();
}

int HttpServer::Bind(const std::string& host, int port) {
  errno = 0;
  if (port == 0) {
    port = bind_to_any_port(host);
  } else if (!bind_to_port(host, port)) {
    port = -1;
  }
  // The library listens with a backlog of 5: bursts of clients would be refused.
  if (port > 0) ::listen(svr_sock_, SOMAXCONN);
  return port;
}

void HttpServer::BeginStop() {
  stopping_ = true;
  waiter_.Stop();
}

bool HttpServer::process_and_close_socket(int sock) {
  waiter_.Park(std::make_unique<Connection>(sock, limits_, stopping_),
               Connection::Clock::now() + std::chrono::seconds(limits_.first_seconds));
  return true;
}

void HttpServer::Serve(std::unique_ptr<Connection> c) {
  CurrentScope scope(c.get());
  while (c->served() < limits_.max_requests_per_connection && c->AwaitRequest()) {
    bool closed = false;
    const bool last = c->served() + 1 == limits_.max_requests_per_connection || stopping_.load();
    const bool ok = process_request(*c, last, closed, nullptr);
    c->CountRequest();
    // A request cut at the byte limit leaves the rest of its body unread: no next request.
    if (!ok || closed || last || c->close_after()) {
      if (c->close_after()) LingeringClose(c->socket());
      return;  // c closes
    }
    c->ShrinkBuffer();
    if (!c->HasBuffered() || !c->Frame().whole) {  // the Waiter waits for the next request
      waiter_.Park(std::move(c),
                   Connection::Clock::now() + std::chrono::seconds(limits_.idle_seconds));
      return;
    }
  }
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shutdown_) {  // no thread will take it
    lock.unlock();
    fn();
    return;
  }
  tasks_.push_back(std::move(fn));
  if (idle_ < tasks_.size() && threads_.size() < max_threads_) {
    threads_.emplace_back([this] { Work(); });
  }
  cv_.notify_one();
}

void ConnectionPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return shutdown_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // shut down and nothing left
    std::function<void()> fn = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    fn();
    lock.lock();
  }
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

}  // namespace llm_server
