// A local process guessing keys from ever new source addresses (tests/remote/run_refusal_test.sh):
//   disco_refusal_flood HOST:PORT COUNT
// makes COUNT handshakes with a wrong key, each from its own address 127.X.Y.Z (the socket is
// bound to it before it connects), without waiting for the answers; closes them; then times one
// more wrong key from yet another address (the back-off it gets: it must have grown with the
// guesses of the whole of 127.0.0.0/8), and checks that a client with the key (DISCO_SERVE_KEY)
// still attaches at once. Prints "backoff_ms N" and "attach_ms N"; exits non-zero when a step
// could not be done. It speaks only the first steps of the handshake, with made-up proofs, and
// adapts to the server's protocol version (1 sent the key in clear), so that it runs against
// older servers too.
#include <arpa/inet.h>
#include <disco/disco.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x52435344;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Reads exactly n bytes within timeout_ms; false on timeout or close.
bool ReadN(int fd, uint8_t* buf, size_t n, int timeout_ms) {
  const auto t0 = Clock::now();
  size_t got = 0;
  while (got < n) {
    const int left = timeout_ms - static_cast<int>(MsSince(t0));
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t k = recv(fd, buf + got, n - got, 0);
    if (k <= 0) return false;
    got += static_cast<size_t>(k);
  }
  return true;
}

// A connection to the server from source address `from` (host order).
int ConnectFrom(uint32_t from, const sockaddr_in& server) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(from);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      connect(fd, reinterpret_cast<const sockaddr*>(&server), sizeof server) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

int g_version = 2;
std::mt19937_64 g_rng(99);

// Sends a wrong key in the server's protocol; false when the server did not take it that far.
bool SendWrongKey(int fd) {
  uint8_t hello[8 + 20];
  const uint32_t magic = kMagic;
  const uint16_t version = static_cast<uint16_t>(g_version);
  const uint16_t key_len = g_version == 1 ? 20 : 0;
  std::memcpy(hello, &magic, 4);
  std::memcpy(hello + 4, &version, 2);
  std::memcpy(hello + 6, &key_len, 2);
  std::memcpy(hello + 8, "not-the-key-at-all!!", 20);
  if (g_version == 1) return send(fd, hello, sizeof hello, MSG_NOSIGNAL) == sizeof hello;
  if (send(fd, hello, 8, MSG_NOSIGNAL) != 8) return false;
  uint8_t challenge[33];
  if (!ReadN(fd, challenge, 1, 10000)) return false;
  if (challenge[0] == 2) {  // an older server: version 1 from here on
    g_version = 1;
    return false;
  }
  if (challenge[0] != 0 || !ReadN(fd, challenge + 1, 32, 10000)) return false;
  uint8_t proof[64];
  for (uint8_t& b : proof) b = static_cast<uint8_t>(g_rng());
  return send(fd, proof, sizeof proof, MSG_NOSIGNAL) == sizeof proof;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string host;
  int port = 0;
  if (argc != 3) {
    std::fprintf(stderr, "usage: disco_refusal_flood HOST:PORT COUNT\n");
    return 2;
  }
  std::string where = argv[1];
  host = where.substr(0, where.rfind(':'));
  port = std::atoi(where.c_str() + where.rfind(':') + 1);
  const int count = std::atoi(argv[2]);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &server.sin_addr);

  const auto t0 = Clock::now();
  std::deque<int> open_fds;  // kept open a while: their delayed answers are not waited for
  int sent = 0, failed = 0;
  for (int i = 0; i < count; ++i) {
    const uint32_t from = (127u << 24) | (static_cast<uint32_t>(1 + i / 250) << 16) |
                          (static_cast<uint32_t>(i % 250) << 8) | 2u;
    int fd = ConnectFrom(from, server);
    if (fd < 0) {
      ++failed;
      continue;
    }
    if (SendWrongKey(fd) || (g_version == 1 && SendWrongKey(fd))) ++sent;
    open_fds.push_back(fd);
    while (open_fds.size() > 200) {
      close(open_fds.front());
      open_fds.pop_front();
    }
  }
  for (int fd : open_fds) close(fd);
  std::printf(
      "flood: %d wrong keys sent from %d addresses (%d connections failed) in %.0f ms, "
      "protocol version %d\n",
      sent, count, failed, MsSince(t0), g_version);
  if (sent < count / 2) return 1;
  usleep(1500 * 1000);  // the server notices the closed connections

  // One more wrong key from an address never used: its answer comes after the back-off of the
  // whole network.
  int fd = ConnectFrom((127u << 24) | (200u << 16) | (7u << 8) | 9u, server);
  if (fd < 0) return std::printf("cannot connect for the timed guess\n"), 1;
  const auto t1 = Clock::now();
  if (!SendWrongKey(fd) && !(g_version == 1 && SendWrongKey(fd))) {
    return std::printf("the timed guess was not taken\n"), 1;
  }
  uint8_t code = 0xFF;
  const bool answered = ReadN(fd, &code, 1, 20000);
  std::printf("backoff_ms %.0f (%s, code %d)\n", MsSince(t1),
              answered ? "answered" : "closed unanswered", code);
  close(fd);

  // The key still gets in at once.
  const auto t2 = Clock::now();
  try {
    disco::Session s = disco::Connect(host, port, "");
    std::printf("attach_ms %.0f (%d workers)\n", MsSince(t2), s.num_workers());
    disco::ShutdownRemoteJob(s, 0);
  } catch (const std::exception& e) {
    std::printf("a client with the key was refused: %s\n", e.what());
    return 1;
  }
  return 0;
}
