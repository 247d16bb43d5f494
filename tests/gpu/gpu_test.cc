// The collective checks of tests/mpi/ccl_test.cc on CUDA tensors through NCCL, the point-to-point
// builtins, "auto" with host and device tensors side by side, and the stream-order cases (copies
// and kernels on stream 0 right before a collective). Every test skips, with the reason, when
// this build has no NCCL, or when the ranks do not each have a GPU of their own (NCCL does not
// support two ranks on one GPU): on a one-GPU machine the np=2 run skips, it does not fail.
#include <disco/disco.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "ccl/context.h"
#include "ccl/nccl/peers.h"
#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "mpi/mpi_test_env.h"
#if DISCO_HAVE_NCCL
#include "ccl/nccl/communicator.h"
#endif
#if DISCO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace disco {
namespace {

using testing::g_session;

// A tensor on this worker's bound GPU (each rank has its own).
DISCO_REGISTER_GLOBAL("test.gpu.empty").set_body_typed([](Shape shape, DLDataType dtype) {
  return Tensor::Empty(shape, dtype, ThisWorker().device);
});

// Whether every rank gets a GPU of its own (collective: every worker runs it in one command).
DISCO_REGISTER_GLOBAL("test.gpu.own_gpu").set_body_typed([]() {
#if DISCO_HAVE_NCCL
  int usable = ccl::NcclUsable() ? 1 : 0, all = 0;
  MPI_Allreduce(&usable, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0 && ccl::EveryRankHasItsOwnGpu(MPI_COMM_WORLD, ThisWorker().local_rank,
                                                std::vector<int64_t>());
#else
  return false;
#endif
});

// A device-to-device copy of `src` into a new tensor on the same GPU, then the tensor.
DISCO_REGISTER_GLOBAL("test.gpu.copy_on_device").set_body_typed([](Tensor src) {
  Tensor d = Tensor::Empty(src.shape(), src.dtype(), src.device());
  d.CopyFrom(src);
  return d;
});

DISCO_REGISTER_GLOBAL("test.gpu.device_of").set_body_typed([](Tensor t) { return t.device(); });

// The peers for which the world communicator's PreConnected differs from ccl/nccl/peers.h.
DISCO_REGISTER_GLOBAL("test.gpu.connected_mismatches").set_body_typed([]() {
  const WorkerInfo& w = ThisWorker();
  const ccl::Context* ctx = ccl::CurrentContext();
  int64_t mismatches = 0;
  for (int peer = 0; peer < w.num_workers; ++peer) {
    const bool expected = ccl::PreConnectedPair(w.worker_id, peer, w.num_workers, ctx->group_size);
    if (ctx->world->PreConnected(peer) != expected) ++mismatches;
  }
  return mismatches;
});

// Worker `a` sends `buffer` to `b` alone, `b` receives it alone (disco.send_to_worker and
// disco.recv_from_worker); each returns what its builtin threw ("" elsewhere).
DISCO_REGISTER_GLOBAL("test.gpu.lone_p2p")
    .set_body_typed([](Tensor buffer, int64_t a, int64_t b) -> std::string {
      const int me = ThisWorker().worker_id;
      if (me != a && me != b) return "";
      try {
        if (me == a) {
          Registry::Get("disco.send_to_worker")(buffer, b);
        } else {
          Registry::Get("disco.recv_from_worker")(buffer, a);
        }
      } catch (const Error& e) {
        return e.what();
      }
      return "no error";
    });

// Worker `a` sends `send` to `b` by disco.sendrecv; the other workers call it with no peer.
DISCO_REGISTER_GLOBAL("test.gpu.pair_sendrecv")
    .set_body_typed([](Tensor send, Tensor recv, int64_t a, int64_t b) {
      const int me = ThisWorker().worker_id;
      Registry::Get("disco.sendrecv")(me == a ? Any(send) : Any(), me == a ? b : int64_t{-1},
                                      me == b ? Any(recv) : Any(), me == b ? a : int64_t{-1});
    });

// The bytes this worker's GPU pool holds without using them, after a synchronization of stream 0
// (where CUDA gives back what exceeds the pool's release threshold); -1 without CUDA.
DISCO_REGISTER_GLOBAL("test.gpu.pool_unused_after_sync").set_body_typed([]() -> int64_t {
#if DISCO_HAVE_CUDA
  const int device = ThisWorker().device.device_id;
  CudaDeviceGuard guard(device);
  cudaMemPool_t pool;
  DISCO_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, device));
  DISCO_CUDA_CALL(cudaStreamSynchronize(cudaStreamLegacy));
  uint64_t reserved = 0, used = 0;
  DISCO_CUDA_CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  DISCO_CUDA_CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return static_cast<int64_t>(reserved - used);
#else
  return -1;
#endif
});

// Runs one disco call (`what`: alloc, copy, allreduce, empty_cache) inside a CUDA graph capture on
// a blocking stream of this worker's GPU, after a memset the capture records. Returns what disco
// threw ("no error" when nothing), then how ending the capture went: "cudaSuccess, 1 node(s)"
// when disco left the capture intact.
DISCO_REGISTER_GLOBAL("test.gpu.inside_capture").set_body_typed([](std::string what) {
#if DISCO_HAVE_CUDA
  const DLDevice device = ThisWorker().device;
  CudaDeviceGuard guard(device.device_id);
  Tensor t = Tensor::Empty(Shape{256}, DataType("float32"), device);
  Tensor host = Tensor::Empty(Shape{256}, DataType("float32"));
  std::memset(host.data(), 0, host.nbytes());
  cudaStream_t stream = nullptr;
  DISCO_CUDA_CALL(cudaStreamCreate(&stream));  // blocking: it synchronizes with stream 0
  DISCO_CUDA_CALL(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaError_t memset = cudaMemsetAsync(t.data(), 0, t.nbytes(), stream);
  std::string error = "no error";
  try {
    if (what == "alloc") {
      Tensor::Empty(Shape{256}, DataType("float32"), device);
    } else if (what == "copy") {
      t.CopyFrom(host);
    } else if (what == "allreduce") {
      AllReduceInFunction(t, ReduceOp::kSum);
    } else if (what == "empty_cache") {
      memory::EmptyCache();
    } else {
      error = "unknown case " + what;
    }
  } catch (const Error& e) {
    error = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  size_t nodes = 0;
  if (end == cudaSuccess && graph != nullptr) cudaGraphGetNodes(graph, nullptr, &nodes);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaGetLastError();
  return error + " | memset: " + cudaGetErrorName(memset) +
         " | end capture: " + cudaGetErrorName(end) + ", " + std::to_string(nodes) + " node(s)";
#else
  return std::string("built without CUDA");
#endif
});

class GpuCclTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if !DISCO_HAVE_NCCL
    GTEST_SKIP() << "this build has no NCCL (CUDA toolkit or NCCL not found at configure time)";
#endif
    int gpus = memory::CudaDeviceCount();
    // Every rank asks (the verdict is collective), also when rank 0 sees no GPU.
    DRef own = s().CallPacked(s().GetGlobalFunc("test.gpu.own_gpu"));
    if (!own.DebugGetFromRemote(0).cast<bool>()) {
      GTEST_SKIP() << "the " << n() << " rank(s) do not each have a GPU of their own (rank 0 "
                   << "sees " << gpus << "); NCCL needs one GPU per rank";
    }
    s().InitCCL("nccl");
  }
  void TearDown() override {
    if (ccl::CurrentContext() != nullptr) s().InitCCL("mpi");  // leave the MPI suites as they were
  }
  Session& s() { return *g_session; }
  int n() { return s().num_workers(); }
  DRef F(const std::string& name) { return s().GetGlobalFunc(name); }
  DRef Gpu(int64_t count, const char* dtype) {
    return s().CallPacked(F("test.gpu.empty"), Shape{count}, DataType(dtype));
  }
  void Check(const std::string& what) { testing::ExpectNoRemoteError(s(), what); }
};

const char* kNcclDTypes[] = {"int8",   "int32",   "int64",    "uint8",   "uint32",
                             "uint64", "float16", "bfloat16", "float32", "float64"};
const int64_t kCounts[] = {0, 1, 7, (1 << 20) + 3};

TEST_F(GpuCclTest, EveryCollectiveOnCudaTensors) {
  for (bool in_group : {false, true}) {
    int g = in_group ? n() / s().num_groups() : n();
    for (const char* dtype : kNcclDTypes) {
      bool floating = std::string(dtype).find("float") != std::string::npos;
      for (int64_t count : kCounts) {
        for (std::string op : {"sum", "prod", "min", "max", "avg"}) {
          if (op == "avg" && !floating) continue;
          std::string kind = testing::FillKindFor(op);
          DRef send = Gpu(count, dtype), recv = Gpu(count, dtype);
          s().CallPacked(F("test.ccl.fill"), send, kind, 0);
          s().AllReduce(send, op, in_group, recv);
          s().CallPacked(F("test.ccl.expect_allreduce"), recv, op, in_group);
        }
        DRef send = Gpu(count, dtype), gathered = Gpu(count * g, dtype);
        s().CallPacked(F("test.ccl.fill"), send, "data", 0);
        s().AllGather(send, in_group, gathered);
        s().CallPacked(F("test.ccl.expect_allgather"), gathered, in_group, count);
        DRef rs_send = Gpu(count * g, dtype), rs_recv = Gpu(count, dtype);
        s().CallPacked(F("test.ccl.fill"), rs_send, "sum", 0);
        s().ReduceScatter(rs_send, "sum", in_group, rs_recv);
        s().CallPacked(F("test.ccl.expect_reduce_scatter"), rs_recv, in_group);
        DRef bcast = Gpu(count, dtype);
        s().Broadcast(send, in_group, bcast);
        s().CallPacked(F("test.ccl.expect_root_data"), bcast, in_group, 0, "broadcast");
        DRef part = Gpu(count, dtype);
        s().CallPacked(F("test.ccl.fill"), gathered, "data", 0);
        s().Scatter(gathered, in_group, part);
        s().CallPacked(F("test.ccl.expect_scatter"), part, in_group);
        DRef collected = s().Empty(Shape{count * g}, DataType(dtype), ThisWorkerGpu(),
                                   /*worker0_only=*/true, in_group);
        s().Gather(send, in_group, collected);
        s().CallPacked(F("test.ccl.expect_gathered_on_root"), collected, in_group, count);
        Check(std::string("nccl ") + dtype + " count " + std::to_string(count) +
              (in_group ? " in group" : ""));
      }
    }
  }
}

// Stream order: a pageable host-to-device copy, then a device-to-device copy, each followed at
// once by a collective that reads its result (NCCL's stream must wait for stream 0), many times.
TEST_F(GpuCclTest, CopiesLandBeforeTheCollectiveReadsThem) {
  const int64_t count = (1 << 22) + 1;  // 16 MiB of float32
  for (int round = 0; round < 8; ++round) {
    // Alternating contents: a collective that read the previous round's bytes (the memory pool
    // hands the same memory back) would not match.
    std::string op = round % 2 == 0 ? "sum" : "max";
    DRef src = Gpu(count, "float32");
    s().CallPacked(F("test.ccl.fill"), src, testing::FillKindFor(op), 0);
    DRef copy = s().CallPacked(F("test.gpu.copy_on_device"), src);
    DRef out = Gpu(count, "float32");
    s().AllReduce(copy, op, false, out);
    s().CallPacked(F("test.ccl.expect_allreduce"), out, op, false);
  }
  Check("copies before collectives");
}

TEST_F(GpuCclTest, PointToPointOnCudaTensors) {
  const int64_t count = (1 << 20) + 3;
  DRef buf = Gpu(count, "float32");
  s().CallPacked(F("test.ccl.fill"), buf, "data", 0);
  if (n() > 1) {
    DRef recv = Gpu(count, "float32");
    s().CallPacked(F("test.ccl.ring_exchange"), buf, recv);
  }
  for (int round = 0; round < 3; ++round) {
    DRef prev = Gpu(count, "float32");
    s().CallPacked(F("test.ccl.fill_sentinel"), prev);
    s().SendToNextGroup(buf);
    s().RecvFromPrevGroup(prev);
    s().CallPacked(F("test.ccl.expect_from_prev_group"), prev);
    DRef shifted = Gpu(count, "float32");
    s().CallPacked(F("test.ccl.fill_sentinel"), shifted);
    s().ShiftToNextGroup(buf, shifted);
    s().CallPacked(F("test.ccl.expect_from_prev_group"), shifted);
  }
  DRef from0 = Gpu(count, "float32");
  s().CallPacked(F("test.ccl.fill"), from0, "data", 0);
  s().RecvFromWorker0(from0);
  s().CallPacked(F("test.ccl.expect_root_data"), from0, false, 0, "recv_from_worker0");
  s().Barrier(false);
  Check("nccl point to point");
}

// Under NCCL a lone send or receive works only between peers connected at InitCCL (every pair up
// to 8 workers; beyond, ring neighbours and adjacent groups): both peers of any other pair refuse
// it, and neither waits for the other; disco.sendrecv moves data between them. With 8 workers or
// fewer every pair is connected, which the first part checks.
TEST_F(GpuCclTest, LoneSendOnlyBetweenPeersConnectedAtInit) {
  DRef mismatches = s().CallPacked(F("test.gpu.connected_mismatches"));
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(mismatches.DebugGetFromRemote(w).cast<int64_t>(), 0) << "worker " << w;
  }
  const int group_size = n() / s().num_groups();
  int a = -1, b = -1;
  for (int i = 1; i < n() && a < 0; ++i) {  // a pair without worker 0: nothing is deferred
    for (int j = i + 1; j < n() && a < 0; ++j) {
      if (!ccl::PreConnectedPair(i, j, n(), group_size)) {
        a = i;
        b = j;
      }
    }
  }
  if (a < 0) {
    EXPECT_LE(n(), ccl::kConnectAllMax) << "no unconnected pair among " << n() << " workers";
    Check("connected peers");
    return;
  }
  DRef buf = Gpu(1001, "float32"), recv = Gpu(1001, "float32");
  s().CallPacked(F("test.ccl.fill"), buf, "data", 0);
  DRef refused = s().CallPacked(F("test.gpu.lone_p2p"), buf, a, b);
  for (int w : {a, b}) {
    std::string msg = refused.DebugGetFromRemote(w).cast<std::string>();
    EXPECT_NE(msg.find("are not connected point to point"), std::string::npos)
        << "worker " << w << ": " << msg;
    EXPECT_NE(msg.find("disco.sendrecv"), std::string::npos) << "worker " << w << ": " << msg;
  }
  s().CallPacked(F("test.gpu.pair_sendrecv"), buf, recv, a, b);
  Tensor sent = buf.DebugGetFromRemote(a).cast<Tensor>();
  Tensor got = recv.DebugGetFromRemote(b).cast<Tensor>();
  ASSERT_EQ(sent.nbytes(), got.nbytes());
  EXPECT_EQ(std::memcmp(sent.data(), got.data(), sent.nbytes()), 0)
      << "disco.sendrecv from worker " << a << " to " << b;
  Check("lone send refused between unconnected peers");
}

// The pool keeps at most memory::kCudaPoolKeepBytes of freed memory across a synchronization, and
// disco.empty_cache gives back all it keeps.
TEST_F(GpuCclTest, MemoryPoolGivesFreedMemoryBack) {
  const int64_t big = int64_t{1} << 30;
  {
    DRef t = Gpu(big / 4, "float32");
    s().SyncAll();
  }
  DRef unused = s().CallPacked(F("test.gpu.pool_unused_after_sync"));
  for (int w = 0; w < n(); ++w) {
    EXPECT_LE(unused.DebugGetFromRemote(w).cast<int64_t>(),
              static_cast<int64_t>(memory::kCudaPoolKeepBytes))
        << "worker " << w << ": the pool kept more than its release threshold after freeing 1 GiB";
  }
  const int64_t small = int64_t{64} << 20;  // below the threshold: kept until empty_cache
  {
    DRef t = Gpu(small / 4, "float32");
    s().SyncAll();
  }
  DRef released = s().CallPacked(F("disco.empty_cache"));
  DRef left = s().CallPacked(F("test.gpu.pool_unused_after_sync"));
  for (int w = 0; w < n(); ++w) {
    EXPECT_GE(released.DebugGetFromRemote(w).cast<int64_t>(), small) << "worker " << w;
    EXPECT_LT(left.DebugGetFromRemote(w).cast<int64_t>(), small) << "worker " << w;
  }
  Check("empty_cache");
}

// disco's allocations, copies and collectives inside a CUDA graph capture raise a clear error
// before touching stream 0, and the user's capture stays valid.
TEST_F(GpuCclTest, CallsInsideACudaGraphCaptureAreRefusedAndLeaveItIntact) {
  for (const char* what : {"alloc", "copy", "allreduce", "empty_cache"}) {
    DRef result = s().CallPacked(F("test.gpu.inside_capture"), std::string(what));
    for (int w = 0; w < n(); ++w) {
      std::string msg = result.DebugGetFromRemote(w).cast<std::string>();
      EXPECT_NE(msg.find("disco calls cannot be captured into a CUDA graph"), std::string::npos)
          << what << " on worker " << w << ": " << msg;
      EXPECT_NE(msg.find("memset: cudaSuccess | end capture: cudaSuccess, 1 node(s)"),
                std::string::npos)
          << what << " on worker " << w << ": " << msg;
    }
  }
  Check("calls inside a capture");
}

TEST_F(GpuCclTest, ThisWorkerGpuAllocatesOnEachWorkersGpu) {
  DRef t = s().Empty(Shape{16}, DataType("float32"), ThisWorkerGpu());
  DRef where = s().CallPacked(F("test.gpu.device_of"), t);
  DRef bound = s().CallPacked(F("disco.device"));
  for (int w = 0; w < n(); ++w) {
    DLDevice d = where.DebugGetFromRemote(w).cast<DLDevice>();
    EXPECT_EQ(d.device_type, kDLCUDA) << "worker " << w;
    EXPECT_EQ(d, bound.DebugGetFromRemote(w).cast<DLDevice>()) << "worker " << w;
  }
}

// h5::LoadTensors onto each worker's own GPU, without per-rank code.
TEST_F(GpuCclTest, LoadTensorsOntoEachWorkersGpu) {
  const std::string dir = testing::SharedTempDir("disco-gpu-load");
  const std::string path = dir + "/w.h5";
  DRef shard = s().Empty(Shape{8}, DataType("float32"));
  s().CallPacked(F("test.ccl.fill"), shard, "data", 0);
  h5::SaveTensors(s(), path, {{"w", shard, 0}});
  auto loaded = h5::LoadTensors(s(), path, {{"w", 0}}, false, ThisWorkerGpu());
  DRef where = s().CallPacked(F("test.gpu.device_of"), loaded["w"]);
  DRef bound = s().CallPacked(F("disco.device"));
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(where.DebugGetFromRemote(w).cast<DLDevice>(),
              bound.DebugGetFromRemote(w).cast<DLDevice>());
  }
  std::remove(path.c_str());
  rmdir(dir.c_str());
  Check("load onto GPUs");
}

TEST_F(GpuCclTest, HostTensorGivenToNcclIsARemoteError) {
  DRef host = s().Empty(Shape{4}, DataType("float32"));
  s().AllReduce(host, "sum", false, host);
  std::string msg = testing::RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("the nccl backend works on cuda:"), std::string::npos) << msg;
}

TEST_F(GpuCclTest, Int16IsRejectedBeforeAnythingMoves) {
  DRef t = Gpu(8, "int16");
  s().AllReduce(t, "sum", false, t);
  std::string msg = testing::RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("int16 and uint16 need mpi"), std::string::npos) << msg;
  DRef ok = Gpu(8, "int32");
  s().CallPacked(F("test.ccl.fill"), ok, "sum", 0);
  s().AllReduce(ok, "sum", false, ok);
  s().CallPacked(F("test.ccl.expect_allreduce"), ok, "sum", false);
  Check("allreduce after the refusal");
}

// "auto" with a GPU per rank: NCCL for device tensors and MPI for host tensors, in one session.
TEST_F(GpuCclTest, AutoMovesHostTensorsOverMpiAndDeviceTensorsOverNccl) {
  s().InitCCL("auto");
  DRef dev = Gpu(1000, "float32"), host = s().Empty(Shape{1000}, DataType("float32"));
  for (DRef t : {dev, host}) {
    s().CallPacked(F("test.ccl.fill"), t, "sum", 0);
    s().AllReduce(t, "sum", false, t);
    s().CallPacked(F("test.ccl.expect_allreduce"), t, "sum", false);
  }
  Check("auto with host and device tensors");
}

}  // namespace
}  // namespace disco
