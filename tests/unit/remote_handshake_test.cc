// A process that holds a served job's port (taken before the server started, or after it ended)
// must learn nothing from a client that it could check the key against: the client proves that it
// holds the key only after the server has shown it speaks the protocol, never sends the key, and
// gives up with a clear error, in bounded time, when the proof of the key does not come back.
// Black-box: only disco::Connect (include/disco/remote.h) and a plain TCP listener.
#include <arpa/inet.h>
#include <disco/error.h>
#include <disco/remote.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>

namespace disco {
namespace {

using Clock = std::chrono::steady_clock;

// A plain TCP listener on a loopback port: accepts one connection, records everything the client
// sends for `listen_ms`, and answers with `reply` after the client's first `after` bytes (nothing
// when `reply` is empty).
class Squatter {
 public:
  Squatter(std::string reply, size_t after, std::string second_reply = "", size_t second_after = 0)
      : reply_(std::move(reply)),
        after_(after),
        second_reply_(std::move(second_reply)),
        second_after_(second_after) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen: " << std::strerror(errno);
    }
    port_ = ntohs(a.sin_port);
    heard_ = std::async(std::launch::async, [this] { return Serve(); });
  }
  ~Squatter() { close(fd_); }
  int port() const { return port_; }
  /// Everything the client sent.
  std::string Heard() { return heard_.get(); }

 private:
  std::string Serve() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 20000) <= 0) return "(no connection)";
    int c = accept(fd_, nullptr, nullptr);
    std::string got;
    bool replied = false, replied_again = false;
    const auto end = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < end) {
      if (!replied && !reply_.empty() && got.size() >= after_) {
        replied = send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL) > 0;
      }
      if (replied && !replied_again && !second_reply_.empty() && got.size() >= second_after_) {
        replied_again = send(c, second_reply_.data(), second_reply_.size(), MSG_NOSIGNAL) > 0;
      }
      pollfd q{c, POLLIN, 0};
      if (poll(&q, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t k = recv(c, buf, sizeof buf, 0);
      if (k <= 0) break;  // the client gave up and closed
      got.append(buf, static_cast<size_t>(k));
    }
    close(c);
    return got;
  }
  std::string reply_;
  size_t after_;
  std::string second_reply_;
  size_t second_after_;
  int fd_ = -1;
  int port_ = 0;
  std::future<std::string> heard_;
};

const std::string kKey = "a-key-of-thirty-two-characters!!";

// Connects to the squatter with kKey; returns the error, and the seconds it took.
std::string ConnectError(int port, double* seconds) {
  ConnectOptions o;
  o.connect_timeout_ms = 2000;
  const auto t0 = Clock::now();
  std::string error;
  try {
    Connect("127.0.0.1", port, kKey, o);
    error = "(connected)";
  } catch (const Error& e) {
    error = e.what();
  }
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return error;
}

TEST(RemoteHandshakeTest, ASilentListenerLearnsNothingAndTheClientTimesOut) {
  Squatter squatter("", 0);
  double seconds = 0;
  std::string error = ConnectError(squatter.port(), &seconds);
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
  EXPECT_LT(seconds, 10) << error;
  std::string heard = squatter.Heard();
  EXPECT_EQ(heard.find(kKey), std::string::npos) << "the client sent the key to a squatter";
  EXPECT_LE(heard.size(), 8u) << "the client sent more than its hello before any challenge";
}

TEST(RemoteHandshakeTest, AListenerThatPlaysAlongCannotFakeTheProofOfTheKey) {
  // The squatter answers the hello with "ok" and a challenge, then the client's proof with "ok"
  // and a made-up proof of its own: the client refuses it before sending any request.
  std::string challenge(1, '\0');
  challenge += std::string(32, 'N');
  std::string fake_proof(1, '\0');
  fake_proof += std::string(32, 'P');
  Squatter squatter(challenge, 8, fake_proof, 8 + 64);
  double seconds = 0;
  std::string error = ConnectError(squatter.port(), &seconds);
  EXPECT_NE(error.find("did not prove that it holds the key"), std::string::npos) << error;
  EXPECT_LT(seconds, 10) << error;
  std::string heard = squatter.Heard();
  EXPECT_EQ(heard.find(kKey), std::string::npos) << "the client sent the key to a squatter";
  EXPECT_EQ(heard.size(), 8u + 64u) << "the client sent a request after a false proof";
}

TEST(RemoteHandshakeTest, AListenerThatAnswersJunkGetsAClearError) {
  Squatter squatter("HTTP/1.1 400 Bad Request\r\n\r\n", 1);
  double seconds = 0;
  std::string error = ConnectError(squatter.port(), &seconds);
  EXPECT_NE(error.find("not a disco server"), std::string::npos) << error;
  EXPECT_LT(seconds, 10) << error;
  EXPECT_EQ(squatter.Heard().find(kKey), std::string::npos);
}

}  // namespace
}  // namespace disco
