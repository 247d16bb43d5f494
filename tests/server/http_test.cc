// disco-llm-server's HTTP front (models/llama/server/http.h) without a model: a scheduler thread
// of the test's own feeds the job. Stopping the server writes the streams in flight to the end.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "llama/server/http.h"
#include "llama/server/job.h"
#include "tokenizer/tokenizer.h"

namespace {

using llm_server::HttpFront;
using llm_server::HttpOptions;
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
  HttpOptions o;
  o.model_name = "m";
  o.max_len = 1000;
  o.vocab_size = 258;
  JobQueue queue;
  HttpFront front(o, SmallTokenizer(), &queue);
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

}  // namespace
