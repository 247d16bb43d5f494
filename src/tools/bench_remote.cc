// disco-bench remote: a remote session over loopback next to raw TCP between the same kind of
// endpoints in the same run.
//
// The benchmark is a plain process (not an MPI rank): it starts a served job itself
// (`--launch "mpirun -n 2"` + disco-serve from its own directory) or attaches to one (`--server
// HOST:PORT`, key from DISCO_SERVE_KEY), and it runs a raw TCP peer in a thread of its own on the
// same loopback interface.
//   latency:   a no-op remote call (disco.worker_id) per round trip, against a raw ping-pong whose
//              request and answer have the byte sizes of that call's request and answer
//   copy_to:   CopyToWorker0 of N bytes, against sending N raw bytes and reading a 1-byte ack
//   copy_from: CopyFromWorker0 of N bytes, against a 1-byte request answered with N raw bytes
// Both sides move the bytes from and into buffers allocated and touched once. Copies alternate
// raw and disco op by op (this host's loopback TCP speed changes from second to second); the
// ratio is the median of the per-round raw/disco time ratios, i.e. disco's throughput relative
// to raw.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "protocol/serializer.h"
#include "remote/rpc.h"
#include "remote/socket.h"
#include "tools/bench_common.h"

extern char** environ;

namespace disco {
namespace bench {
namespace {

constexpr int kIoTimeoutMs = 60000;

// A raw TCP peer: answers ping-pongs, swallows uploads, serves downloads (one client).
class RawPeer {
 public:
  explicit RawPeer(size_t max_bytes) : buffer_(max_bytes, 1) {
    thread_ = std::thread([this] { Run(); });
  }
  ~RawPeer() { thread_.join(); }
  int port() const { return listener_.port(); }

 private:
  // Commands: 'p' reply_bytes request_bytes (ping-pong of those sizes), 'u' n (upload), 'd' n
  // (download), 'q' (quit).
  void Run() {
    remote::Socket c = listener_.Accept(kIoTimeoutMs);
    if (!c.valid()) return;
    std::vector<char> small(1 << 16);
    try {
      for (;;) {
        char cmd;
        uint64_t a, b;
        c.RecvAll(&cmd, 1, kIoTimeoutMs, "a command");
        if (cmd == 'q') return;
        c.RecvAll(&a, 8, kIoTimeoutMs, "an argument");
        c.RecvAll(&b, 8, kIoTimeoutMs, "an argument");
        if (cmd == 'p') {  // b iterations of: receive a request of a.lo bytes, answer a.hi
          uint64_t req = a & 0xFFFFFFFF, rep = a >> 32;
          for (uint64_t i = 0; i < b; ++i) {
            c.RecvAll(small.data(), req, kIoTimeoutMs, "a ping");
            c.SendAll(small.data(), rep, kIoTimeoutMs);
          }
        } else if (cmd == 'u') {  // b uploads of a bytes, each acknowledged
          for (uint64_t i = 0; i < b; ++i) {
            c.RecvAll(buffer_.data(), a, kIoTimeoutMs, "an upload");
            c.SendAll("k", 1, kIoTimeoutMs);
          }
        } else if (cmd == 'd') {  // b downloads of a bytes, each asked for with one byte
          for (uint64_t i = 0; i < b; ++i) {
            c.RecvAll(small.data(), 1, kIoTimeoutMs, "a download request");
            c.SendAll(buffer_.data(), a, kIoTimeoutMs);
          }
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "disco-bench remote: raw peer: %s\n", e.what());
    }
  }

  remote::Socket listener_ = remote::Socket::Listen("127.0.0.1", 0);
  std::vector<char> buffer_;
  std::thread thread_;
};

void RawCommand(remote::Socket* s, char cmd, uint64_t a, uint64_t b) {
  char msg[17];
  msg[0] = cmd;
  std::memcpy(msg + 1, &a, 8);
  std::memcpy(msg + 9, &b, 8);
  s->SendAll(msg, sizeof msg, kIoTimeoutMs);
}

// The served job this benchmark started: `launch` + disco-serve, ended by the client.
class ServerJob {
 public:
  ServerJob(const std::string& launch, const std::string& key) {
    char self[4096] = {0};
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    DISCO_CHECK(k > 0, RuntimeError) << "disco-bench remote: cannot find its own path";
    std::string dir(self, static_cast<size_t>(k));
    dir = dir.substr(0, dir.rfind('/'));
    port_file_ = "/tmp/disco-bench-remote." + std::to_string(getpid()) + ".port";
    std::vector<std::string> args;
    std::istringstream words(launch);
    for (std::string w; words >> w;) args.push_back(w);
    DISCO_CHECK(!args.empty(), ValueError) << "disco-bench remote: --launch is empty";
    args.push_back(dir + "/disco-serve");
    for (std::string a : {"--port", "0", "--port-file", port_file_.c_str(), "--max-clients", "1"}) {
      args.push_back(a);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    setenv("DISCO_SERVE_KEY", key.c_str(), 1);
    int rc = posix_spawnp(&pid_, argv[0], nullptr, nullptr, argv.data(), environ);
    DISCO_CHECK(rc == 0, RuntimeError)
        << "disco-bench remote: cannot start '" << launch << "': " << std::strerror(rc);
    for (int i = 0; i < 1200 && port_ == 0; ++i) {
      std::ifstream f(port_file_);
      if (!(f >> port_)) port_ = 0;
      int status;
      DISCO_CHECK(waitpid(pid_, &status, WNOHANG) == 0, RuntimeError)
          << "disco-bench remote: the server job exited before listening";
      if (port_ == 0) usleep(100000);
    }
    DISCO_CHECK(port_ != 0, RuntimeError) << "disco-bench remote: the server job never listened";
    std::remove(port_file_.c_str());
  }
  ~ServerJob() {
    for (int i = 0; i < 300; ++i) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) != 0) return;
      usleep(100000);
    }
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = 0;
  int port_ = 0;
  std::string port_file_;
};

std::string RandomKey() {
  std::random_device rd;
  std::ostringstream s;
  for (int i = 0; i < 4; ++i) s << std::hex << rd();
  return s.str();
}

// Byte sizes of a no-op call's request and answer (packet length prefix included).
std::pair<size_t, size_t> CallWireBytes() {
  protocol::ByteBuffer buf;
  Any operands[1] = {Any(DRef::Unowned(1))};
  remote::EncodeRequest(&buf, remote::Op::kCall, {1}, operands, 1);  // one freed register rides
  size_t req = buf.size() + 8;
  Any result[1] = {Any(int64_t{1})};
  remote::EncodeOkReply(&buf, result, 1);
  return {req, buf.size() + 8};
}

// One row's figures: the median times of raw and disco (us) and the ratio raw / disco.
struct Figures {
  double raw_us, disco_us, ratio;
};

// A no-op call against a raw ping-pong of the same byte sizes (`req`, `rep`): per repeat, the
// mean round trip over `iters` of each.
Figures NoopCallFigures(Session& s, remote::Socket* raw, int repeats, int64_t iters, size_t req,
                        size_t rep) {
  DRef f = s.GetGlobalFunc("disco.worker_id");
  std::vector<double> rt, dt;
  for (int r = 0; r < repeats; ++r) {
    RawCommand(raw, 'p', (uint64_t{rep} << 32) | req, static_cast<uint64_t>(iters));
    std::vector<char> buf(std::max(req, rep));
    double t0 = NowUs();
    for (int64_t i = 0; i < iters; ++i) {
      raw->SendAll(buf.data(), req, kIoTimeoutMs);
      raw->RecvAll(buf.data(), rep, kIoTimeoutMs, "a pong");
    }
    rt.push_back((NowUs() - t0) / iters);
    t0 = NowUs();
    for (int64_t i = 0; i < iters; ++i) s.CallPacked(f);
    dt.push_back((NowUs() - t0) / iters);
  }
  double lat_ratio = Median(dt) > 0 ? Median(rt) / Median(dt) : 0;
  return {Median(rt), Median(dt), lat_ratio};
}

// Copies of `n` bytes to and from worker 0, raw and disco alternating op by op: the median time
// per op and the median of the per-round ratios, for copy_to and copy_from.
std::pair<Figures, Figures> CopyFigures(Session& s, remote::Socket* raw, int repeats, int64_t n) {
  DRef remote_t = s.Empty(Shape{n}, DataType("uint8"));
  Tensor host = Tensor::Empty(Shape{n}, DataType("uint8"));
  std::memset(host.data(), 7, static_cast<size_t>(n));
  const size_t bytes = static_cast<size_t>(n);
  int64_t rounds = repeats * std::max<int64_t>(3, std::min<int64_t>(200, (int64_t{256} << 20) / n));
  std::vector<double> raw_to, raw_from, disco_to, disco_from, ratio_to, ratio_from;
  std::vector<char> ack(1);
  for (int64_t r = -1; r < rounds; ++r) {  // round -1 warms up both sides
    RawCommand(raw, 'u', bytes, 1);
    double t0 = NowUs();
    raw->SendAll(host.data(), bytes, kIoTimeoutMs);
    raw->RecvAll(ack.data(), 1, kIoTimeoutMs, "an ack");
    double t_raw_to = NowUs() - t0;
    t0 = NowUs();
    s.CopyToWorker0(host, remote_t);
    double t_to = NowUs() - t0;
    RawCommand(raw, 'd', bytes, 1);
    t0 = NowUs();
    raw->SendAll("d", 1, kIoTimeoutMs);
    raw->RecvAll(host.data(), bytes, kIoTimeoutMs, "a download");
    double t_raw_from = NowUs() - t0;
    t0 = NowUs();
    s.CopyFromWorker0(host, remote_t);
    double t_from = NowUs() - t0;
    if (r < 0) continue;
    raw_to.push_back(t_raw_to);
    disco_to.push_back(t_to);
    ratio_to.push_back(t_raw_to / t_to);
    raw_from.push_back(t_raw_from);
    disco_from.push_back(t_from);
    ratio_from.push_back(t_raw_from / t_from);
  }
  return {{Median(raw_to), Median(disco_to), Median(ratio_to)},
          {Median(raw_from), Median(disco_from), Median(ratio_from)}};
}

}  // namespace

int RunRemoteBench(const RemoteOptions& opts) {
  const int64_t max_bytes = opts.max_bytes;
  const int64_t min_bytes = opts.min_bytes;
  const int repeats = static_cast<int>(opts.repeats);
  const int64_t lat_iters = opts.iters;
  std::string key = std::getenv("DISCO_SERVE_KEY") ? std::getenv("DISCO_SERVE_KEY") : "";
  std::string host = "127.0.0.1";
  int port = 0;
  std::unique_ptr<ServerJob> job;
  const std::string& server = opts.server;
  if (server.empty()) {
    if (key.empty()) key = RandomKey();
    job = std::make_unique<ServerJob>(opts.launch, key);
    port = job->port();
  } else {
    DISCO_CHECK(remote::ParseHostPort(server, &host, &port), ValueError)
        << "disco-bench remote: --server wants HOST:PORT, got '" << server << "'";
  }
  Session s = Connect(host, port, key);
  RawPeer peer(static_cast<size_t>(max_bytes));
  remote::Socket raw = remote::Socket::Connect("127.0.0.1", peer.port(), kIoTimeoutMs);

  std::vector<std::string> meta = {"workers=" + std::to_string(s.num_workers()),
                                   "server=" + host + ":" + std::to_string(port),
                                   "disco=" DISCO_VERSION, "repeats=" + std::to_string(repeats)};
  std::printf("# disco-bench remote");
  for (const auto& m : meta) std::printf("  %s", m.c_str());
  std::printf(
      "\n# noop_call: median over repeats of the mean round trip (us), ratio = raw / disco time; "
      "copies: raw and disco alternate op by op, median time per op (us), ratio = median of the "
      "per-round raw/disco time ratios (throughput ratio); raw = plain TCP on loopback to a peer "
      "thread, same bytes, same run\n");
  Table table({"op", "size_B", "wire_B", "raw_us", "disco_us", "raw_GBps", "disco_GBps", "ratio"});
  auto row = [&](const std::string& op, int64_t size, int64_t wire, double rt, double dt,
                 double ratio) {
    auto gbps = [&](double t) { return size > 0 && t > 0 ? Fmt(size / t / 1e3, 3) : "-"; };
    table.AddRow({op, std::to_string(size), std::to_string(wire), Fmt(rt, 2), Fmt(dt, 2), gbps(rt),
                  gbps(dt), Fmt(ratio, 2)});
  };

  // Latency: a no-op call per round trip.
  {
    auto [req, rep] = CallWireBytes();
    Figures f = NoopCallFigures(s, &raw, repeats, lat_iters, req, rep);
    row("noop_call", 0, static_cast<int64_t>(req + rep), f.raw_us, f.disco_us, f.ratio);
  }

  // Copies: raw and disco alternate op by op, so that both see the same phases of a noisy host;
  // times are medians over every op, the ratio the median of the per-round ratios.
  for (int64_t n = min_bytes; n <= max_bytes; n *= 4) {
    auto [to, from] = CopyFigures(s, &raw, repeats, n);
    row("copy_to", n, n, to.raw_us, to.disco_us, to.ratio);
    row("copy_from", n, n, from.raw_us, from.disco_us, from.ratio);
  }
  RawCommand(&raw, 'q', 0, 0);
  Emit(table, opts.out, meta);
  if (job != nullptr) ShutdownRemoteJob(s, 0);
  return 0;
}

}  // namespace bench
}  // namespace disco
