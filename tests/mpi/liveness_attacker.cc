// A hostile process on the host of a job, for tests/mpi/run_liveness_test.sh: it attacks the
// watchdog's liveness pings (UDP on loopback only).
//   liveness_attacker flood SECONDS PORT...
//     sends to 127.0.0.1:PORT, round robin, as fast as it can: 64 KiB and 24-byte junk, pings and
//     pongs of the old unauthenticated format ("DWDP"), and pings of the current format with a
//     made-up job id or MAC. A healthy job must not notice.
//   liveness_attacker forge SECONDS VICTIM_PID VICTIM_PORT PEER_PORT
//     records the victim's genuine datagrams to PEER_PORT for 3 s (where it may: a packet socket
//     needs CAP_NET_RAW), kills the victim (SIGKILL), binds its freed port on 127.0.0.1 and
//     answers every datagram for SECONDS: pongs of the old format echoing the nonce, the ping
//     reflected as a pong with its own MAC, pongs with random MACs, and every recorded genuine
//     datagram again (replays). The job must still end, naming the victim's rank.
// Prints what it did; exits 0 unless it could not do it.
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// The old format: magic "DWDP", kind, (3 bytes), int32 rank, (4 bytes), u64 nonce.
std::vector<uint8_t> OldPacket(uint8_t kind, int32_t rank, uint64_t nonce) {
  std::vector<uint8_t> p(24, 0);
  std::memcpy(p.data(), "DWDP", 4);
  p[4] = kind;
  std::memcpy(p.data() + 8, &rank, 4);
  std::memcpy(p.data() + 16, &nonce, 8);
  return p;
}

// The current format with made-up contents: magic "DWD2", kind, sender, receiver, job id, nonce,
// a 16-byte MAC (liveness.h).
std::vector<uint8_t> NewPacket(uint8_t kind, uint32_t sender, uint32_t receiver,
                               std::mt19937_64& rng) {
  std::vector<uint8_t> p(48, 0);
  std::memcpy(p.data(), "DWD2", 4);
  p[4] = kind;
  std::memcpy(p.data() + 8, &sender, 4);
  std::memcpy(p.data() + 12, &receiver, 4);
  for (int i = 16; i < 48; i += 8) {
    uint64_t r = rng();
    std::memcpy(p.data() + i, &r, 8);
  }
  return p;
}

int Flood(double seconds, const std::vector<int>& ports) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return perror("socket"), 1;
  int big = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint8_t>> kinds;
  kinds.emplace_back(65000, 0xAB);  // the largest loopback datagram, about
  kinds.emplace_back(24, 0x5A);
  kinds.push_back(OldPacket(1, 0, 1));
  kinds.push_back(OldPacket(2, 1, 1));
  kinds.push_back(NewPacket(1, 0, 1, rng));
  kinds.push_back(NewPacket(1, 1, 0, rng));
  kinds.push_back(NewPacket(2, 1, 0, rng));
  const auto t0 = Clock::now();
  uint64_t sent = 0, bytes = 0;
  for (uint64_t i = 0; Since(t0) < seconds; ++i) {
    std::vector<uint8_t>& p = kinds[i % kinds.size()];
    if (p.size() == 48) {  // a fresh nonce and MAC each time
      for (int k = 24; k < 48; k += 8) {
        uint64_t r = rng();
        std::memcpy(p.data() + k, &r, 8);
      }
    }
    for (int port : ports) {
      sockaddr_in to = Loopback(port);
      if (sendto(fd, p.data(), p.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to),
                 sizeof to) >= 0) {
        ++sent;
        bytes += p.size();
      }
    }
  }
  std::printf("flood: %llu datagrams (%llu MB) to %zu ports in %.1f s\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(bytes >> 20),
              ports.size(), Since(t0));
  close(fd);
  return 0;
}

// Records the UDP payloads from VICTIM_PORT to PEER_PORT on loopback for `seconds` (empty when a
// packet socket is not allowed).
std::vector<std::vector<uint8_t>> Record(int victim_port, int peer_port, double seconds) {
  std::vector<std::vector<uint8_t>> got;
  int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP));
  if (fd < 0) {
    std::printf("forge: no packet socket (%s): no genuine datagrams to replay\n",
                std::strerror(errno));
    return got;
  }
  sockaddr_ll lo{};
  lo.sll_family = AF_PACKET;
  lo.sll_protocol = htons(ETH_P_IP);
  lo.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
  bind(fd, reinterpret_cast<sockaddr*>(&lo), sizeof lo);
  const auto t0 = Clock::now();
  uint8_t buf[2048];
  while (Since(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    sockaddr_ll from{};
    socklen_t len = sizeof from;
    ssize_t n = recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr))) continue;
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // loopback shows each packet twice
    const iphdr* ip = reinterpret_cast<const iphdr*>(buf);
    if (ip->protocol != IPPROTO_UDP) continue;
    const size_t ihl = ip->ihl * 4u;
    const udphdr* udp = reinterpret_cast<const udphdr*>(buf + ihl);
    if (ntohs(udp->source) != victim_port || ntohs(udp->dest) != peer_port) continue;
    const size_t payload = static_cast<size_t>(n) - ihl - sizeof(udphdr);
    got.emplace_back(buf + ihl + sizeof(udphdr), buf + ihl + sizeof(udphdr) + payload);
  }
  close(fd);
  std::printf("forge: recorded %zu genuine datagrams from port %d to port %d\n", got.size(),
              victim_port, peer_port);
  return got;
}

int Forge(double seconds, pid_t victim, int victim_port, int peer_port) {
  std::vector<std::vector<uint8_t>> genuine = Record(victim_port, peer_port, 3.0);
  if (kill(victim, SIGKILL) != 0) return perror("kill"), 1;
  std::printf("forge: killed pid %d\n", static_cast<int>(victim));
  std::fflush(stdout);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = Loopback(victim_port);
  const auto t_bind = Clock::now();
  while (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (Since(t_bind) > 5) return std::printf("forge: cannot bind port %d\n", victim_port), 1;
    usleep(1000);
  }
  std::printf("forge: bound 127.0.0.1:%d after %.3f s\n", victim_port, Since(t_bind));
  std::fflush(stdout);
  std::mt19937_64 rng(11);
  const auto t0 = Clock::now();
  uint64_t received = 0, answers = 0;
  uint8_t buf[2048];
  while (Since(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    sockaddr_in from{};
    socklen_t len = sizeof from;
    ssize_t n = recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) continue;
    ++received;
    std::vector<std::vector<uint8_t>> out;
    std::vector<uint8_t> in(buf, buf + n);
    if (n == 24) {  // the old format: a pong from rank 1 echoing the nonce
      std::vector<uint8_t> pong = in;
      pong[4] = 2;
      int32_t one = 1;
      std::memcpy(pong.data() + 8, &one, 4);
      out.push_back(pong);
    }
    if (n == 48) {
      std::vector<uint8_t> pong = in;  // reflected: kind pong, sender and receiver swapped
      pong[4] = 2;
      std::memcpy(pong.data() + 8, in.data() + 12, 4);
      std::memcpy(pong.data() + 12, in.data() + 8, 4);
      out.push_back(pong);
      for (int k = 32; k < 48; ++k) pong[k] = static_cast<uint8_t>(rng());  // a random MAC
      out.push_back(pong);
      out.push_back(in);  // the ping itself, back
    }
    for (const std::vector<uint8_t>& g : genuine) out.push_back(g);  // replays
    for (const std::vector<uint8_t>& d : out) {
      if (sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&from), len) >= 0) {
        ++answers;
      }
    }
  }
  std::printf("forge: %llu datagrams received, %llu forged or replayed answers sent\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(answers));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "flood" && argc >= 4) {
    std::vector<int> ports;
    for (int i = 3; i < argc; ++i) ports.push_back(std::atoi(argv[i]));
    return Flood(std::atof(argv[2]), ports);
  }
  if (mode == "forge" && argc == 6) {
    return Forge(std::atof(argv[2]), static_cast<pid_t>(std::atoi(argv[3])), std::atoi(argv[4]),
                 std::atoi(argv[5]));
  }
  std::fprintf(stderr,
               "usage: liveness_attacker flood SECONDS PORT... | forge SECONDS VICTIM_PID "
               "VICTIM_PORT PEER_PORT\n");
  return 2;
}
