// The session at every world size: values in and out, every action on every worker, errors and
// their recovery, the register free list. Expected values are formulas of the worker id.
#include <disco/disco.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "ccl/context.h"
#include "core/device_memory.h"
#include "mpi/mpi_test_env.h"
#include "session/session_impl.h"
#include "session/worker.h"

namespace disco {
namespace {

using testing::g_session;
using testing::RemoteErrorOf;

// ---- Functions the tests call on every worker
// ----------------------------------------------------

DISCO_REGISTER_GLOBAL("test.echo").set_body_typed([](Any x) { return x; });
DISCO_REGISTER_GLOBAL("test.noop").set_body_packed([](const Args&, Any*) {});
DISCO_REGISTER_GLOBAL("test.affine").set_body_typed([](int64_t x) {
  return x * 1000 + ThisWorker().worker_id;
});
DISCO_REGISTER_GLOBAL("test.scale").set_body_typed([](double x) {
  return x * (ThisWorker().worker_id + 1);
});
DISCO_REGISTER_GLOBAL("test.suffix").set_body_typed([](std::string s) {
  return s + "@" + std::to_string(ThisWorker().worker_id);
});
DISCO_REGISTER_GLOBAL("test.bytes_len").set_body_typed([](Bytes b) {
  return static_cast<int64_t>(b.size());
});
DISCO_REGISTER_GLOBAL("test.shape_append").set_body_typed([](Shape s) {
  std::vector<int64_t> dims = s.dims();
  dims.push_back(ThisWorker().worker_id);
  return Shape(dims);
});
DISCO_REGISTER_GLOBAL("test.host_local_rank_and_size").set_body_typed([]() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + " " + std::to_string(ThisWorker().local_rank) + " " +
         std::to_string(ThisWorker().local_size);
});
// Fills a float32 tensor with worker_id * 1000 + i.
DISCO_REGISTER_GLOBAL("test.fill_iota").set_body_typed([](Tensor t) {
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(ThisWorker().worker_id * 1000 + i);
  return t;
});
// Returns a new tensor: t * k (float32).
DISCO_REGISTER_GLOBAL("test.times").set_body_typed([](Tensor t, double k) {
  Tensor out = Tensor::Empty(t.shape(), t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i) out.data_as<float>()[i] = t.data_as<float>()[i] * k;
  return out;
});
DISCO_REGISTER_GLOBAL("test.throw_if").set_body_typed([](int64_t worker, std::string msg) {
  if (worker < 0 || worker == ThisWorker().worker_id) throw ValueError(msg);
  return int64_t{1};
});
DISCO_REGISTER_GLOBAL("test.expect_int").set_body_typed([](int64_t got, int64_t want) {
  DISCO_CHECK(got == want, ValueError)
      << "worker " << ThisWorker().worker_id << ": got " << got << ", want " << want;
});
DISCO_REGISTER_GLOBAL("test.live_registers").set_body_typed([]() {
  return static_cast<int64_t>(detail::CurrentWorker()->num_live_registers());
});
DISCO_REGISTER_GLOBAL("test.register_capacity").set_body_typed([]() {
  return static_cast<int64_t>(detail::CurrentWorker()->register_capacity());
});
DISCO_REGISTER_GLOBAL("test.add").set_body_typed([](int64_t a, int64_t b) { return a + b; });
// CPU time this process has used, in milliseconds.
DISCO_REGISTER_GLOBAL("test.cpu_ms").set_body_typed([]() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>((u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000 +
                              (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000);
});

class SessionTest : public ::testing::Test {
 protected:
  Session& s() { return *g_session; }
  int n() { return g_session->num_workers(); }
  DRef F(const std::string& name) { return s().GetGlobalFunc(name); }
};

// ---- Tests
// ---------------------------------------------------------------------------------------

TEST_F(SessionTest, WorkerIdsAndCounts) {
  DRef id = s().CallPacked(F("disco.worker_id"));
  DRef count = s().CallPacked(F("disco.num_workers"));
  DRef dev = s().CallPacked(F("disco.device"));
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(id.DebugGetFromRemote(w).cast<int64_t>(), w);
    EXPECT_EQ(count.DebugGetFromRemote(w).cast<int64_t>(), n());
    EXPECT_EQ(dev.DebugGetFromRemote(w).cast<DLDevice>(), CPU());
  }
  // Per host: local ranks 0..k-1, each worker counting the k workers of its host.
  DRef local = s().CallPacked(F("test.host_local_rank_and_size"));
  std::map<std::string, std::set<int>> ranks;
  std::map<std::string, int> sizes;
  for (int w = 0; w < n(); ++w) {
    std::istringstream in(local.DebugGetFromRemote(w).cast<std::string>());
    std::string host;
    int rank = -1, size = -1;
    in >> host >> rank >> size;
    ranks[host].insert(rank);
    sizes[host] = size;
  }
  for (const auto& [host, r] : ranks) {
    EXPECT_EQ(static_cast<int>(r.size()), sizes[host]) << host;
    EXPECT_EQ(*r.begin(), 0) << host;
    EXPECT_EQ(*r.rbegin(), sizes[host] - 1) << host;
  }
  s().SyncAll();
}

TEST_F(SessionTest, CollectivesNameAnEmptyDRefAndTheSessionGoesOn) {
  DRef x = s().Empty(Shape{4}, DataType("float32"));
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              s().AllReduce(x, "sum", false, DRef());
            }).find("AllReduce: recv is an empty DRef (for in place, pass the same DRef"),
            std::string::npos);
  EXPECT_NE(message([&] { s().AllGather(DRef(), false, x); }).find("AllGather: send is an empty"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s().ReduceScatter(x, "sum", false, DRef());
            }).find("ReduceScatter: recv is an empty DRef"),
            std::string::npos);
  s().SyncAll();
}

TEST_F(SessionTest, ScalarArgumentsAndResultsOnEveryWorker) {
  DRef ints = s().CallPacked(F("test.affine"), 42);
  DRef floats = s().CallPacked(F("test.scale"), 0.25);
  DRef strs = s().CallPacked(F("test.suffix"), "w");
  DRef bytes = s().CallPacked(F("test.bytes_len"), Bytes(std::string(300, 'x')));
  DRef shapes = s().CallPacked(F("test.shape_append"), Shape{7, 0});
  DRef none = s().CallPacked(F("test.echo"), Any());
  DRef dtype = s().CallPacked(F("test.echo"), DataType("bfloat16"));
  DRef boolean = s().CallPacked(F("test.echo"), false);
  DRef big = s().CallPacked(F("test.echo"), std::numeric_limits<int64_t>::min());
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(ints.DebugGetFromRemote(w).cast<int64_t>(), 42000 + w);
    EXPECT_EQ(floats.DebugGetFromRemote(w).cast<double>(), 0.25 * (w + 1));
    EXPECT_EQ(strs.DebugGetFromRemote(w).cast<std::string>(), "w@" + std::to_string(w));
    EXPECT_EQ(bytes.DebugGetFromRemote(w).cast<int64_t>(), 300);
    EXPECT_EQ(shapes.DebugGetFromRemote(w).cast<Shape>(), (Shape{7, 0, w}));
    EXPECT_TRUE(none.DebugGetFromRemote(w).is_none());
    EXPECT_EQ(dtype.DebugGetFromRemote(w).cast<DLDataType>(), DataType("bfloat16"));
    EXPECT_EQ(boolean.DebugGetFromRemote(w).cast<bool>(), false);
    EXPECT_EQ(big.DebugGetFromRemote(w).cast<int64_t>(), std::numeric_limits<int64_t>::min());
  }
}

TEST_F(SessionTest, RegistersChainBetweenCalls) {
  DRef add = F("test.add");
  DRef a = s().CallPacked(F("test.affine"), 1);  // 1000 + w
  DRef b = s().CallPacked(add, a, a);            // 2000 + 2w
  DRef c = s().CallPacked(add, b, 5);            // 2005 + 2w
  for (int w = 0; w < n(); ++w) EXPECT_EQ(c.DebugGetFromRemote(w).cast<int64_t>(), 2005 + 2 * w);
  s().CallPacked(F("test.expect_int"), c, Any());  // wrong type: caught below
  EXPECT_NE(RemoteErrorOf([&] { s().SyncAll(); }).find("argument 1: expected int, got None"),
            std::string::npos);
}

TEST_F(SessionTest, LargeArgumentsTakeTheSecondBroadcast) {
  for (size_t size : {size_t{0}, size_t{100}, size_t{200}, size_t{232}, size_t{233}, size_t{4096},
                      size_t{1} << 20}) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 + size);
    DRef len = s().CallPacked(F("test.bytes_len"), Bytes(data));
    DRef echo = s().CallPacked(F("test.echo"), Bytes(data));
    for (int w = 0; w < n(); ++w) {
      EXPECT_EQ(len.DebugGetFromRemote(w).cast<int64_t>(), static_cast<int64_t>(size));
      EXPECT_EQ(echo.DebugGetFromRemote(w).cast<Bytes>().str(), data) << size << " on " << w;
    }
  }
}

TEST_F(SessionTest, TensorArgumentsAndDebugReadsByValue) {
  Tensor host = Tensor::Empty(Shape{5}, DataType("float32"));
  for (int i = 0; i < 5; ++i) host.data_as<float>()[i] = i + 0.5f;
  DRef scaled = s().CallPacked(F("test.times"), host, 4.0);
  for (int w = 0; w < n(); ++w) {
    Tensor t = scaled.DebugGetFromRemote(w).cast<Tensor>();
    ASSERT_EQ(t.shape(), Shape{5});
    for (int i = 0; i < 5; ++i) EXPECT_EQ(t.data_as<float>()[i], (i + 0.5f) * 4) << w;
  }
  // A 0-d and an empty tensor survive the trip too.
  DRef scalar = s().CallPacked(F("test.echo"), Tensor::Empty(Shape{}, DataType("int64")));
  DRef empty = s().CallPacked(F("test.echo"), Tensor::Empty(Shape{0, 3}, DataType("float16")));
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(scalar.DebugGetFromRemote(w).cast<Tensor>().shape(), Shape{});
    EXPECT_EQ(empty.DebugGetFromRemote(w).cast<Tensor>().shape(), (Shape{0, 3}));
  }
}

TEST_F(SessionTest, TensorRoundTripThroughWorker0) {
  DRef remote = s().Empty(Shape{2, 3}, DataType("float32"));
  DRef filled = s().CallPacked(F("test.fill_iota"), remote);
  Tensor in = Tensor::Empty(Shape{2, 3}, DataType("float32"));
  for (int i = 0; i < 6; ++i) in.data_as<float>()[i] = -static_cast<float>(i);
  s().CopyToWorker0(in, remote);  // overwrites worker 0's values only
  DRef doubled = s().CallPacked(F("test.times"), remote, 2.0);
  Tensor out = Tensor::Empty(Shape{2, 3}, DataType("float32"));
  s().CopyFromWorker0(out, doubled);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.data_as<float>()[i], -2.0f * i);
  for (int w = 1; w < n(); ++w) {
    Tensor t = doubled.DebugGetFromRemote(w).cast<Tensor>();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data_as<float>()[i], 2.0f * (w * 1000 + i));
  }
  EXPECT_THROW(s().CopyFromWorker0(Tensor::Empty(Shape{7}, DataType("float32")), doubled),
               ValueError);
  DRef not_tensor = s().CallPacked(F("test.echo"), 3);
  EXPECT_THROW(s().CopyToWorker0(in, not_tensor), TypeError);
}

TEST_F(SessionTest, EmptyHonoursWorker0Only) {
  DRef only0 = s().Empty(Shape{3}, DataType("int8"), CPU(), /*worker0_only=*/true);
  DRef all = s().Empty(Shape{3}, DataType("int8"));
  EXPECT_EQ(only0.DebugGetFromRemote(0).cast<Tensor>().shape(), Shape{3});
  for (int w = 1; w < n(); ++w) {
    EXPECT_TRUE(only0.DebugGetFromRemote(w).is_none());
    EXPECT_EQ(all.DebugGetFromRemote(w).cast<Tensor>().shape(), Shape{3});
  }
}

TEST_F(SessionTest, EveryActionOnEveryWorker) {
  DRef reg = s().CallPacked(F("test.echo"), 0);
  for (int w = 0; w < n(); ++w) {
    s().SyncWorker(w);
    s().DebugSetRegister(reg.reg_id(), Any(static_cast<int64_t>(w * 11)), w);
    reg.DebugCopyFrom(w, Any(static_cast<int64_t>(w * 11 + 1)));
  }
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(s().DebugGetFromRemote(reg.reg_id(), w).cast<int64_t>(), w * 11 + 1);
  }
  // A tensor set by value on one worker is visible there only.
  Tensor t = Tensor::Empty(Shape{2}, DataType("int32"));
  t.data_as<int32_t>()[0] = 5;
  t.data_as<int32_t>()[1] = 6;
  int last = n() - 1;
  reg.DebugCopyFrom(last, Any(t));
  Tensor back = reg.DebugGetFromRemote(last).cast<Tensor>();
  EXPECT_EQ(back.data_as<int32_t>()[1], 6);
  // Setting a register from another register resolves on the worker.
  DRef other = s().CallPacked(F("test.affine"), 9);
  reg.DebugCopyFrom(last, Any(other));
  EXPECT_EQ(reg.DebugGetFromRemote(last).cast<int64_t>(), 9000 + last);
  s().SyncAll();
}

TEST_F(SessionTest, BadControllerArgumentsAreValueErrors) {
  DRef reg = s().CallPacked(F("test.echo"), 1);
  EXPECT_THROW(s().SyncWorker(n()), ValueError);
  EXPECT_THROW(s().SyncWorker(-1), ValueError);
  EXPECT_THROW(s().DebugGetFromRemote(reg.reg_id(), n()), ValueError);
  EXPECT_THROW(s().DebugGetFromRemote(1 << 30, 0), ValueError);
  EXPECT_THROW(s().DebugSetRegister(0, Any(1), 0), ValueError);
  EXPECT_THROW(s().CallPacked(DRef(), 1), ValueError);
  EXPECT_THROW(s().CallPacked(F("test.echo"), MakeFunction([](const Args&, Any*) {})), ValueError);
  s().SyncAll();  // nothing was sent for the refused calls: the session is in step
  EXPECT_EQ(s().CallPacked(F("test.affine"), 3).DebugGetFromRemote(n() - 1).cast<int64_t>(),
            3000 + n() - 1);
}

TEST_F(SessionTest, UnknownFunctionIsARemoteErrorAndTheSessionGoesOn) {
  DRef bad = F("no.such.function");
  int worker = -1;
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); }, &worker);
  EXPECT_EQ(worker, 0);
  EXPECT_NE(msg.find("unknown global function 'no.such.function'"), std::string::npos) << msg;
  if (n() > 1) {
    EXPECT_NE(msg.find("more error report"), std::string::npos) << msg;
  }
  // Calling the poisoned function register names it and the original failure.
  DRef r = s().CallPacked(bad, 1);
  msg = RemoteErrorOf([&] { s().SyncWorker(n() - 1); });
  EXPECT_NE(msg.find("holds the failure of an earlier call to 'no.such.function'"),
            std::string::npos)
      << msg;
  try {
    s().SyncAll();  // reports of the workers in between may arrive only now
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("no.such.function"), std::string::npos) << e.what();
  }
  s().SyncAll();
  EXPECT_EQ(s().CallPacked(F("test.affine"), 2).DebugGetFromRemote(0).cast<int64_t>(), 2000);
}

TEST_F(SessionTest, ThrowingFunctionOnOneWorker) {
  int target = n() - 1;
  DRef r = s().CallPacked(F("test.throw_if"), target, "boom on purpose");
  int worker = -1;
  std::string msg = RemoteErrorOf([&] { s().SyncWorker(target); }, &worker);
  EXPECT_EQ(worker, target);
  EXPECT_NE(msg.find("worker " + std::to_string(target) + " failed in 'test.throw_if'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("boom on purpose"), std::string::npos) << msg;
  // The other workers hold the result; the failed one holds the failure.
  for (int w = 0; w < target; ++w) EXPECT_EQ(r.DebugGetFromRemote(w).cast<int64_t>(), 1);
  msg = RemoteErrorOf([&] { r.DebugGetFromRemote(target); });
  EXPECT_NE(msg.find("holds the failure of 'test.throw_if'"), std::string::npos) << msg;
  // A poisoned register as an argument names the register and the original failure.
  DRef next = s().CallPacked(F("test.add"), r, 1);
  msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("argument 0 is register " + std::to_string(r.reg_id()) +
                     ", which holds the failure of an earlier call to 'test.throw_if': "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("boom on purpose"), std::string::npos) << msg;
  s().SyncAll();
}

// A debug write neither overwrites a function register nor writes a function: every worker must
// hold the same function in a register (the controller sends a call as a collective or not by
// worker 0's; a worker holding another function would enter a collective alone, a hang).
TEST_F(SessionTest, DebugWritesOfFunctionsAreRefusedAtOnce) {
  DRef allreduce = F("disco.allreduce");
  DRef worker_id = F("disco.worker_id");
  DRef value = s().CallPacked(F("test.echo"), 4);
  for (int w = 0; w < n(); ++w) {
    for (const Any& v : {Any(worker_id), Any(int64_t{5})}) {
      try {
        s().DebugSetRegister(allreduce.reg_id(), v, w);
        ADD_FAILURE() << "expected a ValueError writing " << v.ToString() << " to worker " << w;
      } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("holds the function 'disco.allreduce'"),
                  std::string::npos)
            << e.what();
      }
    }
    try {
      s().DebugSetRegister(value.reg_id(), Any(worker_id), w);
      ADD_FAILURE() << "expected a ValueError writing a function to worker " << w;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("is a function"), std::string::npos) << e.what();
    }
  }
  s().SyncAll();  // nothing was sent
  DRef ids = s().CallPacked(worker_id);
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(ids.DebugGetFromRemote(w).cast<int64_t>(), w);
    EXPECT_EQ(value.DebugGetFromRemote(w).cast<int64_t>(), 4);
  }
}

// A collective whose tensor argument failed (on one worker, or on all) and that then fails before
// its agreement round alike on every worker (an unknown op, an op of the wrong type, a missing
// argument; no InitCCL) has no worker waiting in the round: each raises, and the session goes on
// (the failed worker with its argument's failure).
TEST_F(SessionTest, ACollectiveFailingBeforeItsRoundOnAFailedArgumentIsARemoteError) {
  DRef allreduce = F("disco.allreduce");
  for (int failing : {n() - 1, -1}) {
    DRef bad = s().CallPacked(F("test.throw_if"), failing, "made to fail");
    RemoteErrorOf([&] { s().SyncAll(); });
    std::vector<DRef> calls = {s().CallPacked(allreduce, bad, "bogus", false, bad),
                               s().CallPacked(allreduce, bad, 5, false, bad),
                               s().CallPacked(allreduce, bad, "sum", false)};
    RemoteErrorOf([&] { s().SyncAll(); });
    for (size_t c = 0; c < calls.size(); ++c) {
      for (int w = 0; w < n(); ++w) {
        std::string msg = RemoteErrorOf([&] { calls[c].DebugGetFromRemote(w); });
        const bool failed_here = failing < 0 || failing == w;
        EXPECT_EQ(msg.find("made to fail") != std::string::npos, failed_here)
            << "call " << c << ", worker " << w << ": " << msg;
      }
    }
  }
  EXPECT_EQ(s().CallPacked(F("test.affine"), 5).DebugGetFromRemote(n() - 1).cast<int64_t>(),
            5000 + n() - 1);
}

DISCO_REGISTER_GLOBAL("test.throw_protocol_error").set_body_typed([]() {
  throw ProtocolError("my own parser failed");
});

TEST_F(SessionTest, AFunctionThrowingProtocolErrorIsAnOrdinaryFailure) {
  s().CallPacked(F("test.throw_protocol_error"));
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("my own parser failed"), std::string::npos) << msg;
  EXPECT_EQ(s().CallPacked(F("test.affine"), 4).DebugGetFromRemote(n() - 1).cast<int64_t>(),
            4000 + n() - 1);
}

TEST_F(SessionTest, WrongArgumentTypeNamesFunctionPositionAndTypes) {
  s().CallPacked(F("test.affine"), "not a number");
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("test.affine: argument 0: expected int, got string"), std::string::npos)
      << msg;
  s().CallPacked(F("test.add"), 1);
  msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("test.add: expected 2 arguments, got 1"), std::string::npos) << msg;
}

TEST_F(SessionTest, ErrorsRaiseAtDebugReads) {
  s().CallPacked(F("test.throw_if"), -1, "everyone fails");
  DRef ok = s().CallPacked(F("test.echo"), 5);
  std::string msg = RemoteErrorOf([&] { ok.DebugGetFromRemote(n() - 1); });
  EXPECT_NE(msg.find("everyone fails"), std::string::npos) << msg;
  try {
    s().SyncAll();  // the reports of the other workers, unless they came with the first raise
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("everyone fails"), std::string::npos) << e.what();
  }
  s().SyncAll();
  EXPECT_EQ(ok.DebugGetFromRemote(n() - 1).cast<int64_t>(), 5);
}

DISCO_REGISTER_GLOBAL("test.make_object").set_body_typed([]() {
  return Object::Make(std::make_shared<int>(ThisWorker().worker_id), "test.int");
});

TEST_F(SessionTest, UnsendableRegistersAreRefusedNotFatal) {
  DRef obj = s().CallPacked(F("test.make_object"));
  DRef func = F("test.echo");
  // In the job, worker 0 is in process and nothing crosses a wire; a remote client reads worker
  // 0 over TCP like any other.
  int first_remote = s().impl() != nullptr ? 1 : 0;
  if (first_remote == 1) {
    EXPECT_EQ(*obj.DebugGetFromRemote(0).cast<Object>().as<int>(), 0);
  }
  for (int w = first_remote; w < n(); ++w) {
    try {
      obj.DebugGetFromRemote(w);
      ADD_FAILURE() << "expected a ValueError";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot be read remotely"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(func.DebugGetFromRemote(w), ValueError);
  }
  // Objects still work as arguments on their own worker.
  s().SyncAll();
}

TEST_F(SessionTest, ParkedWorkersSleepAndWakeForTheNextCommand) {
  if (s().impl() == nullptr) GTEST_SKIP() << "parking is done by the serving side";
  DRef cpu = s().CallPacked(F("test.cpu_ms"));
  std::vector<int64_t> before;
  for (int w = 0; w < n(); ++w) before.push_back(cpu.DebugGetFromRemote(w).cast<int64_t>());
  s().impl()->ParkWorkers();
  s().impl()->ParkWorkers();  // already parked: nothing more is sent
  EXPECT_EQ(s().impl()->workers_parked(), n() > 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  DRef after = s().CallPacked(F("test.cpu_ms"));  // the next command wakes them
  EXPECT_FALSE(s().impl()->workers_parked());
  for (int w = 1; w < n(); ++w) {
    // Spinning in MPI would take most of the 400 ms (a share of it when oversubscribed).
    EXPECT_LT(after.DebugGetFromRemote(w).cast<int64_t>() - before[w], 80)
        << "worker " << w << " used this much CPU (ms) while parked for 400 ms";
  }
  DRef r = s().CallPacked(F("test.affine"), 6);
  for (int w = 0; w < n(); ++w) EXPECT_EQ(r.DebugGetFromRemote(w).cast<int64_t>(), 6000 + w);
}

TEST_F(SessionTest, LoadLibraryErrorsNameThePath) {
  s().CallPacked(F("disco.load_library"), "/nonexistent/libplugin.so");
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("cannot load '/nonexistent/libplugin.so'"), std::string::npos) << msg;
}

// ---- Outside testing (#13): values, exceptions and registers that once ended the job ----------

// Values the workers' decoders refuse are refused by the controller's encoder first: nothing is
// sent, the job goes on (a worker that cannot decode a command must end the job).
TEST_F(SessionTest, ValuesWorkersWouldRejectAreValueErrorsBeforeSending) {
  DLDataType f32 = DataType("float32");
  EXPECT_THROW(s().Empty(Shape{-1}, f32), ValueError);
  EXPECT_THROW(s().Empty(Shape{3, -2}, f32), ValueError);
  EXPECT_THROW(s().Empty(Shape(std::vector<int64_t>(65, 1)), f32), ValueError);
  for (DLDataType bad :
       {DLDataType{kDLFloat, 0, 1}, DLDataType{kDLFloat, 32, 0}, DLDataType{99, 32, 1}}) {
    EXPECT_THROW(s().Empty(Shape{4}, bad), ValueError);
    EXPECT_THROW(s().CallPacked(F("test.echo"), Any(bad)), ValueError);
  }
  EXPECT_THROW(s().CallPacked(F("test.echo"), DRef::Unowned(-5)), ValueError);
  s().SyncAll();
  DRef ok = s().CallPacked(F("test.affine"), 4);
  for (int w = 0; w < n(); ++w) EXPECT_EQ(ok.DebugGetFromRemote(w).cast<int64_t>(), 4000 + w);
}

DISCO_REGISTER_GLOBAL("test.throw_nonstd").set_body_typed([](int64_t worker, std::string kind) {
  if (ThisWorker().worker_id != worker) return;
  if (kind == "int") throw 42;
  throw "a C string";
});

// `throw 42;` in a worker function is that function's failure, like any exception: a RemoteError
// naming the worker and the thrown type, on worker 0 too, and the session goes on.
TEST_F(SessionTest, NonStandardExceptionsAreRemoteErrors) {
  for (int worker : {0, n() - 1}) {
    for (const char* kind : {"int", "cstr"}) {
      s().CallPacked(F("test.throw_nonstd"), worker, kind);
      int reported = -1;
      std::string msg = RemoteErrorOf([&] { s().SyncAll(); }, &reported);
      EXPECT_EQ(reported, worker) << msg;
      EXPECT_NE(msg.find("test.throw_nonstd"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string(kind) == "int" ? "threw a int" : "threw a char const*"),
                std::string::npos)
          << msg;
    }
  }
  DRef ok = s().CallPacked(F("test.affine"), 5);
  EXPECT_EQ(ok.DebugGetFromRemote(n() - 1).cast<int64_t>(), 5000 + n() - 1);
}

// A DRef of another session (another generation) names nothing here.
TEST_F(SessionTest, DRefOfAnotherSessionIsAValueError) {
  DRef mine = s().Empty(Shape{3}, DataType("int32"));
  DRef foreign = DRef::Make(mine.reg_id(), 987654321);
  Tensor host = Tensor::Empty(Shape{3}, DataType("int32"));
  EXPECT_THROW(s().CallPacked(F("test.echo"), foreign), ValueError);
  EXPECT_THROW(s().CallPacked(foreign, 1), ValueError);
  EXPECT_THROW(s().CopyFromWorker0(host, foreign), ValueError);
  EXPECT_THROW(s().CopyToWorker0(host, foreign), ValueError);
  EXPECT_THROW(s().DebugSetRegister(mine.reg_id(), Any(foreign), 0), ValueError);
  s().SyncAll();
}

// As TVM's Disco: a debug write copies the value into the register's tensor (dtype and element
// count must match; the register keeps its shape), so a staging tensor reused for every worker
// leaves each its own data, on worker 0 too, and a collective on the register never writes the
// caller's array.
TEST_F(SessionTest, DebugCopyFromCopiesIntoTheRegister) {
  DRef x = s().Empty(Shape{4}, DataType("float32"));
  Tensor staging = Tensor::Empty(Shape{4}, DataType("float32"));
  for (int w = 0; w < n(); ++w) {
    for (int i = 0; i < 4; ++i) staging.data_as<float>()[i] = 100.0f * w + i;
    x.DebugCopyFrom(w, staging);
  }
  for (int w = 0; w < n(); ++w) {
    Tensor got = x.DebugGetFromRemote(w).cast<Tensor>();
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(got.data_as<float>()[i], 100.0f * w + i) << "worker " << w;
  }
  s().InitCCL("mpi");
  s().AllReduce(x, "sum", false, x);
  s().SyncAll();
  EXPECT_EQ(staging.data_as<float>()[0], 100.0f * (n() - 1));  // untouched by the allreduce
  // A tensor of the same dtype and element count but another shape fills the register, which
  // keeps its shape (TVM checks the byte size only).
  Tensor square = Tensor::Empty(Shape{2, 2}, DataType("float32"));
  for (int i = 0; i < 4; ++i) square.data_as<float>()[i] = 7.0f + i;
  for (int w : {0, n() - 1}) {
    x.DebugCopyFrom(w, square);
    Tensor got = x.DebugGetFromRemote(w).cast<Tensor>();
    EXPECT_EQ(got.shape(), Shape{4});
    EXPECT_EQ(got.data_as<float>()[3], 10.0f);
  }
  // Another element count or dtype is refused, and the register keeps its tensor.
  for (const Tensor& wrong : {Tensor::Empty(Shape{2, 3}, DataType("float32")),
                              Tensor::Empty(Shape{4}, DataType("int32"))}) {
    for (int w : {0, n() - 1}) {
      try {
        x.DebugCopyFrom(w, wrong);
        s().SyncAll();
        ADD_FAILURE() << "a " << wrong.ToString() << " was copied into a (4,) float32 register "
                      << "on worker " << w;
      } catch (const Error& e) {  // ValueError at once on worker 0 in the job, else a RemoteError
        EXPECT_NE(std::string(e.what()).find("dtype and element count must match"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(x.DebugGetFromRemote(w).cast<Tensor>().shape(), Shape{4});
    }
  }
  // A register without a tensor takes a copy of its own.
  DRef fresh = s().CallPacked(F("test.echo"), 1);
  fresh.DebugCopyFrom(0, staging);
  staging.data_as<float>()[0] = -1;
  EXPECT_EQ(fresh.DebugGetFromRemote(0).cast<Tensor>().data_as<float>()[0], 100.0f * (n() - 1));
  s().SyncAll();
}

DISCO_REGISTER_GLOBAL("test.big_tensor").set_body_typed([](int64_t worker, int64_t bytes) -> Any {
  if (ThisWorker().worker_id != worker) return Any();
  Tensor t = Tensor::Empty(Shape{bytes}, DataType("uint8"));
  std::memset(t.data(), 7, static_cast<size_t>(bytes));
  return Any(t);
});

// A debug read larger than the controller accepts (DISCO_MAX_FRAME_BYTES; MPI's 2 GiB per message
// the same way) is a ValueError that says so, and the next reply from that worker is its own: the
// job goes on. ctest mpi.session.small_frames.np2 runs this with DISCO_MAX_FRAME_BYTES=65536.
TEST_F(SessionTest, DebugReadsOverTheFrameLimitAreValueErrors) {
  const char* limit = std::getenv("DISCO_MAX_FRAME_BYTES");
  if (limit == nullptr || s().impl() == nullptr || n() < 2) {
    GTEST_SKIP() << "needs DISCO_MAX_FRAME_BYTES, an in-job session and 2 workers";
  }
  const int w = n() - 1;
  DRef big = s().CallPacked(F("test.big_tensor"), w, int64_t{1} << 20);
  try {
    big.DebugGetFromRemote(w);
    ADD_FAILURE() << "a 1 MiB debug read passed a limit of " << limit << " bytes";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("more than a debug read carries"), std::string::npos)
        << e.what();
  }
  DRef small = s().CallPacked(F("test.affine"), 2);
  EXPECT_EQ(small.DebugGetFromRemote(w).cast<int64_t>(), 2000 + w);
  s().SyncWorker(w);
  s().SyncAll();
}

// Buffers grown for one large message are freed after it: RSS comes back near where it was.
TEST_F(SessionTest, LargeTransfersDoNotPinTheirBuffers) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's quarantine keeps freed memory mapped";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer's quarantine keeps freed memory mapped";
#endif
#endif
  const int w = n() - 1;
  DRef mem = F("disco.memory_kib");
  auto rss_kib = [&](int worker) {
    return s().CallPacked(mem).DebugGetFromRemote(worker).cast<Shape>()[0];
  };
  const int64_t bytes = int64_t{96} << 20;
  int64_t before0 = rss_kib(0), before_w = rss_kib(w);
  for (int round = 0; round < 2; ++round) {
    DRef big = s().CallPacked(F("test.big_tensor"), w, bytes);
    Tensor t = big.DebugGetFromRemote(w).cast<Tensor>();
    EXPECT_EQ(t.nbytes(), static_cast<size_t>(bytes));
    EXPECT_EQ(static_cast<uint8_t*>(t.data())[bytes - 1], 7);
  }
  {
    std::string text(static_cast<size_t>(48) << 20, 'x');  // a large argument: the frames
    s().CallPacked(F("test.suffix"), text);
    s().SyncAll();
  }
  int64_t grown0 = rss_kib(0) - before0, grown_w = rss_kib(w) - before_w;
  EXPECT_LT(grown0, 32 * 1024) << "rank 0 kept " << grown0 << " KiB after the transfers";
  EXPECT_LT(grown_w, 32 * 1024) << "worker " << w << " kept " << grown_w << " KiB";
}

// disco.empty_cache gives the freed memory of the CUDA pools back; on workers that never
// allocated device memory (CPU workers, builds without CUDA) it releases nothing, without error.
TEST_F(SessionTest, EmptyCacheWithoutDeviceMemoryReleasesNothing) {
  DRef host = s().Empty(Shape{1024}, DataType("float32"));
  DRef released = s().CallPacked(F("disco.empty_cache"));
  const bool gpus = memory::CudaDeviceCount() > 0;  // the suite may have used them (auto: NCCL)
  for (int w = 0; w < n(); ++w) {
    int64_t bytes = released.DebugGetFromRemote(w).cast<int64_t>();
    if (gpus) {
      EXPECT_GE(bytes, 0) << "worker " << w;
    } else {
      EXPECT_EQ(bytes, 0) << "worker " << w;
    }
  }
  testing::ExpectNoRemoteError(s(), "disco.empty_cache");
}

// Registers hold arrays and maps (A3): a function returns several tensors, they cross the wire in
// frames, replies and remote sessions, and a debug read returns them.
DISCO_REGISTER_GLOBAL("test.two_tensors").set_body_typed([](int64_t n) {
  const int w = ThisWorker().worker_id;
  Tensor a = Tensor::Empty(Shape{n}, DataType("float32"));
  Tensor b = Tensor::Empty(Shape{n, 2}, DataType("int32"));
  for (int64_t i = 0; i < n; ++i) a.data_as<float>()[i] = static_cast<float>(w * 100 + i);
  for (int64_t i = 0; i < 2 * n; ++i) b.data_as<int32_t>()[i] = static_cast<int32_t>(w);
  return std::vector<Tensor>{a, b};
});
DISCO_REGISTER_GLOBAL("test.count_elements").set_body_typed([](std::vector<Tensor> ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.numel();
  return n;
});
DISCO_REGISTER_GLOBAL("test.describe_worker").set_body_typed([]() {
  std::map<std::string, Any> m;
  m["id"] = Any(ThisWorker().worker_id);
  m["name"] = Any("worker " + std::to_string(ThisWorker().worker_id));
  return Map(std::move(m));
});

TEST_F(SessionTest, RegistersHoldArraysAndMaps) {
  DRef pair = s().CallPacked(F("test.two_tensors"), 3);
  for (int w = 0; w < n(); ++w) {
    Array a = pair.DebugGetFromRemote(w).cast<Array>();
    ASSERT_EQ(a.size(), 2u);
    Tensor first = a[0].cast<Tensor>(), second = a[1].cast<Tensor>();
    EXPECT_EQ(first.shape(), Shape{3});
    EXPECT_EQ(second.shape(), (Shape{3, 2}));
    EXPECT_EQ(first.data_as<float>()[2], w * 100.0f + 2);
    EXPECT_EQ(second.data_as<int32_t>()[5], w);
  }
  DRef count = s().CallPacked(F("test.count_elements"), pair);  // an Array register as argument
  EXPECT_EQ(count.DebugGetFromRemote(n() - 1).cast<int64_t>(), 9);
  DRef named = s().CallPacked(F("test.describe_worker"));
  Map m = named.DebugGetFromRemote(n() - 1).cast<Map>();
  EXPECT_EQ(m.at("id").cast<int64_t>(), n() - 1);
  EXPECT_EQ(m.at("name").cast<std::string>(), "worker " + std::to_string(n() - 1));
  // From the controller, by value, nested, with a tensor inside (large enough to go out of line).
  Tensor big = Tensor::Empty(Shape{1 << 16}, DataType("float32"));
  for (int i = 0; i < (1 << 16); ++i) big.data_as<float>()[i] = static_cast<float>(i);
  Array sent({Any(int64_t{1}), Any(big), Any(Map({{"k", Any(Array({Any("v")}))}}))});
  DRef echo = s().CallPacked(F("test.echo"), sent);
  for (int w = 0; w < n(); ++w) {
    Array got = echo.DebugGetFromRemote(w).cast<Array>();
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[1].cast<Tensor>().data_as<float>()[65535], 65535.0f);
    EXPECT_EQ(got[2].cast<Map>().at("k").cast<Array>()[0].cast<std::string>(), "v");
  }
  DRef total = s().CallPacked(F("test.count_elements"), std::vector<Tensor>{big, big});
  EXPECT_EQ(total.DebugGetFromRemote(0).cast<int64_t>(), 2 << 16);
  // Nesting deeper than the wire takes is refused before anything is sent.
  Any deep = Any(int64_t{0});
  for (int i = 0; i < 40; ++i) deep = Any(Array({deep}));
  EXPECT_THROW(s().CallPacked(F("test.echo"), deep), ValueError);
  s().SyncAll();
}

// ThisWorkerGpu() (cuda:-1) means each worker's own GPU; a worker bound to none says so.
TEST_F(SessionTest, ThisWorkerGpuWithoutAGpuIsAClearError) {
  if (ccl::NcclUsable()) GTEST_SKIP() << "this machine has a GPU (tests/gpu covers it)";
  s().InitCCL("mpi");
  s().Empty(Shape{4}, DataType("float32"), ThisWorkerGpu());
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("means this worker's GPU, but worker"), std::string::npos) << msg;
  DRef host = s().Empty(Shape{4}, DataType("float32"));
  s().CallPacked(F("disco.copy_to"), host, ThisWorkerGpu());
  msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("disco.copy_to: cuda:-1 means this worker's GPU"), std::string::npos) << msg;
}

// A plugin whose static initializers register an existing name: the load is an error (its
// registrations ran inside dlopen, where nothing may throw), its other functions are there, and the
// program's own function of that name is unchanged.
TEST_F(SessionTest, ALibraryRegisteringAnExistingNameIsARemoteError) {
  s().CallPacked(F("disco.load_library"), DISCO_TEST_PLUGIN_DUP);
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("'test.echo' is already registered"), std::string::npos) << msg;
  DRef seven = s().CallPacked(F("test.plugin.fresh"));
  EXPECT_EQ(seven.DebugGetFromRemote(n() - 1).cast<int64_t>(), 7);
  DRef echo = s().CallPacked(F("test.echo"), "still the program's");
  EXPECT_EQ(echo.DebugGetFromRemote(n() - 1).cast<std::string>(), "still the program's");
}

TEST_F(SessionTest, HundredThousandAllocateFreeCyclesKeepTheRegisterFileBounded) {
  DRef noop = F("test.noop");
  DRef echo = F("test.echo");
  // Through a remote session each call is a network round trip: fewer cycles there.
  const int cycles = s().impl() != nullptr ? 100000 : 20000;
  int64_t before = s().impl() != nullptr ? s().impl()->register_count() : 0;
  for (int i = 0; i < cycles; ++i) {
    DRef tmp = s().CallPacked(i % 2 ? noop : echo, i);
  }
  s().SyncAll();
  int64_t after = s().impl() != nullptr ? s().impl()->register_count() : 0;
  EXPECT_LE(after - before, static_cast<int64_t>(detail::SessionImpl::kMaxPendingKills) + 4);
  DRef live = s().CallPacked(F("test.live_registers"));
  DRef cap = s().CallPacked(F("test.register_capacity"));
  for (int w = 0; w < n(); ++w) {
    EXPECT_LE(live.DebugGetFromRemote(w).cast<int64_t>(), 64) << w;
    if (s().impl() != nullptr) {
      EXPECT_LE(cap.DebugGetFromRemote(w).cast<int64_t>(), after + 2) << w;
    }
    EXPECT_LE(cap.DebugGetFromRemote(w).cast<int64_t>(), 4096) << w;
  }
}

// ---- Soak (its own CTest entry, mpi.soak.np2: DISABLED_ here keeps it out of the session runs) --

// A fresh 1 KiB tensor, filled (so its pages are really used).
DISCO_REGISTER_GLOBAL("test.soak.make").set_body_typed([](int64_t n) {
  Tensor t = Tensor::Empty(Shape{n}, DataType("float32"));
  std::fill(t.data_as<float>(), t.data_as<float>() + n, 1.0f);
  return t;
});

TEST_F(SessionTest, DISABLED_SoakAMillionCallsThatAllocateAndFreeKeepRssFlat) {
  DRef make = F("test.soak.make");
  auto calls = [&](int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      DRef t = s().CallPacked(make, 256);  // freed when `t` goes: the kill rides the next frame
    }
    s().SyncAll();
  };
  calls(100000);  // warm-up: allocator pools, register file and buffers reach their size
  DRef before = s().CallPacked(F("disco.memory_kib"));
  std::vector<int64_t> rss0;
  for (int w = 0; w < n(); ++w) rss0.push_back(before.DebugGetFromRemote(w).cast<Shape>()[0]);
  calls(900000);
  DRef after = s().CallPacked(F("disco.memory_kib"));
  DRef live = s().CallPacked(F("test.live_registers"));
  DRef cap = s().CallPacked(F("test.register_capacity"));
  for (int w = 0; w < n(); ++w) {
    int64_t rss1 = after.DebugGetFromRemote(w).cast<Shape>()[0];
    std::printf("soak: worker %d RSS %lld KiB after 100k calls, %lld KiB after 1M (%+.2f%%)\n", w,
                static_cast<long long>(rss0[w]), static_cast<long long>(rss1),
                100.0 * (rss1 - rss0[w]) / rss0[w]);
    EXPECT_LE(rss1, rss0[w] * 105 / 100) << "worker " << w << ": RSS grew more than 5%";
    EXPECT_LE(live.DebugGetFromRemote(w).cast<int64_t>(), 64) << w;
    EXPECT_LE(cap.DebugGetFromRemote(w).cast<int64_t>(), 4096) << w;
  }
}

}  // namespace
}  // namespace disco
