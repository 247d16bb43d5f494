// disco-llm-server's HTTP side without a model (models/llama/server/http.h, connection.h): a
// scheduler thread of the test's own feeds the jobs. Stopping writes the streams in flight to the
// end; slow, idle and pipelining clients; an exclusive port; a client that leaves.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/stat.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "llama/server/api.h"
#include "llama/server/chat_renderer.h"
#include "llama/server/connection.h"
#include "llama/server/http.h"
#include "llama/server/job.h"
#include "tokenizer/tokenizer.h"

namespace {

using llm_server::ApiError;
using llm_server::ChatRenderer;
using llm_server::ConnectionLimits;
using llm_server::HttpFront;
using llm_server::HttpOptions;
using llm_server::HttpServer;
using llm_server::Job;
using llm_server::JobQueue;
using llm_server::Piece;

// A byte-fallback BPE (<unk>, a, and <0xNN> for every byte): the front encodes no text here, but
// it is given a tokenizer as the server's is.
tokenizer::Tokenizer SmallTokenizer() {
  std::string vocab = R"("<unk>": 0, "a": 1)";
  for (int b = 0; b < 256; ++b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, R"(, "<0x%02X>": %d)", b, 2 + b);
    vocab += buf;
  }
  const std::string path = ::testing::TempDir() + "/disco-http-test-tokenizer.json";
  std::ofstream(path, std::ios::binary)
      << R"({"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null,)"
      << R"( "post_processor": null, "decoder": {"type": "ByteFallback"}, "model": {"type": "BPE",)"
      << R"( "unk_token": "<unk>", "byte_fallback": true, "vocab": {)" << vocab
      << R"(}, "merges": []}})";
  tokenizer::Tokenizer t = tokenizer::Tokenizer::FromFile(path);
  std::remove(path.c_str());
  return t;
}

// The front's options for the tests: a model "m" of 258 tokens, 1000 positions.
HttpOptions TestOptions(size_t max_body = 1 << 20) {
  HttpOptions o;
  o.model_name = "m";
  o.max_len = 1000;
  o.vocab_size = 258;
  o.max_body = max_body;
  return o;
}

// A client socket with a small receive buffer (set before connecting, so the window stays small):
// the server's writes block until the client reads.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  int size = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The scheduler has ended the job (as it has every job when the server stops) while the HTTP side
// is still writing its stream, blocked on a client that reads slowly: Stop must not cut the
// stream short (cpp-httplib's own stop() ends a chunked response at its next piece).
TEST(HttpFront, StopWritesTheStreamsInFlightToTheEnd) {
  constexpr int kPieces = 100;
  JobQueue queue;
  HttpFront front(TestOptions(), SmallTokenizer(), &queue);
  const int port = front.Start();

  const int fd = Connect(port);
  const std::string body = R"({"prompt": [1], "max_tokens": 100, "stream": true})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));

  // Far more than the socket buffers hold: the HTTP thread blocks in a write.
  std::shared_ptr<Job> job = queue.Take(1).at(0);
  for (int i = 0; i < kPieces; ++i) {
    Piece p;
    p.text = std::string(64 << 10, 'a');
    p.ids = {1};
    if (i == kPieces - 1) p.finish_reason = "length";
    job->Push(std::move(p));
  }
  std::thread stopper([&] { front.Stop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Stop is waiting by now
  const std::string got = ReadAll(fd);
  ::close(fd);
  stopper.join();
  EXPECT_EQ(Count(got, "data: {"), static_cast<size_t>(kPieces));
  EXPECT_EQ(Count(got, R"("finish_reason":"length")"), 1u);
  const std::string end = "data: [DONE]\n\n\r\n0\r\n\r\n";
  ASSERT_GE(got.size(), end.size());
  EXPECT_EQ(got.substr(got.size() - end.size()), end);
}

// A server with GET /health on a thread, as disco-llm-server's front runs it.
class TestServer {
 public:
  explicit TestServer(ConnectionLimits l) : srv_(l) {
    srv_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    port_ = srv_.Bind("127.0.0.1", 0);
    EXPECT_GT(port_, 0);
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~TestServer() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    srv_.BeginStop();
    srv_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  HttpServer srv_;
  int port_ = -1;
  std::thread thread_;
};

// Sends a request's head a byte at a time (every `gap`) without ending it, until the server
// closes the connection or `max_bytes` are sent; returns the bytes sent.
size_t Trickle(int fd, size_t max_bytes, std::chrono::milliseconds gap) {
  const std::string head = "GET /health HTTP/1.1\r\n";
  size_t sent = 0;
  for (; sent < max_bytes; ++sent) {
    const char c = sent < head.size() ? head[sent] : 'x';
    if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
    char b;
    if (::recv(fd, &b, 1, MSG_DONTWAIT) == 0) break;  // closed by the server
    std::this_thread::sleep_for(gap);
  }
  return sent;
}

std::string Get(int port, const std::string& path) {
  const int fd = Connect(port);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string got = ReadAll(fd);
  ::close(fd);
  return got;
}

// A client that sends its request a byte at a time is cut at the request deadline (the library's
// per-recv timeout alone would let it hold its thread for ever).
TEST(HttpServer, SlowClientIsCutAtTheRequestDeadline) {
  ConnectionLimits l;
  l.request_seconds = 1;
  TestServer srv(l);
  const int fd = Connect(srv.port());
  // 1 s of deadline against 10 s of trickling.
  EXPECT_LT(Trickle(fd, 100, std::chrono::milliseconds(100)), 100u);
  ::close(fd);
}

// Clients that hold connections (trickling, so no read timeout fires) do not keep /health
// waiting, and a stop does not wait for them.
TEST(HttpServer, HeldConnectionsNeitherBlockOthersNorTheStop) {
  TestServer srv{ConnectionLimits{}};
  std::vector<int> fds;
  for (int i = 0; i < 64; ++i) fds.push_back(Connect(srv.port()));
  std::atomic<bool> trickling{true};
  std::thread trickler([&] {
    // Up to 60 s, a byte per connection every 500 ms, until the server has closed them all.
    for (int round = 0; round < 120; ++round) {
      size_t open = 0;
      for (int fd : fds) {
        const char c = 'x';
        char b;
        if (::send(fd, &c, 1, MSG_NOSIGNAL) == 1 && ::recv(fd, &b, 1, MSG_DONTWAIT) != 0) ++open;
      }
      if (open == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    trickling = false;
  });
  EXPECT_NE(Get(srv.port(), "/health").find("HTTP/1.1 200"), std::string::npos);
  EXPECT_TRUE(trickling.load()) << "/health answered only once the held connections had ended";
  srv.Stop();
  EXPECT_TRUE(trickling.load()) << "the stop waited for the held connections";
  trickler.join();
  for (int fd : fds) ::close(fd);
}

// 2 serving threads and a 30 s request deadline: a client that holds a thread shows at once.
ConnectionLimits TwoThreads() {
  ConnectionLimits l;
  l.max_threads = 2;
  l.request_seconds = 30;
  return l;
}

// Clients that trickle their requests hold no thread: with 2 threads, 8 connections sending a
// request's head a byte at a time leave /health answered before the server answers or cuts any
// of them (at the request deadline, 30 s after its first byte; before, each held a thread until
// then, and /health waited for the 8 to be cut in turn).
TEST(HttpServer, TricklingClientsHoldNoThread) {
  TestServer srv(TwoThreads());
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) fds.push_back(Connect(srv.port()));
  std::atomic<int> cut{0};
  std::atomic<bool> done{false};
  std::thread trickler([&] {
    const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    for (size_t sent = 0; !done.load(); sent = (sent + 1) % head.size()) {
      int answered = 0;  // connections the server has written to, closed or reset
      for (int fd : fds) {
        char b;
        const bool sent_one = ::send(fd, &head[sent], 1, MSG_NOSIGNAL) == 1;
        const ssize_t got = ::recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
        if (!sent_one || got >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) ++answered;
      }
      cut = std::max(cut.load(), answered);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // every connection has begun
  EXPECT_NE(Get(srv.port(), "/health").find("HTTP/1.1 200"), std::string::npos);
  EXPECT_EQ(cut.load(), 0) << "/health was answered only once the server had cut trickling clients";
  done = true;
  trickler.join();
  srv.Stop();
  for (int fd : fds) ::close(fd);
}

// A request whose head and Content-Length body come in pieces, and a second one pipelined behind
// it in pieces, are each answered once whole (the first, a POST to no route, with 404).
TEST(HttpServer, ARequestInPiecesIsAnsweredOnceWhole) {
  TestServer srv{ConnectionLimits{}};
  const int fd = Connect(srv.port());
  const std::string one = "POST /x HTTP/1.1\r\nHost: x\r\ncontent-length:  5\r\n\r\nabcde";
  const std::string two = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const std::string all = one + two;
  for (size_t at = 0; at < all.size(); at += 7) {
    const size_t n = std::min<size_t>(7, all.size() - at);
    ASSERT_EQ(::send(fd, all.data() + at, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string got = ReadAll(fd);
  EXPECT_EQ(got.find("HTTP/1.1 404"), 0u) << got;
  EXPECT_EQ(Count(got, "HTTP/1.1 200"), 1u) << got;
  EXPECT_EQ(Count(got, "HTTP/1.1 "), 2u) << got;
  ::close(fd);
}

// A request larger than what the Waiter may hold for all connections (max_waiting_bytes) is
// answered 503 and closed (a thread given it would wait for the rest of a slow client's body).
TEST(HttpServer, ARequestPastTheWaitersBytesIs503) {
  ConnectionLimits l;
  l.max_waiting_bytes = 64 << 10;
  TestServer srv(l);
  const int fd = Connect(srv.port());
  const std::string body(300 << 10, 'b');
  const std::string req = "POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  std::thread writer([&] { ::send(fd, req.data(), req.size(), MSG_NOSIGNAL); });
  const std::string got = ReadAll(fd);
  writer.join();
  EXPECT_TRUE(got.empty() || got.find("HTTP/1.1 503") == 0) << got.substr(0, 200);
  ::close(fd);
  EXPECT_NE(Get(srv.port(), "/health").find("HTTP/1.1 200"), std::string::npos);
}

// Chunked bodies and bodies after "Expect: 100-continue" are read whole by the Waiter too: 8
// clients trickling them hold none of 2 threads (/health answered before any is cut), and a
// client that asks to continue is told to before it sends its body, which is then answered.
TEST(HttpServer, ChunkedAndContinuedBodiesHoldNoThread) {
  TestServer srv(TwoThreads());
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(Connect(srv.port()));
    const std::string head =
        i % 2 == 0 ? "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"
                   : "POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: "
                     "9\r\n\r\n";
    ASSERT_EQ(::send(fds.back(), head.data(), head.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(head.size()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_NE(Get(srv.port(), "/health").find("HTTP/1.1 200"), std::string::npos);
  for (size_t i = 0; i < fds.size(); ++i) {  // told to continue, or nothing yet (not cut)
    char buf[256];
    const ssize_t n = ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
    EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))),
              i % 2 == 0 ? "" : "HTTP/1.1 100 Continue\r\n\r\n")
        << "connection " << i;
    if (i % 2 == 0) {
      EXPECT_EQ(n, -1) << "connection " << i << " was answered or closed";
    }
  }
  for (size_t i = 0; i < fds.size(); ++i) {  // the rest of each body: each answered (404)
    const std::string rest = i % 2 == 0 ? "defghijklmnop\r\n0\r\n\r\n" : "123456789";
    ASSERT_EQ(::send(fds[i], rest.data(), rest.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(rest.size()));
    ::shutdown(fds[i], SHUT_WR);
  }
  for (int fd : fds) {
    EXPECT_NE(ReadAll(fd).find("HTTP/1.1 404"), std::string::npos);
    ::close(fd);
  }
}

// Chunks the parser would wait on (a size past the limit, a size line that is not hex or ends in
// a bare LF) are answered at once by the Waiter (before: a thread waited for their data until the
// request deadline, then 400 or nothing).
TEST(HttpServer, MalformedOrHugeChunksAreAnsweredAtOnce) {
  ConnectionLimits l;
  l.request_seconds = 30;
  TestServer srv(l);
  const std::string head = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const auto& [chunks, status] :
       std::vector<std::pair<std::string, std::string>>{{"200000\r\nab", "413"},
                                                        {"100000000\r\n", "413"},
                                                        {"-5\r\n", "400"},
                                                        {"21\nabc", "400"},
                                                        {"3\r\nabc\r\n0\n\n", "400"},
                                                        {"3\r\nabcX\r\n", "400"}}) {
    const int fd = Connect(srv.port());
    const std::string req = head + chunks;
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    EXPECT_EQ(ReadAll(fd).find("HTTP/1.1 " + status), 0u) << chunks;
    ::close(fd);
  }
}

// Whether the server has closed `fd` (EOF or reset), without waiting.
bool ClosedByServer(int fd) {
  char b;
  const ssize_t n = ::recv(fd, &b, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// 1000 connections that send nothing (more than the 512 threads that serve requests) hold no
// thread: /health is answered, on a new connection and on a kept-alive one that idled between
// two requests, while they are all still open; a stop then closes them at once.
TEST(HttpServer, AThousandIdleConnectionsHoldNoThread) {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < 2200 && files.rlim_max >= 2200) {
    files.rlim_cur = 2200;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur < 2200) GTEST_SKIP() << "RLIMIT_NOFILE " << files.rlim_cur << " < 2200";
  ConnectionLimits l;
  l.first_seconds = 120;  // the idle connections outlive the test unless the server closes them
  l.idle_seconds = 120;
  TestServer srv(l);
  std::vector<int> idle;
  for (int i = 0; i < 1000; ++i) idle.push_back(Connect(srv.port()));
  const int kept = Connect(srv.port());
  const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(::write(kept, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\nok") == std::string::npos) {
      const ssize_t n = ::read(kept, buf, sizeof buf);
      ASSERT_GT(n, 0) << "the kept-alive connection ended in round " << round << ": " << got;
      got.append(buf, static_cast<size_t>(n));
    }
    EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  }
  EXPECT_NE(Get(srv.port(), "/health").find("HTTP/1.1 200"), std::string::npos);
  size_t closed = 0;
  for (int fd : idle) closed += ClosedByServer(fd) ? 1 : 0;
  EXPECT_EQ(closed, 0u) << "idle connections were closed before /health was answered";
  srv.Stop();
  for (int fd : idle) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 60000), 1) << "an idle connection outlived the stop";
    ::close(fd);
  }
  ::close(kept);
}

// Requests written back to back on one connection are answered each, in order.
TEST(HttpServer, PipelinedRequestsAreAllAnswered) {
  TestServer srv{ConnectionLimits{}};
  const int fd = Connect(srv.port());
  const std::string one = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string all =
      one + one + "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::write(fd, all.data(), all.size()), static_cast<ssize_t>(all.size()));
  EXPECT_EQ(Count(ReadAll(fd), "HTTP/1.1 200"), 3u);
  ::close(fd);
}

// A second server on a port in use fails (the library's SO_REUSEPORT would have let it share
// the first one's clients).
TEST(HttpServer, ASecondServerOnThePortIsRefused) {
  TestServer first{ConnectionLimits{}};
  HttpServer second{ConnectionLimits{}};
  EXPECT_EQ(second.Bind("127.0.0.1", first.port()), -1);
  EXPECT_EQ(errno, EADDRINUSE);
}

// A client that waits for a whole (not streamed) response and goes away cancels its job, so the
// scheduler frees its place at the next step.
TEST(HttpFront, ANonStreamedClientThatLeavesCancelsItsJob) {
  JobQueue queue;
  HttpFront front(TestOptions(), SmallTokenizer(), &queue);
  const int port = front.Start();
  const int fd = Connect(port);
  const std::string body = R"({"prompt": [1], "max_tokens": 10})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::shared_ptr<Job> job = queue.Take(1).at(0);
  Piece first;  // it leaves after its first token: the answer is still being gathered
  first.text = "x";
  first.ids = {1};
  job->Push(std::move(first));
  ::close(fd);
  for (int i = 0; i < 600 && !job->cancelled(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(job->cancelled());
  job->Fail(499, "gone");
  front.Stop();
}

// A directory holding only `tokenizer_config.json` with `config` as its text.
std::string ChatDir(const std::string& name, const std::string& config) {
  const std::string dir = ::testing::TempDir() + "/disco-chat-" + name;
  ::mkdir(dir.c_str(), 0700);
  std::ofstream(dir + "/tokenizer_config.json") << config;
  return dir;
}

int ApiStatus(const std::function<void()>& f, std::string* message) {
  try {
    f();
  } catch (const ApiError& e) {
    *message = e.what();
    return e.status();
  }
  return 0;
}

// The chat template is rendered by Jinja2 in a child; its errors are 400s naming the file, a
// render that loops is cut (500) and the next one gets a new child.
TEST(ChatRenderer, RendersRefusesAndOutlivesALoopingTemplate) {
  if (llm_server::FindChatScript().empty()) GTEST_SKIP() << "disco's chat.py is not built here";
  const std::string dir = ChatDir(
      "loop",
      R"({"bos_token": "<s>", "chat_template": "{% for m in messages %})"
      R"({% if m['content'] == 'loop' %}{% for a in 'x' * 100000 %}{% for b in )"
      R"('x' * 100000 %}{% endfor %}{% endfor %}{% endif %})"
      R"({% if m['content'] == 'raise' %}{{ raise_exception('no ' + m['role']) }}{% endif %})"
      R"({{ bos_token }}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"})");
  ChatRenderer chat(dir);
  ASSERT_EQ(chat.unavailable(), "") << chat.status();
  EXPECT_NE(chat.status().find("tokenizer_config.json"), std::string::npos);
  const std::string hi = R"([{"role": "user", "content": "hi"}])";
  EXPECT_EQ(chat.Render(hi), "<s><|user|>hi");
  std::string msg;
  EXPECT_EQ(ApiStatus([&] { chat.Render(R"([{"role": "user", "content": "raise"}])"); }, &msg),
            400);
  EXPECT_NE(msg.find("no user"), std::string::npos) << msg;
  EXPECT_EQ(ApiStatus([&] { chat.Render(R"([{"role": "user", "content": "loop"}])"); }, &msg), 500);
  EXPECT_NE(msg.find("did not render within"), std::string::npos) << msg;
  EXPECT_EQ(chat.Render(hi), "<s><|user|>hi");
}

TEST(ChatRenderer, ACheckpointWithoutATemplateIsA400) {
  if (llm_server::FindChatScript().empty()) GTEST_SKIP() << "disco's chat.py is not built here";
  ChatRenderer chat(ChatDir("none", R"({"bos_token": "<s>"})"));
  EXPECT_EQ(chat.unavailable_code(), 400);
  EXPECT_NE(chat.unavailable().find("no chat template"), std::string::npos) << chat.unavailable();
  std::string msg;
  EXPECT_EQ(ApiStatus([&] { chat.Render("[]"); }, &msg), 400);
}

// Writes `raw` on a new connection and reads until the server closes it.
std::string Exchange(int port, const std::string& raw) {
  const int fd = Connect(port);
  EXPECT_EQ(::write(fd, raw.data(), raw.size()), static_cast<ssize_t>(raw.size()));
  std::string got = ReadAll(fd);
  ::close(fd);
  return got;
}

// A front with a scheduler of the test's own that answers every job with one piece.
class FrontWithScheduler {
 public:
  explicit FrontWithScheduler(size_t max_body = 1 << 20) {
    front_ = std::make_unique<HttpFront>(TestOptions(max_body), SmallTokenizer(), &queue_);
    port_ = front_->Start();
    scheduler_ = std::thread([this] {
      for (;;) {
        std::vector<std::shared_ptr<Job>> jobs = queue_.Take(1);
        if (jobs.empty()) return;  // woken to end
        Piece p;
        p.text = "x";
        p.ids = {1};
        p.finish_reason = "length";
        jobs[0]->Push(std::move(p));
      }
    });
  }
  ~FrontWithScheduler() {
    queue_.Close();
    queue_.Wake();
    scheduler_.join();
    front_->Stop();
  }
  int port() const { return port_; }

 private:
  JobQueue queue_;
  std::unique_ptr<HttpFront> front_;
  int port_ = -1;
  std::thread scheduler_;
};

std::string Post(const std::string& body, const std::string& headers) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + "\r\n" +
         body;
}

// curl -d sends JSON as application/x-www-form-urlencoded: the library would cap that at 8 KiB.
TEST(HttpFront, AFormEncodedJsonBodyOver8KiBIsServed) {
  FrontWithScheduler f;
  const std::string body = R"({"prompt": [1], "max_tokens": 1})" + std::string(20000, ' ');
  const std::string got =
      Exchange(f.port(), Post(body,
                              "Content-Type: application/x-www-form-urlencoded\r\n"
                              "Content-Length: " +
                                  std::to_string(body.size()) + "\r\n"));
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got.substr(0, 300);
}

// A chunked body is held to the limit as a sized one is.
TEST(HttpFront, AChunkedBodyPastTheLimitIs413) {
  FrontWithScheduler f(1000);
  std::string chunks;
  for (int i = 0; i < 5; ++i) chunks += "200\r\n" + std::string(512, ' ') + "\r\n";
  const std::string got =
      Exchange(f.port(), Post(chunks + "0\r\n\r\n", "Transfer-Encoding: chunked\r\n"));
  EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 300);
}

// What could be read two ways is refused, and a request the library could not parse ends its
// connection: bytes after it are never taken as a next request.
TEST(HttpFront, AmbiguousOrMalformedFramingEndsTheConnection) {
  FrontWithScheduler f;
  const std::string hidden = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string both =
      Exchange(f.port(),
               "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
               "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
                   hidden);
  EXPECT_EQ(both.rfind("HTTP/1.1 400", 0), 0u) << both.substr(0, 300);
  EXPECT_EQ(Count(both, "HTTP/1.1 "), 1u) << both;
  const std::string two =
      Exchange(f.port(),
               "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
               "Content-Length: 40\r\n\r\n{}" +
                   hidden);
  EXPECT_EQ(two.rfind("HTTP/1.1 400", 0), 0u) << two.substr(0, 300);
  EXPECT_EQ(Count(two, "HTTP/1.1 "), 1u) << two;
  const std::string long_header = Exchange(
      f.port(), "GET /health HTTP/1.1\r\nX-A: " + std::string(10000, 'a') + "\r\n\r\n" + hidden);
  EXPECT_EQ(long_header.rfind("HTTP/1.1 400", 0), 0u) << long_header.substr(0, 300);
  EXPECT_EQ(Count(long_header, "HTTP/1.1 "), 1u) << long_header;
}

}  // namespace
