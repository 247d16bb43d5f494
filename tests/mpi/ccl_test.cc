// Collectives at every world size: every builtin x every dtype x in_group on and off x element
// counts 0, 1, odd and >= 1M (many shared-memory steps, or the ring path with DISCO_CCL_SHM=0),
// checked on the workers against exact formulas; and every bad-input case, raised as a RemoteError
// while the session goes on.
#include <disco/ccl.h>
#include <disco/disco.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "ccl/context.h"
#include "ccl/reduce.h"
#include "mpi/mpi_test_env.h"
#include "mpi/mpi_util.h"
#include "session/session_impl.h"

namespace disco {
namespace {

using testing::g_session;
using testing::Load;
using testing::RemoteErrorOf;
using testing::Store;

const char* kDTypes[] = {"int8",   "int16",  "int32",   "int64",    "uint8",   "uint16",
                         "uint32", "uint64", "float16", "bfloat16", "float32", "float64"};
// The largest count takes every path at every dtype: over the shared-memory channel's slot and
// split sizes (256 KiB, 64 KiB) and the ring's threshold (256 KiB) even for int8, with remainders
// that do not divide among 2..4 ranks. (Larger tensors: AllReduceOfTensorsLargerThanTheCaches.)
// The ones between are a decode step's sizes: 4096 (16 KiB of float32), and just under the
// channel's split size for 4-byte types, 16383 (over it for float64, with remainders).
const int64_t kCounts[] = {0, 1, 7, 4096, 16383, (1 << 18) + 3};

// ---- Exact values: small integers, representable in every dtype (bfloat16 included) -----------

double ValueFor(const std::string& kind, int w, int64_t i) {
  if (kind == "prod") return (i % 2 == 0) ? 1 : (w % 2 + 1);  // product <= 16
  if (kind == "minmax") return static_cast<double>((w * 7 + i * 3) % 11);
  if (kind == "sum") return static_cast<double>((w + 1) * (i % 5));  // sum <= 40
  return static_cast<double>((w * 31 + i) % 100);                    // "data"
}

// The workers taking part: the whole world, or this worker's group.
std::pair<int, int> Members(bool in_group) {
  const WorkerInfo& w = ThisWorker();
  if (!in_group) return {0, w.num_workers};
  int gs = w.num_workers / w.num_groups;
  return {w.group_id * gs, gs};
}

// Every value formula repeats with this period in i, so fills and checks encode one period once
// and then copy or compare whole periods: exact, and fast enough for 1M-element tensors.
constexpr int64_t kPeriod = 1100;  // lcm(2, 5, 11, 100)

std::vector<uint8_t> Encode(DLDataType dtype, const std::function<double(int64_t)>& value,
                            int64_t offset) {
  Tensor one = Tensor::Empty(Shape{kPeriod}, dtype);
  for (int64_t i = 0; i < kPeriod; ++i) Store(one, i, value(offset + i));
  const auto* p = static_cast<const uint8_t*>(one.data());
  return std::vector<uint8_t>(p, p + one.nbytes());
}

// A host copy of a device tensor (the tensor itself when it is on the host).
Tensor OnHost(const Tensor& t) {
  if (t.device().device_type == kDLCPU) return t;
  Tensor h = Tensor::Empty(t.shape(), t.dtype());
  h.CopyFrom(t);
  return h;
}

// Checks elements [begin, begin + count) of t against value(i - begin + offset).
void ExpectPattern(const Tensor& device_tensor, int64_t begin, int64_t count,
                   const std::function<double(int64_t)>& value, int64_t offset,
                   const std::string& what) {
  Tensor t = OnHost(device_tensor);
  std::vector<uint8_t> period = Encode(t.dtype(), value, offset);
  size_t es = DataTypeBytes(t.dtype());
  const auto* data = static_cast<const uint8_t*>(t.data()) + begin * es;
  for (int64_t i = 0; i < count; i += kPeriod) {
    int64_t m = std::min(kPeriod, count - i);
    if (std::memcmp(data + i * es, period.data(), m * es) == 0) continue;
    for (int64_t j = 0; j < m; ++j) {
      double got = Load(t, begin + i + j), want = value(offset + i + j);
      DISCO_CHECK(got == want, ValueError)
          << what << " on worker " << ThisWorker().worker_id << ": element " << begin + i + j
          << " of " << t.numel() << " (" << DataTypeToString(t.dtype()) << ") is " << got
          << ", expected " << want;
    }
  }
}

// fill(t, kind, offset): t[i] = value(kind, worker, offset + i)
DISCO_REGISTER_GLOBAL("test.ccl.fill")
    .set_body_typed([](Tensor target, std::string kind, int64_t offset) {
      Tensor t = OnHost(target);
      int w = ThisWorker().worker_id;
      std::vector<uint8_t> period = Encode(
          t.dtype(), [&](int64_t i) { return ValueFor(kind, w, i); }, offset);
      size_t es = DataTypeBytes(t.dtype());
      auto* data = static_cast<uint8_t*>(t.data());
      for (int64_t i = 0; i < t.numel(); i += kPeriod) {
        std::memcpy(data + i * es, period.data(), std::min(kPeriod, t.numel() - i) * es);
      }
      if (!t.same_as(target)) target.CopyFrom(t);
    });

DISCO_REGISTER_GLOBAL("test.ccl.expect_allreduce")
    .set_body_typed([](Tensor recv, std::string op, bool in_group) {
      auto [first, n] = Members(in_group);
      std::string kind = testing::FillKindFor(op);
      auto expected = [&, first = first, n = n](int64_t i) {
        double acc = ValueFor(kind, first, i);
        for (int w = first + 1; w < first + n; ++w) {
          double v = ValueFor(kind, w, i);
          if (op == "sum" || op == "avg") acc += v;
          if (op == "prod") acc *= v;
          if (op == "min") acc = std::min(acc, v);
          if (op == "max") acc = std::max(acc, v);
        }
        return op == "avg" ? acc / n : acc;
      };
      ExpectPattern(recv, 0, recv.numel(), expected, 0, "allreduce(" + op + ")");
    });

// recv holds n blocks of `block` elements: block b is member b's data.
DISCO_REGISTER_GLOBAL("test.ccl.expect_allgather")
    .set_body_typed([](Tensor recv, bool in_group, int64_t block) {
      auto [first, n] = Members(in_group);
      for (int b = 0; b < n; ++b) {
        int w = first + b;
        ExpectPattern(
            recv, b * block, block, [w](int64_t i) { return ValueFor("data", w, i); }, 0,
            "allgather block " + std::to_string(b));
      }
    });

// Member r holds the sum of every member's block r (send filled with "sum" values at offset 0).
DISCO_REGISTER_GLOBAL("test.ccl.expect_reduce_scatter")
    .set_body_typed([](Tensor recv, bool in_group) {
      auto [first, n] = Members(in_group);
      int r = ThisWorker().worker_id - first;
      auto expected = [first = first, n = n](int64_t i) {
        double acc = 0;
        for (int w = first; w < first + n; ++w) acc += ValueFor("sum", w, i);
        return acc;
      };
      ExpectPattern(recv, 0, recv.numel(), expected, r * recv.numel(), "reduce_scatter");
    });

// Every member holds the root's data at `offset`.
DISCO_REGISTER_GLOBAL("test.ccl.expect_root_data")
    .set_body_typed([](Tensor recv, bool in_group, int64_t offset, std::string what) {
      int first = Members(in_group).first;
      ExpectPattern(
          recv, 0, recv.numel(), [first](int64_t i) { return ValueFor("data", first, i); }, offset,
          what);
    });

// Each member r holds block r of the root's data.
DISCO_REGISTER_GLOBAL("test.ccl.expect_scatter").set_body_typed([](Tensor recv, bool in_group) {
  auto [first, n] = Members(in_group);
  int r = ThisWorker().worker_id - first;
  int root = first;
  ExpectPattern(
      recv, 0, recv.numel(), [root](int64_t i) { return ValueFor("data", root, i); },
      r * recv.numel(), "scatter");
});

// Sends to the next worker and receives from the previous one, in one disco.sendrecv (a send then
// a receive would wait on itself under NCCL, or with DISCO_CCL_SYNC_SEND=1).
DISCO_REGISTER_GLOBAL("test.ccl.ring_exchange").set_body_typed([](Tensor send, Tensor recv) {
  const WorkerInfo& w = ThisWorker();
  int n = w.num_workers;
  Registry::Get("disco.sendrecv")(send, (w.worker_id + 1) % n, recv, (w.worker_id + n - 1) % n);
  int prev = (w.worker_id + n - 1) % n;
  ExpectPattern(
      recv, 0, recv.numel(), [prev](int64_t i) { return ValueFor("data", prev, i); }, 0,
      "ring exchange");
});

DISCO_REGISTER_GLOBAL("test.ccl.expect_from_prev_group").set_body_typed([](Tensor recv) {
  const WorkerInfo& w = ThisWorker();
  int gs = w.num_workers / w.num_groups;
  int prev = w.worker_id - gs;
  bool first_group = w.group_id == 0;  // receives nothing: keeps the sentinel
  ExpectPattern(
      recv, 0, recv.numel(),
      [&](int64_t i) { return first_group ? 99.0 : ValueFor("data", prev, i); }, 0,
      "recv_from_prev_group");
});

// A tensor that claims to live on cuda:0 (its memory is host memory, never touched).
DISCO_REGISTER_GLOBAL("test.ccl.fake_cuda_tensor").set_body_typed([](int64_t n) {
  static int64_t shape[1];
  shape[0] = n;
  auto* m = new DLManagedTensor();
  m->dl_tensor.data = std::malloc(static_cast<size_t>(n) * 4 + 4);
  m->dl_tensor.device = DLDevice{kDLCUDA, 0};
  m->dl_tensor.ndim = 1;
  m->dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  m->dl_tensor.shape = shape;
  m->deleter = [](DLManagedTensor* self) {
    std::free(self->dl_tensor.data);
    delete self;
  };
  return Tensor::FromDLPack(m);
});

// n elements, one more on the last worker: a shape the workers disagree on.
DISCO_REGISTER_GLOBAL("test.ccl.uneven").set_body_typed([](int64_t n) {
  const WorkerInfo& w = ThisWorker();
  return Tensor::Empty(Shape{n + (w.worker_id == w.num_workers - 1 ? 1 : 0)}, DataType("float32"));
});

// n float32 elements, float64 on the last worker: a dtype the workers disagree on.
DISCO_REGISTER_GLOBAL("test.ccl.dtype_on_last").set_body_typed([](int64_t n) {
  const WorkerInfo& w = ThisWorker();
  return Tensor::Empty(Shape{n},
                       DataType(w.worker_id == w.num_workers - 1 ? "float64" : "float32"));
});

// How many shared-memory channels this process has mapped (lines of /proc/self/maps).
DISCO_REGISTER_GLOBAL("test.ccl.register_capacity").set_body_typed([]() {
  return static_cast<int64_t>(detail::CurrentWorker()->register_capacity());
});

DISCO_REGISTER_GLOBAL("test.ccl.shm_mappings").set_body_typed([]() {
  std::ifstream maps("/proc/self/maps");
  int64_t count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("disco-ccl") != std::string::npos) ++count;
  }
  return count;
});

class CclTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_session->InitCCL("mpi"); }
  Session& s() { return *g_session; }
  int n() { return s().num_workers(); }
  int group_size(bool in_group) { return in_group ? n() / s().num_groups() : n(); }
  DRef F(const std::string& name) { return s().GetGlobalFunc(name); }
  DRef Filled(int64_t count, const char* dtype, const std::string& kind, int64_t offset = 0) {
    DRef t = s().Empty(Shape{count}, DataType(dtype));
    s().CallPacked(F("test.ccl.fill"), t, kind, offset);
    return t;
  }
  void Check(const std::string& what) { testing::ExpectNoRemoteError(s(), what); }
};

TEST(CclBeforeInit, CollectiveBeforeInitCCLIsARemoteError) {
  Session& s = *g_session;
  DRef t = s.Empty(Shape{4}, DataType("float32"));
  s.AllReduce(t, "sum", false, t);
  std::string msg = RemoteErrorOf([&] { s.SyncAll(); });
  EXPECT_NE(msg.find("disco.allreduce: collectives need Session::InitCCL first"), std::string::npos)
      << msg;
}

TEST_F(CclTest, AllReduceEveryOpDTypeCountAndGroup) {
  for (bool in_group : {false, true}) {
    for (const char* dtype : kDTypes) {
      bool floating = std::string(dtype).find("float") != std::string::npos;
      for (int64_t count : kCounts) {
        for (std::string op : {"sum", "prod", "min", "max", "avg"}) {
          if (op == "avg" && !floating) continue;
          std::string kind = testing::FillKindFor(op);
          DRef send = Filled(count, dtype, kind);
          DRef recv = s().Empty(Shape{count}, DataType(dtype));
          s().AllReduce(send, op, in_group, recv);
          s().CallPacked(F("test.ccl.expect_allreduce"), recv, op, in_group);
          // In place too: send and recv the same tensor.
          s().AllReduce(send, op, in_group, send);
          s().CallPacked(F("test.ccl.expect_allreduce"), send, op, in_group);
        }
        Check(std::string("allreduce ") + dtype + " count " + std::to_string(count) +
              (in_group ? " in group" : ""));
      }
    }
  }
}

// 32 MiB and more: the shared-memory channel writes the result with non-temporal stores, whose
// parts start at any offset (float16 parts of odd element counts are not 16-byte aligned).
TEST_F(CclTest, AllReduceOfTensorsLargerThanTheCaches) {
  for (const char* dtype : {"float32", "float16"}) {
    int64_t count = (int64_t{32} << 20) / static_cast<int64_t>(DataTypeBytes(DataType(dtype))) + 5;
    DRef send = Filled(count, dtype, "sum");
    DRef recv = s().Empty(Shape{count}, DataType(dtype));
    s().AllReduce(send, "sum", false, recv);
    s().CallPacked(F("test.ccl.expect_allreduce"), recv, "sum", false);
    s().AllReduce(send, "sum", true, send);
    s().CallPacked(F("test.ccl.expect_allreduce"), send, "sum", true);
    Check(std::string("large allreduce ") + dtype);
  }
}

TEST_F(CclTest, AllGatherReduceScatterBroadcastScatterGather) {
  for (bool in_group : {false, true}) {
    int g = group_size(in_group);
    for (const char* dtype : kDTypes) {
      for (int64_t count : kCounts) {
        DLDataType dt = DataType(dtype);
        DRef send = Filled(count, dtype, "data");
        DRef gathered = s().Empty(Shape{count * g}, dt);
        s().AllGather(send, in_group, gathered);
        s().CallPacked(F("test.ccl.expect_allgather"), gathered, in_group, count);

        DRef rs_send = Filled(count * g, dtype, "sum");
        DRef rs_recv = s().Empty(Shape{count}, dt);
        s().ReduceScatter(rs_send, "sum", in_group, rs_recv);
        s().CallPacked(F("test.ccl.expect_reduce_scatter"), rs_recv, in_group);

        DRef bcast = s().Empty(Shape{count}, dt);
        s().Broadcast(send, in_group, bcast);
        s().CallPacked(F("test.ccl.expect_root_data"), bcast, in_group, 0, "broadcast");

        DRef big = Filled(count * g, dtype, "data");
        DRef part = s().Empty(Shape{count}, dt);
        s().Scatter(big, in_group, part);
        s().CallPacked(F("test.ccl.expect_scatter"), part, in_group);

        // Gather: only the root has a receive buffer (None elsewhere).
        DRef all = s().Empty(Shape{count * g}, dt, CPU(), /*worker0_only=*/true, in_group);
        s().Gather(send, in_group, all);
        s().CallPacked(F("test.ccl.expect_gathered_on_root"), all, in_group, count);
        Check(std::string("gather family ") + dtype + " count " + std::to_string(count) +
              (in_group ? " in group" : ""));
      }
    }
  }
}

DISCO_REGISTER_GLOBAL("test.ccl.expect_gathered_on_root")
    .set_body_typed([](std::optional<Tensor> recv, bool in_group, int64_t block) {
      if (!recv) return;  // not a root
      Registry::Get("test.ccl.expect_allgather")(*recv, in_group, block);
    });

// How many shared-memory channels this worker should have: one for the world and one for its
// group, each only when it has more than one rank, all on this node.
DISCO_REGISTER_GLOBAL("test.ccl.expected_channels").set_body_typed([]() {
  const WorkerInfo& w = ThisWorker();
  auto node_local = [](MPI_Comm comm) {
    int size = 0, node_size = 0;
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_size(comm, &size);
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    int all = node_size == size ? 1 : 0, every = 0;
    MPI_Allreduce(&all, &every, 1, MPI_INT, MPI_MIN, comm);
    return size > 1 && every != 0;
  };
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, w.group_id, w.worker_id, &group);
  int64_t want = (node_local(MPI_COMM_WORLD) ? 1 : 0) + (node_local(group) ? 1 : 0);
  MPI_Comm_free(&group);
  return want;
});

DISCO_REGISTER_GLOBAL("test.ccl.backend").set_body_typed([]() {
  return ccl::CurrentContext() != nullptr ? ccl::CurrentContext()->backend : std::string("none");
});

// The pipeline between groups, and a shift in one operation. With DISCO_CCL_SYNC_SEND=1 (ctest
// mpi.ccl.sync_send.np2) a send returns only once its receiver has the data, as NCCL's may: worker
// 0's send must then run after the controller broadcast the frame that receives, or the job hangs
// until the watchdog ends it.
TEST_F(CclTest, PipelineSendsRunAfterTheReceivingFrame) {
  const int64_t count = (1 << 20) + 5;  // 4 MiB of float32: above every eager limit
  for (int round = 0; round < 3; ++round) {
    DRef buf = Filled(count, "float32", "data");
    DRef prev = s().Empty(Shape{count}, DataType("float32"));
    s().CallPacked(F("test.ccl.fill_sentinel"), prev);
    s().SendToNextGroup(buf);
    s().RecvFromPrevGroup(prev);
    s().CallPacked(F("test.ccl.expect_from_prev_group"), prev);
    DRef shifted = s().Empty(Shape{count}, DataType("float32"));
    s().CallPacked(F("test.ccl.fill_sentinel"), shifted);
    s().ShiftToNextGroup(buf, shifted);
    s().CallPacked(F("test.ccl.expect_from_prev_group"), shifted);
    if (n() > 1) {
      DRef recv = s().Empty(Shape{count}, DataType("float32"));
      s().CallPacked(F("test.ccl.ring_exchange"), buf, recv);
    }
    Check("pipeline round " + std::to_string(round));
  }
}

// A step that only `failing` can end (it fails after a few polls; the others would poll forever,
// as ranks in an NCCL init wait for a rank that failed): every rank must leave within seconds.
// Returns the number of times this rank's abandon ran (1 expected everywhere).
DISCO_REGISTER_GLOBAL("test.ccl.polled_step").set_body_typed([](int64_t failing) {
  mpi::Comm comm = mpi::Comm::Dup(MPI_COMM_WORLD);
  const bool fails = comm.rank() == failing;
  int polls = 0, abandoned = 0;
  try {
    mpi::AgreeOnPolledStep(
        comm.get(),
        [&] {
          if (fails && ++polls > 50) DISCO_THROW(RuntimeError) << "planted init failure";
          return mpi::StepState::kPending;
        },
        [&] { ++abandoned; }, "test step");
  } catch (const Error& e) {
    std::string msg = e.what();
    bool named = fails ? msg.find("planted init failure") != std::string::npos
                       : msg.find("test step failed on rank " + std::to_string(failing)) !=
                             std::string::npos;
    DISCO_CHECK(named, InternalError) << "unexpected message: " << msg;
    return static_cast<int64_t>(abandoned);
  }
  DISCO_THROW(InternalError) << "the polled step did not fail";
});

// Every rank succeeds: nobody abandons, nothing is left to receive (the next round would see it).
DISCO_REGISTER_GLOBAL("test.ccl.polled_step_ok").set_body_typed([]() {
  mpi::Comm comm = mpi::Comm::Dup(MPI_COMM_WORLD);
  int abandoned = 0;
  for (int round = 0; round < 3; ++round) {
    int polls = 0;
    mpi::AgreeOnPolledStep(
        comm.get(), [&] { return ++polls > 3 ? mpi::StepState::kDone : mpi::StepState::kPending; },
        [&] { ++abandoned; }, "test step");
  }
  return static_cast<int64_t>(abandoned);
});

TEST_F(CclTest, AFailureInAPolledInitStepEndsItOnEveryRank) {
  for (int64_t failing : {int64_t{0}, static_cast<int64_t>(n() - 1)}) {
    DRef abandoned = s().CallPacked(F("test.ccl.polled_step"), failing);
    for (int w = 0; w < n(); ++w) {
      EXPECT_EQ(abandoned.DebugGetFromRemote(w).cast<int64_t>(), 1) << "worker " << w;
    }
  }
  DRef none = s().CallPacked(F("test.ccl.polled_step_ok"));
  for (int w = 0; w < n(); ++w) EXPECT_EQ(none.DebugGetFromRemote(w).cast<int64_t>(), 0);
  Check("polled steps");
}

DISCO_REGISTER_GLOBAL("test.ccl.first_value").set_body_typed([](Tensor t) {
  return static_cast<double>(t.data_as<float>()[0]);
});

// The controller's host arrays, as a Disco user expects: broadcast and scatter return a register,
// and CopyToWorker0 allocates its destination.
TEST_F(CclTest, HostArrayConveniences) {
  const int64_t rows = 2 * n();
  Tensor host = Tensor::Empty(Shape{rows, 3}, DataType("float32"));
  for (int64_t i = 0; i < rows * 3; ++i) host.data_as<float>()[i] = static_cast<float>(i);
  DRef on0 = s().CopyToWorker0(host);
  Tensor back = Tensor::Empty(Shape{rows, 3}, DataType("float32"));
  s().CopyFromWorker0(back, on0);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.nbytes()), 0);
  DRef first = F("test.ccl.first_value");
  for (bool in_group : {false, true}) {
    DRef everywhere = s().Broadcast(host, in_group);
    DRef b = s().CallPacked(first, everywhere);
    DRef parts = s().Scatter(host, in_group);
    DRef p = s().CallPacked(first, parts);
    const int gs = in_group ? group_size(true) : n();
    for (int w = 0; w < n(); ++w) {
      EXPECT_EQ(b.DebugGetFromRemote(w).cast<double>(), 0.0) << "worker " << w;
      const int member = w % gs;  // groups are contiguous blocks
      EXPECT_EQ(p.DebugGetFromRemote(w).cast<double>(), member * (rows / gs) * 3.0)
          << "worker " << w << (in_group ? " in group" : "");
    }
  }
  Tensor odd = Tensor::Empty(Shape{static_cast<int64_t>(n()) * 2 + 1}, DataType("float32"));
  if (n() > 1) {
    EXPECT_THROW(s().Scatter(odd), ValueError);
  }
  Check("host arrays");
}

// A collective stays deferred on worker 0 while a lookup of a function runs before it; when the
// collective's result register is a fresh one, the lookup's register comes after it. Worker 0's
// register file once refused that ("register id N is outside the register file"), the first time
// a program used a builtin right after a collective (Broadcast of a host array, then AllReduce).
TEST_F(CclTest, ALookupRightAfterADeferredCollectiveFindsItsRegister) {
  DRef t = Filled(8, "float32", "data");
  DRef cap = s().CallPacked(F("test.ccl.register_capacity"));
  const int64_t capacity = cap.DebugGetFromRemote(0).cast<int64_t>();
  std::vector<DRef> hold;  // use up the free list, so that the next ids are fresh ones
  while (hold.empty() || hold.back().reg_id() < capacity) {
    hold.push_back(s().Empty(Shape{1}, DataType("float32")));
  }
  for (int round = 0; round < 2; ++round) {
    DRef r = s().AllReduce(t, "sum", false, t);  // deferred on worker 0: DRef arguments only
    DRef f = s().GetGlobalFunc("test.ccl.first_value");
    DRef v = s().CallPacked(f, t);
    EXPECT_EQ(v.DebugGetFromRemote(n() - 1).cast<double>(), v.DebugGetFromRemote(0).cast<double>());
    (void)r;
  }
  Check("lookup after a deferred collective");
}

TEST_F(CclTest, SendRecvRejectsBadPeers) {
  DRef buf = Filled(4, "float32", "data");
  DRef sendrecv = F("disco.sendrecv");
  s().CallPacked(sendrecv, buf, static_cast<int64_t>(n()), buf, int64_t{-1});
  std::string msg = testing::RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("disco.sendrecv: peer " + std::to_string(n()) + " is out of range"),
            std::string::npos)
      << msg;
  s().CallPacked(sendrecv, buf, int64_t{-1}, buf, int64_t{-1});  // nothing to do: fine
  Check("sendrecv with no peers");
}

TEST_F(CclTest, PointToPointAndWorker0) {
  for (const char* dtype : kDTypes) {
    for (int64_t count : kCounts) {
      DLDataType dt = DataType(dtype);
      DRef buf = Filled(count, dtype, "data");
      DRef from0 = s().Empty(Shape{count}, dt);
      s().CallPacked(F("test.ccl.fill"), from0, "data", 0);
      s().RecvFromWorker0(from0);
      s().CallPacked(F("test.ccl.expect_root_data"), from0, false, 0, "recv_from_worker0");
      if (n() > 1) {
        DRef recv = s().Empty(Shape{count}, dt);
        s().CallPacked(F("test.ccl.ring_exchange"), buf, recv);
      }
      // Pipeline between groups: group g sends to g + 1 in one command, receives in the next.
      DRef prev = s().Empty(Shape{count}, dt);
      s().CallPacked(F("test.ccl.fill_sentinel"), prev);
      s().SendToNextGroup(buf);
      s().RecvFromPrevGroup(prev);
      s().CallPacked(F("test.ccl.expect_from_prev_group"), prev);
      s().Barrier(false);
      s().Barrier(true);
      Check(std::string("point to point ") + dtype + " count " + std::to_string(count));
    }
  }
}

DISCO_REGISTER_GLOBAL("test.ccl.send_to_self").set_body_typed([](Tensor t) {
  Registry::Get("disco.send_to_worker")(t, ThisWorker().worker_id);
});

DISCO_REGISTER_GLOBAL("test.ccl.fill_sentinel").set_body_typed([](Tensor target) {
  Tensor t = OnHost(target);
  for (int64_t i = 0; i < t.numel(); ++i) Store(t, i, 99);
  if (!t.same_as(target)) target.CopyFrom(t);
});

TEST_F(CclTest, BadInputIsARemoteErrorOnEveryWorkerAndNothingHangs) {
  auto expect = [&](const std::string& what, const std::string& needle) {
    std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
    EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
  };
  DRef f32 = s().Empty(Shape{8}, DataType("float32"));
  DRef f64 = s().Empty(Shape{8}, DataType("float64"));
  DRef i32 = s().Empty(Shape{8}, DataType("int32"));
  DRef f32_9 = s().Empty(Shape{9}, DataType("float32"));
  s().AllReduce(f32, "sum", false, f64);
  expect("dtype mismatch", "dtype mismatch: 'send' is float32, 'recv' is float64");
  s().AllReduce(f32, "sum", false, f32_9);
  expect("count mismatch", "'send' has 8 elements, 'recv' 9");
  s().AllReduce(i32, "avg", false, i32);
  expect("avg of int32", "op 'avg' is not defined for int32");
  s().AllReduce(f32, "mean", false, f32);
  expect("unknown op", "unknown reduction op 'mean'");
  s().AllGather(f32, false, f32);
  if (n() > 1) expect("allgather recv too small", "'recv' has 8 elements; it needs");
  if (n() > 1) {
    DRef f32_13 = s().Empty(Shape{13}, DataType("float32"));  // 13: prime, shared by no 2..4
    s().ReduceScatter(f32_13, "sum", false, f32);
    expect("not divisible", "cannot share equally");
  }
  s().SendToWorker(f32, n());
  expect("peer out of range", "peer " + std::to_string(n()) + " is out of range");
  s().CallPacked(F("test.ccl.send_to_self"), f32);
  expect("peer is self", "worker 0 cannot exchange with itself");
  // A tensor that claims to be on a GPU, given to the MPI backend.
  DRef fake = s().CallPacked(F("test.ccl.fake_cuda_tensor"), 8);
  s().AllReduce(fake, "sum", false, fake);
  expect("cuda tensor on mpi", "the mpi backend works on host tensors");
  // Workers disagree on the shape: every worker fails, none hangs.
  DRef uneven = s().CallPacked(F("test.ccl.uneven"), 5);
  s().AllReduce(uneven, "sum", false, uneven);
  if (n() > 1) expect("uneven", "disagree on the element count (from 5 to 6)");
  // Same count, another dtype on one worker: the byte counts would differ.
  DRef mixed = s().CallPacked(F("test.ccl.dtype_on_last"), 1000);
  s().AllReduce(mixed, "sum", false, mixed);
  if (n() > 1) expect("dtype across workers", "disagree on the dtype");
  // A register that holds a tensor on worker 0 only: the others fail inside the agreed checks.
  if (n() > 1) {
    DRef only0 = s().Empty(Shape{8}, DataType("float32"), CPU(), /*worker0_only=*/true);
    s().AllReduce(only0, "sum", false, only0);
    expect("tensor on worker 0 only", "argument 'send' is not a tensor on worker 1");
  }
  DRef none;
  s().Scatter(none, false, f32);
  expect("scatter without send", "the root worker needs a 'send' tensor, got None");
  // The session and the communicators still work.
  DRef ok = Filled(8, "float32", "sum");
  DRef out = s().Empty(Shape{8}, DataType("float32"));
  s().AllReduce(ok, "sum", false, out);
  s().CallPacked(F("test.ccl.expect_allreduce"), out, "sum", false);
  Check("after bad input");
}

// A tensor of n float32 elements on every worker but the last, where the call fails.
DISCO_REGISTER_GLOBAL("test.ccl.fails_on_last").set_body_typed([](int64_t n) {
  const WorkerInfo& w = ThisWorker();
  if (w.worker_id == w.num_workers - 1) throw ValueError("made to fail on the last worker");
  return Tensor::Empty(Shape{n}, DataType("float32"));
});
// Shape{n} on worker 0, Shape{other} elsewhere; DataType(dtype) on worker 0, float64 elsewhere.
DISCO_REGISTER_GLOBAL("test.ccl.shape_by_worker").set_body_typed([](int64_t n, int64_t other) {
  return Shape{ThisWorker().worker_id == 0 ? n : other};
});
DISCO_REGISTER_GLOBAL("test.ccl.dtype_by_worker").set_body_typed([]() {
  return DataType(ThisWorker().worker_id == 0 ? "float32" : "float64");
});

// A collective on a register that failed on one worker only (R3): that worker still joins the
// agreement, so the failure is a RemoteError everywhere and nothing hangs; the session goes on.
TEST_F(CclTest, ARegisterThatFailedOnOneWorkerIsAnErrorOfTheCollectiveEverywhere) {
  auto expect = [&](const std::string& what, const std::string& needle) {
    std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
    EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
  };
  DRef good = Filled(1000, "float32", "sum");
  DRef bad = s().CallPacked(F("test.ccl.fails_on_last"), 1000);
  expect("the making call", "made to fail on the last worker");
  for (bool in_group : {false, true}) {
    s().AllReduce(bad, "sum", in_group, bad);
    expect("allreduce", "made to fail on the last worker");
    s().AllReduce(good, "sum", in_group, bad);  // only the receiving tensor failed
    expect("allreduce into it", "made to fail on the last worker");
  }
  DRef gathered = s().Empty(Shape{1000 * n()}, DataType("float32"));
  s().AllGather(bad, false, gathered);
  expect("allgather", "made to fail on the last worker");
  s().Broadcast(good, false, bad);
  expect("broadcast", "made to fail on the last worker");
  s().Gather(bad, false, gathered);
  expect("gather", "made to fail on the last worker");
  // Agreed once on `good`: the failed receiver still takes a round, never the cached skip.
  DRef out = s().Empty(Shape{1000}, DataType("float32"));
  s().AllReduce(good, "sum", false, out);
  s().AllReduce(good, "sum", false, bad);
  expect("after an agreed call", "made to fail on the last worker");
  s().AllReduce(good, "sum", false, out);
  s().CallPacked(F("test.ccl.expect_allreduce"), out, "sum", false);
  Check("the session after the failures");
}

// disco.empty whose shape or dtype come from a register (which may differ between workers) makes
// tensors that are agreed on like any other (R4): a mismatch is an error, never a half reduction.
TEST_F(CclTest, EmptyOfRegisterArgumentsIsAgreedOn) {
  if (n() < 2) GTEST_SKIP() << "needs workers that differ";
  DRef empty = s().GetGlobalFunc("disco.empty");
  DRef shape = s().CallPacked(F("test.ccl.shape_by_worker"), 4, 8);
  DRef x = s().CallPacked(empty, shape, DataType("float32"), CPU(), false, false);
  s().CallPacked(F("test.ccl.fill"), x, "sum", 0);
  s().AllReduce(x, "sum", false, x);
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("disagree on the element count (from 4 to 8)"), std::string::npos) << msg;
  DRef dtype = s().CallPacked(F("test.ccl.dtype_by_worker"));
  DRef y = s().CallPacked(empty, Shape{16}, dtype, CPU(), false, false);
  s().AllReduce(y, "sum", false, y);
  msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("disagree on the dtype"), std::string::npos) << msg;
  // The same shape by value skips the round and is right.
  DRef z = s().CallPacked(empty, Shape{8}, DataType("float32"), CPU(), false, false);
  s().CallPacked(F("test.ccl.fill"), z, "sum", 0);
  s().AllReduce(z, "sum", false, z);
  s().CallPacked(F("test.ccl.expect_allreduce"), z, "sum", false);
  Check("empty by value");
}

DISCO_REGISTER_GLOBAL("test.ccl.empty_on_last").set_body_typed([](int64_t n, int64_t last_n) {
  const WorkerInfo& w = ThisWorker();
  return Tensor::Empty(Shape{w.worker_id == w.num_workers - 1 ? last_n : n}, DataType("float32"));
});

TEST_F(CclTest, RepeatedCollectivesOnTheSameRegistersStayCorrect) {
  // The second and later rounds reuse the agreement of the first (same registers, versions).
  DRef send = s().Empty(Shape{1000}, DataType("float32"));
  DRef recv = s().Empty(Shape{1000}, DataType("float32"));
  for (int round = 0; round < 3; ++round) {
    for (std::string op : {"sum", "prod", "min", "max", "avg"}) {
      std::string kind = testing::FillKindFor(op);
      s().CallPacked(F("test.ccl.fill"), send, kind, 0);
      for (bool in_group : {false, true}) {
        s().AllReduce(send, op, in_group, recv);
        s().CallPacked(F("test.ccl.expect_allreduce"), recv, op, in_group);
      }
    }
    Check("round " + std::to_string(round));
  }
  // A register rewritten on one worker only (a new version everywhere) is agreed on again:
  // the mismatch is an error on every worker, not a hang.
  if (n() > 1) {
    DRef odd = s().CallPacked(F("test.ccl.empty_on_last"), 1000, 999);
    // A debug write copies into a register's tensor of the same shape; a register holding
    // something else takes the new tensor whole.
    recv.DebugCopyFrom(n() - 1, Any(int64_t{0}));
    recv.DebugCopyFrom(n() - 1, Any(odd));
    s().AllReduce(send, "sum", false, recv);
    std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
    EXPECT_NE(msg.find("'send' has 1000 elements, 'recv' 999"), std::string::npos) << msg;
  }
}

// Integer sums wrap around on every path (MPI, NCCL and disco's kernels do; Open MPI 4.1's
// vectorized MPI_SUM saturates 8- and 16-bit integers from a few dozen elements on).
DISCO_REGISTER_GLOBAL("test.ccl.fill_constant").set_body_typed([](Tensor t, double v) {
  for (int64_t i = 0; i < t.numel(); ++i) Store(t, i, v);
});
DISCO_REGISTER_GLOBAL("test.ccl.expect_wrapped_sum")
    .set_body_typed([](Tensor t, int64_t each, int64_t modulus, bool is_signed) {
      int64_t n = ThisWorker().num_workers;
      int64_t want = (each * n) % modulus;
      if (is_signed && want >= modulus / 2) want -= modulus;
      for (int64_t i = 0; i < t.numel(); ++i) {
        DISCO_CHECK(Load(t, i) == static_cast<double>(want), ValueError)
            << DataTypeToString(t.dtype()) << " sum of " << n << " x " << each << ": element " << i
            << " is " << Load(t, i) << ", expected " << want << " (wrapped around)";
      }
    });

TEST_F(CclTest, IntegerSumsWrapAroundOnEveryPath) {
  struct Case {
    const char* dtype;
    int64_t each, modulus;
    bool is_signed;
  };
  for (const Case& c : {Case{"int8", 100, 256, true}, Case{"uint8", 200, 256, false},
                        Case{"int16", 20000, 65536, true}, Case{"uint16", 50000, 65536, false}}) {
    for (int64_t count : {int64_t{7}, int64_t{4096}, int64_t{(1 << 18) + 3}}) {
      DRef t = s().Empty(Shape{count}, DataType(c.dtype));
      s().CallPacked(F("test.ccl.fill_constant"), t, static_cast<double>(c.each));
      s().AllReduce(t, "sum", false, t);
      s().CallPacked(F("test.ccl.expect_wrapped_sum"), t, c.each, c.modulus, c.is_signed);
      Check(std::string(c.dtype) + " x " + std::to_string(count));
    }
  }
}

DISCO_REGISTER_GLOBAL("test.ccl.agreement_rounds").set_body_typed([]() {
  return static_cast<int64_t>(ccl::CurrentContext()->agreement_rounds);
});

TEST_F(CclTest, TensorsTheControllerMadeNeedNoAgreementRound) {
  auto rounds = [&] {
    return s()
        .CallPacked(F("test.ccl.agreement_rounds"))
        .DebugGetFromRemote(n() - 1)
        .cast<int64_t>();
  };
  const int64_t start = rounds();
  // New tensors every call, from Session::Empty: their metadata is the command's, on every worker.
  for (int i = 0; i < 4; ++i) {
    DRef send = s().Empty(Shape{1000}, DataType("float32"));
    DRef recv = s().Empty(Shape{1000}, DataType("float32"));
    s().CallPacked(F("test.ccl.fill"), send, "sum", 0);
    s().AllReduce(send, "sum", i % 2 == 1, recv);
    s().CallPacked(F("test.ccl.expect_allreduce"), recv, "sum", i % 2 == 1);
    DRef gathered = s().Empty(Shape{1000 * n()}, DataType("float32"));
    s().AllGather(send, false, gathered);
  }
  Check("allreduce and allgather of new tensors");
  EXPECT_EQ(rounds() - start, 0);
  // A tensor a function made (its shape may differ between workers) is agreed on, once.
  DRef made = s().CallPacked(F("test.ccl.empty_on_last"), 1000, 1000);
  DRef out = s().Empty(Shape{1000}, DataType("float32"));
  s().CallPacked(F("test.ccl.fill"), made, "sum", 0);
  for (int i = 0; i < 3; ++i) s().AllReduce(made, "sum", false, out);
  s().CallPacked(F("test.ccl.expect_allreduce"), out, "sum", false);
  Check("allreduce of a function's tensor");
  EXPECT_EQ(rounds() - start, 1);
  // Rooted collectives check the root's tensor on the root only: always agreed.
  DRef from = s().Empty(Shape{1000}, DataType("float32"));
  s().Broadcast(from, false, out);
  Check("broadcast");
  EXPECT_EQ(rounds() - start, 2);
  // A debug write on one worker makes the register's metadata that worker's: agreed again, and
  // a mismatch is an error everywhere, not a hang.
  if (n() > 1) {
    DRef send = s().Empty(Shape{1000}, DataType("float32"));
    DRef recv = s().Empty(Shape{1000}, DataType("float32"));
    s().AllReduce(send, "sum", false, recv);
    recv.DebugCopyFrom(n() - 1, Any(int64_t{0}));
    recv.DebugCopyFrom(n() - 1, Any(s().CallPacked(F("test.ccl.empty_on_last"), 999, 999)));
    s().AllReduce(send, "sum", false, recv);
    std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
    EXPECT_NE(msg.find("'send' has 1000 elements, 'recv' 999"), std::string::npos) << msg;
    EXPECT_EQ(rounds() - start, 3);
  }
  // Bad metadata on tensors alike everywhere fails alike everywhere, without a round.
  DRef f32 = s().Empty(Shape{8}, DataType("float32"));
  DRef f32_9 = s().Empty(Shape{9}, DataType("float32"));
  const int64_t before = rounds();
  s().AllReduce(f32, "sum", false, f32_9);
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("'send' has 8 elements, 'recv' 9"), std::string::npos) << msg;
  EXPECT_EQ(rounds(), before);
}

// A function that allreduces tensors it made itself: through disco::AllReduceInFunction (no
// agreement round), or through the builtin disco.allreduce (one round per call: the tensors have
// no register to name them by). Sums of float32 and maxima of int64, in place and not, in the world
// and in groups; the result checked on every worker against the formula.
DISCO_REGISTER_GLOBAL("test.ccl.allreduce_in_function")
    .set_body_typed([](int64_t n, std::string dtype, std::string op, bool in_group, bool in_place,
                       bool builtin) {
      Tensor send = Tensor::Empty(Shape{n}, DataType(dtype));
      Tensor recv = in_place ? send : Tensor::Empty(Shape{n}, DataType(dtype));
      const int w = ThisWorker().worker_id;
      for (int64_t i = 0; i < n; ++i) Store(send, i, ValueFor(testing::FillKindFor(op), w, i));
      if (builtin) {
        Registry::Get("disco.allreduce")(send, op, in_group, recv);
      } else {
        AllReduceInFunction(send, recv, ParseReduceOp(op), in_group);
      }
      auto [first, members] = Members(in_group);
      for (int64_t i = 0; i < n; ++i) {
        double want = ValueFor(testing::FillKindFor(op), first, i);
        for (int m = first + 1; m < first + members; ++m) {
          const double v = ValueFor(testing::FillKindFor(op), m, i);
          want = op == "sum" ? want + v : std::max(want, v);
        }
        DISCO_CHECK(Load(recv, i) == want, ValueError)
            << "AllReduceInFunction(" << op << ", " << dtype << ") element " << i << ": "
            << Load(recv, i) << ", expected " << want;
      }
    })
    .mark_collective();
// Bad metadata, alike on every worker: 8 elements into 9, or avg of integers.
DISCO_REGISTER_GLOBAL("test.ccl.allreduce_in_function_bad").set_body_typed([](int64_t which) {
  if (which == 0) {
    AllReduceInFunction(Tensor::Empty(Shape{8}, DataType("float32")),
                        Tensor::Empty(Shape{9}, DataType("float32")), ReduceOp::kSum);
  } else {
    AllReduceInFunction(Tensor::Empty(Shape{8}, DataType("int32")), ReduceOp::kAvg);
  }
});

TEST_F(CclTest, AllReduceInFunctionNeedsNoAgreementRound) {
  auto rounds = [&] {
    return s()
        .CallPacked(F("test.ccl.agreement_rounds"))
        .DebugGetFromRemote(n() - 1)
        .cast<int64_t>();
  };
  DRef f = F("test.ccl.allreduce_in_function");
  const int64_t start = rounds();
  for (int64_t count : kCounts) {
    for (bool in_group : {false, true}) {
      for (bool in_place : {false, true}) {
        s().CallPacked(f, count, "float32", "sum", in_group, in_place, false);
        s().CallPacked(f, count, "int64", "max", in_group, in_place, false);
      }
    }
  }
  Check("AllReduceInFunction");
  EXPECT_EQ(rounds() - start, 0);
  // The builtin called from a function pays a round per call.
  for (int i = 0; i < 3; ++i) s().CallPacked(f, 1000, "float32", "sum", false, true, true);
  Check("disco.allreduce called from a function");
  EXPECT_EQ(rounds() - start, 3);
  // Its own checks fail on every worker alike, before anything moves; the session goes on.
  s().CallPacked(F("test.ccl.allreduce_in_function_bad"), 0);
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("disco::AllReduceInFunction: 'send' has 8 elements, 'recv' 9"),
            std::string::npos)
      << msg;
  s().CallPacked(F("test.ccl.allreduce_in_function_bad"), 1);
  msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("op 'avg' is not defined for int32"), std::string::npos) << msg;
  s().CallPacked(f, 7, "float32", "sum", false, false, false);
  Check("AllReduceInFunction after errors");
  EXPECT_EQ(rounds() - start, 3);
}

// Many allreduces back to back in one function, each of other values and size: ones that take
// the shared-memory channel's single exchange (1 to 4097 floats) between ones that take its split
// steps (20000 floats), in place and not: a rank that wrote a slot while a peer still read it, or
// read one before its peer wrote it, gives some element a wrong value. Rounds first..last-1.
DISCO_REGISTER_GLOBAL("test.ccl.in_function_rounds")
    .set_body_typed([](int64_t first, int64_t last) {
      const int64_t sizes[] = {1, 13, 14, 15, 4096, 1000, 4097, 14, 20000};
      const int me = ThisWorker().worker_id, n = ThisWorker().num_workers;
      std::vector<Tensor> a, b;
      for (int64_t count : sizes) {
        a.push_back(Tensor::Empty(Shape{count}, DataType("float32")));
        b.push_back(Tensor::Empty(Shape{count}, DataType("float32")));
      }
      auto value = [](int r, int64_t i, int64_t j) {
        return static_cast<float>((r + 1) * ((i * 31 + j) % 97));
      };
      for (int64_t i = first; i < last; ++i) {
        const int64_t count = sizes[i % 9];
        Tensor send = a[i % 9], recv = i % 2 == 0 ? send : b[i % 9];
        auto* in = static_cast<float*>(send.data());
        for (int64_t j = 0; j < count; ++j) in[j] = value(me, i, j);
        AllReduceInFunction(send, recv, ReduceOp::kSum);
        const auto* out = static_cast<const float*>(recv.data());
        for (int64_t j = 0; j < count; ++j) {
          float want = 0;
          for (int r = 0; r < n; ++r) want += value(r, i, j);
          DISCO_CHECK(out[j] == want, ValueError)
              << "round " << i << " (" << count << " floats" << (i % 2 == 0 ? ", in place" : "")
              << ") element " << j << ": " << out[j] << ", expected " << want;
        }
      }
    })
    .mark_collective();

TEST_F(CclTest, BackToBackAllReducesOfChangingSizesStayCorrect) {
  // In calls of 250 rounds: with more ranks than free cores (a loaded CI machine, the virtual
  // nodes) a round can take milliseconds, and one call of 3000 met the watchdog's 20 s.
  for (int64_t first = 0; first < 3000; first += 250) {
    s().CallPacked(F("test.ccl.in_function_rounds"), first, first + 250);
  }
  Check("3000 allreduces in calls of 250");
}

TEST_F(CclTest, ParkingRightAfterACollectiveRunsItFirstAndWakingResumes) {
  if (s().impl() == nullptr) GTEST_SKIP() << "parking is done by the serving side";
  DRef send = s().Empty(Shape{4096}, DataType("float32"));
  DRef recv = s().Empty(Shape{4096}, DataType("float32"));
  s().CallPacked(F("test.ccl.fill"), send, "sum", 0);
  for (int round = 0; round < 3; ++round) {
    s().AllReduce(send, "sum", false, recv);  // worker 0's part is deferred ...
    s().impl()->ParkWorkers();                // ... and must run before the workers sleep
    EXPECT_EQ(s().impl()->workers_parked(), n() > 1);
    s().CallPacked(F("test.ccl.expect_allreduce"), recv, "sum", false);  // wakes them
    s().impl()->ParkWorkers();
    s().Barrier(true);
  }
  Check("allreduce around parking");
}

TEST_F(CclTest, InitCCLTwiceReplacesTheCommunicators) {
  for (int i = 0; i < 3; ++i) s().InitCCL("auto");
  // Auto is mpi without GPUs; with a GPU per rank it is nccl, with MPI beside it for host tensors.
  DRef dev = s().CallPacked(F("disco.device"));
  DLDevice last = dev.DebugGetFromRemote(n() - 1).cast<DLDevice>();
  if (!ccl::NcclUsable()) {
    EXPECT_EQ(last, CPU());
  }
  DRef backend = s().CallPacked(F("test.ccl.backend"));
  EXPECT_EQ(backend.DebugGetFromRemote(n() - 1).cast<std::string>(),
            last.device_type == kDLCUDA ? "nccl" : "mpi");
  EXPECT_THROW(s().InitCCL("gloo"), ValueError);
  // Each InitCCL freed the shared memory of the one before: one channel for the world and one for
  // the group (none for a single worker), and no name left in /dev/shm.
  const char* shm = std::getenv("DISCO_CCL_SHM");
  bool channels = shm == nullptr || std::string(shm) != "0";
  if (s().impl() != nullptr && channels) {
    // A channel for each communicator of more than one rank whose ranks all share a node (none
    // across nodes).
    DRef maps = s().CallPacked(F("test.ccl.shm_mappings"));
    DRef want = s().CallPacked(F("test.ccl.expected_channels"));
    for (int w = 0; w < n(); ++w) {
      EXPECT_EQ(maps.DebugGetFromRemote(w).cast<int64_t>(),
                want.DebugGetFromRemote(w).cast<int64_t>())
          << "worker " << w;
    }
    std::string prefix = "disco-ccl-" + std::to_string(getpid()) + "-";
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      EXPECT_NE(entry.path().filename().string().rfind(prefix, 0), 0u) << entry.path();
    }
  }
  DRef ok = Filled(3, "int32", "sum");
  s().AllReduce(ok, "sum", true, ok);
  s().CallPacked(F("test.ccl.expect_allreduce"), ok, "sum", true);
  Check("after re-init");
  s().InitCCL("mpi");  // the suite's backend for the tests after this one, GPUs or not
}

}  // namespace
}  // namespace disco
