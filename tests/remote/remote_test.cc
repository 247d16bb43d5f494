// What only a remote session has: tensor copies in chunks, the handshake's refusals, hostile or
// broken clients, and a job that keeps serving the next client after each of them.
#include <disco/disco.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "mpi/mpi_test_env.h"
#include "protocol/serializer.h"
#include "remote/remote_env.h"
#include "remote/rpc.h"
#include "remote/socket.h"

namespace disco {
namespace {

using testing::g_session;
constexpr int kTimeoutMs = 10000;

Session& S() { return *g_session; }

// The job still answers: every worker runs a call and the answer is right.
void ExpectServing() {
  DRef r = S().CallPacked(S().GetGlobalFunc("test.affine"), 7);
  for (int w = 0; w < S().num_workers(); ++w) {
    EXPECT_EQ(r.DebugGetFromRemote(w).cast<int64_t>(), 7000 + w);
  }
}

// A raw connection that passed the handshake (retrying while the server is busy).
remote::Socket RawAttached() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    remote::Socket s =
        remote::Socket::Connect(testing::ServerHost(), testing::ServerPort(), kTimeoutMs);
    remote::HandshakeCode code = remote::ClientHello(&s, testing::ServerKey(), kTimeoutMs);
    if (code == remote::HandshakeCode::kOk) return s;
    EXPECT_EQ(code, remote::HandshakeCode::kBusy);
    if (std::chrono::steady_clock::now() > deadline) return remote::Socket();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// True when the server closes `s` within `timeout_ms` (reading and dropping anything it sends).
bool ClosedByServer(remote::Socket* s, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[256];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{s->fd(), POLLIN, 0};  // the socket itself: bytes read ahead do not count here
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t k = ::recv(s->fd(), buf, sizeof buf, 0);
    if (k == 0) return true;
    if (k < 0 && errno != EAGAIN && errno != EINTR) return true;
  }
  return false;
}

// Sends one request and returns the server's answer (throwing its error, typed).
std::vector<Any> RawRequest(remote::Socket* s, const protocol::ByteBuffer& body) {
  remote::SendPacket(s, body.data(), body.size(), kTimeoutMs);
  protocol::ByteBuffer reply;
  remote::RecvPacket(s, &reply, size_t{1} << 20, kTimeoutMs);
  return remote::DecodeReply(reply.data(), reply.size());
}

class RemoteTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (g_session == nullptr) testing::Reattach();
  }
};

// An exit code outside 0..255 would wrap (256 reads as success): refused before anything is sent.
TEST_F(RemoteTest, ExitCodesOutsideAByteAreRefused) {
  for (int code : {256, -1, 1000}) EXPECT_THROW(ShutdownRemoteJob(*g_session, code), ValueError);
  DRef r = g_session->CallPacked(g_session->GetGlobalFunc("test.affine"), 1);
  EXPECT_EQ(r.DebugGetFromRemote(0).cast<int64_t>(), 1000);
}

// A client that pauses inside a capture (longer than the server waits before it parks the
// workers, 20 ms: a loaded machine, Python's overhead) is not dropped: nothing is sent to the
// workers during a capture, and parking is not recorded.
TEST_F(RemoteTest, APauseInsideACaptureKeepsTheClient) {
  DRef affine = S().GetGlobalFunc("test.affine");
  Graph g = S().Capture(1, [&](const std::vector<Any>& in) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    S().CallPacked(affine, in[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  });
  g.Replay({Any(int64_t{2})});
  S().SyncAll();
  DRef r = S().CallPacked(affine, 1);
  EXPECT_EQ(r.DebugGetFromRemote(0).cast<int64_t>(), 1000);
}

TEST_F(RemoteTest, TensorCopiesRoundTripBitForBit) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4093}, int64_t{64} << 20}) {
    DRef remote = S().Empty(Shape{n}, DataType("uint8"));
    Tensor in = Tensor::Empty(Shape{n}, DataType("uint8"));
    for (int64_t i = 0; i < n; ++i) in.data_as<uint8_t>()[i] = static_cast<uint8_t>(i * 131 >> 3);
    S().CopyToWorker0(in, remote);
    Tensor out = Tensor::Empty(Shape{n}, DataType("uint8"));
    std::memset(out.data(), 0xAB, static_cast<size_t>(n));
    S().CopyFromWorker0(out, remote);
    EXPECT_EQ(std::memcmp(in.data(), out.data(), static_cast<size_t>(n)), 0) << n << " bytes";
  }
  // Multi-dimensional float data lands where worker functions see it.
  DRef remote = S().Empty(Shape{3, 5}, DataType("float32"));
  Tensor in = Tensor::Empty(Shape{3, 5}, DataType("float32"));
  for (int i = 0; i < 15; ++i) in.data_as<float>()[i] = 0.5f * i - 3;
  S().CopyToWorker0(in, remote);
  Tensor seen = remote.DebugGetFromRemote(0).cast<Tensor>();
  EXPECT_EQ(std::memcmp(seen.data(), in.data(), in.nbytes()), 0);
}

TEST_F(RemoteTest, CopiesCheckDtypeShapeAndRegister) {
  DRef remote = S().Empty(Shape{4}, DataType("float32"));
  EXPECT_THROW(S().CopyToWorker0(Tensor::Empty(Shape{4}, DataType("int32")), remote), ValueError);
  EXPECT_THROW(S().CopyToWorker0(Tensor::Empty(Shape{5}, DataType("float32")), remote), ValueError);
  EXPECT_THROW(S().CopyFromWorker0(Tensor::Empty(Shape{2, 2}, DataType("float32")), remote),
               ValueError);
  DRef not_tensor = S().CallPacked(S().GetGlobalFunc("test.echo"), 3);
  EXPECT_THROW(S().CopyToWorker0(Tensor::Empty(Shape{4}, DataType("float32")), not_tensor),
               TypeError);
  ExpectServing();  // the refused copies' chunks were read: the stream is in step
}

TEST_F(RemoteTest, RequestsOverTheServersLimitAreRefusedBeforeSending) {
  std::string big((size_t{64} << 20) + 1, 'x');
  try {
    S().CallPacked(S().GetGlobalFunc("test.bytes_len"), Bytes(big));
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the server's limit"), std::string::npos)
        << e.what();
  }
  ExpectServing();
}

TEST_F(RemoteTest, AnswersOverTheClientsLimitAreRefusedBySending) {
  testing::Detach();
  ConnectOptions small;
  small.max_reply_bytes = 4096;
  small.chunk_bytes = 1024;  // copies still work, in 1 KiB packets
  Session c = Connect(testing::ServerHost(), testing::ServerPort(), testing::ServerKey(), small);
  DRef t = c.Empty(Shape{16384}, DataType("float32"));
  try {
    t.DebugGetFromRemote(0);
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("over the client's limit of 4096"), std::string::npos)
        << e.what();
  }
  Tensor in = Tensor::Empty(Shape{16384}, DataType("float32"));
  for (int i = 0; i < 16384; ++i) in.data_as<float>()[i] = static_cast<float>(i);
  c.CopyToWorker0(in, t);
  Tensor out = Tensor::Empty(Shape{16384}, DataType("float32"));
  c.CopyFromWorker0(out, t);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.nbytes()), 0);
  c.Shutdown();
}

TEST_F(RemoteTest, HandshakeRefusalsAreDistinctAndTheJobGoesOn) {
  // A wrong key, and a second client while one is attached.
  try {
    Connect(testing::ServerHost(), testing::ServerPort(), "not-the-key");
    ADD_FAILURE() << "expected a refusal";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong key"), std::string::npos) << e.what();
  }
  try {
    Connect(testing::ServerHost(), testing::ServerPort(), testing::ServerKey());
    ADD_FAILURE() << "expected a refusal";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("busy"), std::string::npos) << e.what();
  }
  auto raw = [] {
    return remote::Socket::Connect(testing::ServerHost(), testing::ServerPort(), kTimeoutMs);
  };
  {
    remote::Socket s = raw();
    EXPECT_EQ(remote::ClientHello(&s, testing::ServerKey(), kTimeoutMs, 0x12345678),
              remote::HandshakeCode::kBadMagic);
    EXPECT_TRUE(ClosedByServer(&s, kTimeoutMs));
  }
  {
    remote::Socket s = raw();
    EXPECT_EQ(remote::ClientHello(&s, testing::ServerKey(), kTimeoutMs, remote::kRemoteMagic, 99),
              remote::HandshakeCode::kBadVersion);
    EXPECT_TRUE(ClosedByServer(&s, kTimeoutMs));
  }
  {  // A client of protocol version 1 (the key in clear after magic and version): told at once.
    remote::Socket s = raw();
    uint8_t hello[8 + 16];
    uint32_t magic = remote::kRemoteMagic;
    uint16_t version = 1, key_len = 16;
    std::memcpy(hello, &magic, 4);
    std::memcpy(hello + 4, &version, 2);
    std::memcpy(hello + 6, &key_len, 2);
    std::memcpy(hello + 8, "0123456789abcdef", 16);
    s.SendAll(hello, sizeof hello, kTimeoutMs);
    uint8_t code = 0xFF;
    s.RecvAll(&code, 1, kTimeoutMs, "the answer to a version 1 hello");
    EXPECT_EQ(code, static_cast<uint8_t>(remote::HandshakeCode::kBadVersion));
    EXPECT_TRUE(ClosedByServer(&s, kTimeoutMs));
  }
  {  // Garbage instead of a hello.
    remote::Socket s = raw();
    std::string junk(64, '\xff');
    s.SendAll(junk.data(), junk.size(), kTimeoutMs);
    EXPECT_TRUE(ClosedByServer(&s, kTimeoutMs));
  }
  {  // A truncated hello, then gone.
    remote::Socket s = raw();
    s.SendAll("DSC", 3, kTimeoutMs);
  }
  ExpectServing();
}

// Connections that never finish their handshake (silent ones, and one that drips the bytes of its
// proof one at a time) cannot keep a client with the key out, and each is closed once its 5 s are
// up, however it paces its bytes.
TEST_F(RemoteTest, SlowHandshakesCannotKeepAClientOut) {
  testing::Detach();
  auto raw = [] {
    return remote::Socket::Connect(testing::ServerHost(), testing::ServerPort(), kTimeoutMs);
  };
  std::vector<remote::Socket> silent;
  for (int i = 0; i < 12; ++i) {
    silent.push_back(raw());
    silent.back().SendAll("D", 1, kTimeoutMs);
  }
  remote::Socket drip = raw();
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    // A valid hello, then the 64 bytes of a proof, one every 100 ms: 6.4 s, past the 5 s that
    // the proof has.
    uint8_t hello[remote::kHelloHeadBytes];
    remote::EncodeHello(hello);
    try {
      drip.SendAll(hello, sizeof hello, kTimeoutMs);
      while (!stop) {
        drip.SendAll("k", 1, kTimeoutMs);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    } catch (const std::exception&) {  // closed by the server: what the test wants
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  testing::Reattach();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 2000) << "a client with the key waited " << ms << " ms behind slow handshakes";
  ExpectServing();
  EXPECT_TRUE(ClosedByServer(&drip, 8000)) << "the dripping hello outlived its 5 s";
  stop = true;
  dripper.join();
  for (remote::Socket& s : silent) EXPECT_TRUE(ClosedByServer(&s, 8000));
}

// Wrong keys are answered later with each failure from an address; the right key at once.
TEST_F(RemoteTest, WrongKeysAreAnsweredLaterEachTime) {
  std::vector<double> ms;
  for (int i = 0; i < 4; ++i) {
    remote::Socket s =
        remote::Socket::Connect(testing::ServerHost(), testing::ServerPort(), kTimeoutMs);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(remote::ClientHello(&s, "a wrong key, guess " + std::to_string(i), kTimeoutMs),
              remote::HandshakeCode::kBadKey);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  for (size_t i = 1; i < ms.size(); ++i) {
    EXPECT_GT(ms[i], ms[i - 1] * 1.5) << "guess " << i << " was answered after " << ms[i]
                                      << " ms, guess " << i - 1 << " after " << ms[i - 1];
  }
  EXPECT_GE(ms.back(), 400);
  testing::Detach();
  auto t0 = std::chrono::steady_clock::now();
  testing::Reattach();  // the right key: at once
  using Ms = std::chrono::duration<double, std::milli>;
  EXPECT_LT(Ms(std::chrono::steady_clock::now() - t0).count(), 1000);
  ExpectServing();
}

// A key file the server refuses (a stale one, left by an earlier server on the port) is named in
// the error.
TEST_F(RemoteTest, ARefusedKeyFileIsNamed) {
  char dir[] = "/tmp/disco-keyfile-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/stale.key";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("0123456789abcdef0123456789abcdef-not-this-servers-key\n", f);
    std::fclose(f);
    chmod(path.c_str(), 0600);
  }
  const char* env = std::getenv("DISCO_SERVE_KEY");  // it would come first
  const std::string saved = env != nullptr ? env : "";
  unsetenv("DISCO_SERVE_KEY");
  ConnectOptions o;
  o.key_file = path;
  std::string error;
  try {
    Connect(testing::ServerHost(), testing::ServerPort(), "", o);
  } catch (const RuntimeError& e) {
    error = e.what();
  }
  if (env != nullptr) setenv("DISCO_SERVE_KEY", saved.c_str(), 1);
  unlink(path.c_str());
  rmdir(dir);
  EXPECT_NE(error.find("wrong key"), std::string::npos) << error;
  EXPECT_NE(error.find("the key file '" + path + "'"), std::string::npos) << error;
  ExpectServing();
}

TEST_F(RemoteTest, BrokenClientsAreDroppedAndTheNextOneIsServed) {
  testing::Detach();
  {  // A packet length beyond the limit: refused before anything is allocated, client dropped.
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    uint64_t huge = uint64_t{1} << 62;
    s.SendAll(&huge, sizeof huge, kTimeoutMs);
    EXPECT_TRUE(ClosedByServer(&s, kTimeoutMs));
  }
  {  // A truncated packet, then an abrupt close.
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    uint64_t len = 100;
    s.SendAll(&len, sizeof len, kTimeoutMs);
    s.SendAll("0123456789", 10, kTimeoutMs);
  }
  {  // A truncated packet, then silence: the request timeout (3 s in the test server) drops it.
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    uint64_t len = 100;
    s.SendAll(&len, sizeof len, kTimeoutMs);
    s.SendAll("0123456789", 10, kTimeoutMs);
    EXPECT_TRUE(ClosedByServer(&s, 15000));
  }
  {  // Malformed bodies in well-formed packets are answered with errors; the client goes on.
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    protocol::ByteBuffer body;
    body.Resize(1);
    body.data()[0] = 99;  // no such operation
    try {
      RawRequest(&s, body);
      ADD_FAILURE() << "expected a ProtocolError";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown request operation 99"), std::string::npos)
          << e.what();
    }
    remote::EncodeRequest(&body, remote::Op::kSyncAll, {}, nullptr, 0);
    protocol::Writer(&body).Put<uint32_t>(7);  // trailing bytes
    EXPECT_THROW(RawRequest(&s, body), ProtocolError);
    remote::EncodeRequest(&body, remote::Op::kSyncWorker, {}, nullptr, 0);  // operand missing
    EXPECT_THROW(RawRequest(&s, body), ProtocolError);
    Any bad_reg[2] = {Any(int64_t{123456}), Any(0)};
    remote::EncodeRequest(&body, remote::Op::kDebugGet, {}, bad_reg, 2);
    try {
      RawRequest(&s, body);
      ADD_FAILURE() << "expected a ValueError";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("not held by this client"), std::string::npos)
          << e.what();
    }
    remote::EncodeRequest(&body, remote::Op::kSyncAll, {}, nullptr, 0);
    EXPECT_TRUE(RawRequest(&s, body).empty());
  }
  {  // A copy cut off halfway: the client dies in the middle of its chunks.
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    protocol::ByteBuffer body;
    Any name[1] = {Any("disco.empty")};
    remote::EncodeRequest(&body, remote::Op::kGetGlobalFunc, {}, name, 1);
    int64_t empty = RawRequest(&s, body).at(0).cast<int64_t>();
    const int64_t n = 8 << 20;
    Any args[6] = {Any(DRef::Unowned(empty)),
                   Any(Shape{n}),
                   Any(DataType("uint8")),
                   Any(CPU()),
                   Any(false),
                   Any(false)};
    remote::EncodeRequest(&body, remote::Op::kCall, {}, args, 6);
    int64_t tensor = RawRequest(&s, body).at(0).cast<int64_t>();
    Any copy[4] = {Any(DRef::Unowned(tensor)), Any(DataType("uint8")), Any(Shape{n}), Any(n)};
    remote::EncodeRequest(&body, remote::Op::kCopyTo, {}, copy, 4);
    remote::SendPacket(&s, body.data(), body.size(), kTimeoutMs);
    std::string half(static_cast<size_t>(n / 2), 'h');
    remote::SendChunks(&s, half.data(), half.size(), size_t{1} << 20, kTimeoutMs);
  }
  testing::Reattach();
  ExpectServing();
}

// One request of `op` with `operands` on a raw connection; its results.
std::vector<Any> RawOp(remote::Socket* s, remote::Op op, std::vector<Any> operands) {
  protocol::ByteBuffer body;
  remote::EncodeRequest(&body, op, {}, operands.data(), operands.size());
  return RawRequest(s, body);
}

// The error `op` is answered with, of type E ("" and a failure when it succeeds).
template <typename E>
std::string RawError(remote::Socket* s, remote::Op op, std::vector<Any> operands) {
  try {
    RawOp(s, op, std::move(operands));
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << remote::OpName(op) << " was not refused";
  return "";
}

// Worker ids and input counts are checked as the int64 they travel as: 2^32 + 1 is not worker 1.
TEST_F(RemoteTest, WideWorkerIdsAndInputCountsAreRefusedNotWrapped) {
  const int n = S().num_workers();
  testing::Detach();
  {
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    int64_t f = RawOp(&s, remote::Op::kGetGlobalFunc, {Any("test.affine")}).at(0).cast<int64_t>();
    int64_t r = RawOp(&s, remote::Op::kCall, {Any(DRef::Unowned(f)), Any(int64_t{3})})
                    .at(0)
                    .cast<int64_t>();
    const int64_t wide = (int64_t{1} << 32) + 1;
    const std::string range = "worker id 4294967297 is out of range [0, " + std::to_string(n) + ")";
    for (std::string msg :
         {RawError<ValueError>(&s, remote::Op::kSyncWorker, {Any(wide)}),
          RawError<ValueError>(&s, remote::Op::kDebugGet, {Any(r), Any(wide)}),
          RawError<ValueError>(&s, remote::Op::kDebugSet, {Any(r), Any(wide), Any(int64_t{7})})}) {
      EXPECT_NE(msg.find(range), std::string::npos) << msg;
    }
    for (int64_t inputs : {wide, int64_t{1} << 31, int64_t{1} << 40}) {
      std::string msg = RawError<ValueError>(&s, remote::Op::kCaptureBegin, {Any(inputs)});
      EXPECT_NE(msg.find("Capture: " + std::to_string(inputs) + " inputs (0 to 64)"),
                std::string::npos)
          << msg;
    }
    // Nothing was written or captured: every worker still holds its own value.
    for (int w = 0; w < n; ++w) {
      EXPECT_EQ(RawOp(&s, remote::Op::kDebugGet, {Any(r), Any(int64_t{w})}).at(0).cast<int64_t>(),
                3000 + w);
    }
    EXPECT_TRUE(RawOp(&s, remote::Op::kSyncAll, {}).empty());
  }
  testing::Reattach();
  ExpectServing();
}

// Ids in the placeholder range (2^62 and up) are registers like any other outside a capture, and
// always as a call's function or a debug write's value: one the client does not hold is refused
// at once, and nothing is sent (no failure left on one worker only).
TEST_F(RemoteTest, UnheldIdsInThePlaceholderRangeAreRefusedAtOnce) {
  testing::Detach();
  {
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    const Any unheld = Any(DRef::Unowned(int64_t{1} << 62));
    const std::string refused = "register 4611686018427387904 is not held by this client";
    int64_t f = RawOp(&s, remote::Op::kGetGlobalFunc, {Any("test.affine")}).at(0).cast<int64_t>();
    int64_t r = RawOp(&s, remote::Op::kCall, {Any(DRef::Unowned(f)), Any(int64_t{3})})
                    .at(0)
                    .cast<int64_t>();
    for (std::string msg :
         {RawError<ValueError>(&s, remote::Op::kDebugSet, {Any(r), Any(int64_t{0}), unheld}),
          RawError<ValueError>(&s, remote::Op::kCall, {unheld}),
          RawError<ValueError>(&s, remote::Op::kCall, {Any(DRef::Unowned(f)), unheld})}) {
      EXPECT_NE(msg.find(refused), std::string::npos) << msg;
    }
    EXPECT_TRUE(RawOp(&s, remote::Op::kSyncAll, {}).empty());  // no failure on any worker
    // Inside a capture, its placeholder is a call's argument, never the function.
    int64_t p = RawOp(&s, remote::Op::kCaptureBegin, {Any(int64_t{1})}).at(0).cast<int64_t>();
    RawOp(&s, remote::Op::kCall, {Any(DRef::Unowned(f)), Any(DRef::Unowned(p))});
    std::string msg = RawError<ValueError>(&s, remote::Op::kCall, {Any(DRef::Unowned(p))});
    EXPECT_NE(msg.find("is not held by this client"), std::string::npos) << msg;
    std::vector<Any> graph = RawOp(&s, remote::Op::kCaptureEnd, {Any(false)});
    RawOp(&s, remote::Op::kReplayGraph, {graph.at(0), Any(int64_t{4})});
    EXPECT_TRUE(RawOp(&s, remote::Op::kSyncAll, {}).empty());
  }
  testing::Reattach();
  ExpectServing();
}

// A request decodes to a bounded number of values: a None is one byte on the wire and an Any in
// memory, so megabytes of them would take tens of times their size, on rank 0 and, for a call's
// arguments, on every worker. Refused as the count is read, before any room is made.
TEST_F(RemoteTest, RequestsOfManyTinyValuesAreRefusedBeforeDecoding) {
  testing::Detach();
  {
    remote::Socket s = RawAttached();
    ASSERT_TRUE(s.valid());
    const uint32_t n = 1u << 20;
    protocol::ByteBuffer body;
    protocol::Writer w(&body);
    w.Put<uint8_t>(static_cast<uint8_t>(remote::Op::kSyncAll));
    w.Put<uint32_t>(0);  // no frees
    w.Put<uint32_t>(n);  // n operands, each a one-byte None
    body.Resize(body.size() + n);
    std::memset(body.data() + body.size() - n, 0, n);
    try {
      RawRequest(&s, body);
      ADD_FAILURE() << "expected a ProtocolError";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("values this request may decode to"), std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(RawOp(&s, remote::Op::kSyncAll, {}).empty());  // the client goes on
  }
  testing::Reattach();
  ExpectServing();
}

TEST_F(RemoteTest, RandomRequestsNeverBringTheServerDown) {
  // Well-framed packets of random bytes after a valid op byte: each is answered with an error or
  // gets the client dropped (a copy that swallows what follows as chunks); the job goes on.
  testing::Detach();
  std::mt19937_64 rng(20261130);
  int answered = 0, dropped = 0;
  remote::Socket s;
  for (int i = 0; i < 3000; ++i) {
    if (!s.valid()) s = RawAttached();
    ASSERT_TRUE(s.valid());
    protocol::ByteBuffer body;
    body.Resize(1 + rng() % 64);
    for (size_t k = 0; k < body.size(); ++k) body.data()[k] = static_cast<uint8_t>(rng());
    body.data()[0] = static_cast<uint8_t>(1 + rng() % 9);  // not Detach, not ShutdownJob
    if (rng() % 4 == 0 && body.size() >= 9) {              // a plausible header: few frees
      std::memset(body.data() + 1, 0, 4);
      body.data()[5] = static_cast<uint8_t>(rng() % 4);
      std::memset(body.data() + 6, 0, 3);
    }
    try {
      RawRequest(&s, body);
      ++answered;
    } catch (const RuntimeError& e) {  // closed: the server dropped this client
      ++dropped;
      s.Close();
    } catch (const Error&) {  // a typed error answer
      ++answered;
    }
  }
  s.Close();
  EXPECT_GT(answered, 2000) << dropped << " dropped";
  std::printf("random requests: %d answered with an error, %d got the client dropped\n", answered,
              dropped);
  testing::Reattach();
  ExpectServing();
}

TEST_F(RemoteTest, IdleClientsAreDropped) {
  testing::Detach();
  remote::Socket s = RawAttached();
  ASSERT_TRUE(s.valid());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(ClosedByServer(&s, 60000));  // the test server's idle timeout is 20 s
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 19.5);
  testing::Reattach();
  ExpectServing();
}

TEST_F(RemoteTest, AClientThatVanishesLeavesNoRegistersBehind) {
  DRef live = S().CallPacked(S().GetGlobalFunc("test.live_registers"));
  std::vector<int64_t> before;
  for (int w = 0; w < S().num_workers(); ++w) {
    before.push_back(live.DebugGetFromRemote(w).cast<int64_t>());
  }
  live = DRef();
  testing::Detach();
  // A child process attaches, fills registers (1 MiB tensors among them) and dies without a word.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      Session c = testing::ConnectRetrying(testing::ServerKey());
      std::vector<DRef> keep;
      DRef affine = c.GetGlobalFunc("test.affine");
      for (int i = 0; i < 20; ++i) {
        keep.push_back(c.Empty(Shape{1 << 18}, DataType("float32")));
        keep.push_back(c.CallPacked(affine, i));
      }
      DRef live_now = c.CallPacked(c.GetGlobalFunc("test.live_registers"));
      for (int w = 0; w < c.num_workers(); ++w) {
        if (live_now.DebugGetFromRemote(w).cast<int64_t>() < before[w] + 40) code = 4;
      }
      c.CallPacked(affine, 1);  // in flight when the process dies
    } catch (...) {
      code = 3;
    }
    _exit(code);  // no destructors: the socket just closes
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "3: the child failed, 4: its registers did not show";
  testing::Reattach();
  live = S().CallPacked(S().GetGlobalFunc("test.live_registers"));
  for (int w = 0; w < S().num_workers(); ++w) {
    EXPECT_EQ(live.DebugGetFromRemote(w).cast<int64_t>(), before[w]) << "worker " << w;
  }
  ExpectServing();
}

TEST_F(RemoteTest, AClientThatDetachesCanAttachAgainAtOnce) {
  // The server answers a detach only once it has cleaned up and can take the next client.
  for (int i = 0; i < 5; ++i) {
    testing::Detach();
    Session c = Connect(testing::ServerHost(), testing::ServerPort(), testing::ServerKey());
    DRef r = c.CallPacked(c.GetGlobalFunc("test.affine"), i);
    EXPECT_EQ(r.DebugGetFromRemote(c.num_workers() - 1).cast<int64_t>(),
              i * 1000 + c.num_workers() - 1);
    // The previous connection is gone by now: a third client still finds the server busy.
    try {
      Connect(testing::ServerHost(), testing::ServerPort(), testing::ServerKey());
      ADD_FAILURE() << "a second client was let in beside the first";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("busy"), std::string::npos) << e.what();
    }
    c.Shutdown();
    testing::Reattach();
  }
  ExpectServing();
}

TEST_F(RemoteTest, ADetachedSessionRefusesCallsClearly) {
  Session& s = S();
  DRef f = s.GetGlobalFunc("test.echo");
  s.Shutdown();
  try {
    s.CallPacked(f, 1);
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("after the remote session"), std::string::npos)
        << e.what();
  }
  testing::Reattach();
  ExpectServing();
}

}  // namespace
}  // namespace disco
