// The collective checks of tests/mpi/ccl_test.cc on CUDA tensors through NCCL. Every test skips,
// with the reason, when this build has no NCCL or the machine no GPU.
#include <disco/disco.h>
#include <gtest/gtest.h>

#include "ccl/context.h"
#include "core/device_memory.h"
#include "mpi/mpi_test_env.h"

namespace disco {
namespace {

using testing::g_session;

// A tensor on this worker's bound GPU (each rank has its own).
DISCO_REGISTER_GLOBAL("test.gpu.empty").set_body_typed([](Shape shape, DLDataType dtype) {
  return Tensor::Empty(shape, dtype, ThisWorker().device);
});

DISCO_REGISTER_GLOBAL("test.gpu.usable").set_body_typed([]() { return ccl::NcclUsable(); });

class GpuCclTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if !DISCO_HAVE_NCCL
    GTEST_SKIP() << "this build has no NCCL (CUDA toolkit or NCCL not found at configure time)";
#endif
    if (memory::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible on rank 0";
    DRef usable = s().CallPacked(s().GetGlobalFunc("test.gpu.usable"));
    for (int w = 0; w < s().num_workers(); ++w) {
      if (!usable.DebugGetFromRemote(w).cast<bool>()) {
        GTEST_SKIP() << "worker " << w << " sees no CUDA device";
      }
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
        Check(std::string("nccl ") + dtype + " count " + std::to_string(count) +
              (in_group ? " in group" : ""));
      }
    }
  }
}

TEST_F(GpuCclTest, HostTensorGivenToNcclIsARemoteError) {
  DRef host = s().Empty(Shape{4}, DataType("float32"));
  s().AllReduce(host, "sum", false, host);
  std::string msg = testing::RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("the nccl backend works on cuda:"), std::string::npos) << msg;
}

}  // namespace
}  // namespace disco
