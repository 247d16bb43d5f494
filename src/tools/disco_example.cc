// disco-example: a small controller program (what ./launch/demo runs until the tensor-parallel
// demo lands). Every worker computes a slice of a sum on its own data; the controller moves a
// tensor through worker 0, reads each worker's result, and checks it against a formula.
#include <disco/disco.h>

#include <cinttypes>
#include <cstdio>

#include "tools/cli.h"

namespace {

// Sum of i*i for i in this worker's contiguous slice of [0, n).
DISCO_REGISTER_GLOBAL("example.partial_square_sum").set_body_typed([](int64_t n) {
  const disco::WorkerInfo& w = disco::ThisWorker();
  int64_t begin = n * w.worker_id / w.num_workers, end = n * (w.worker_id + 1) / w.num_workers;
  int64_t sum = 0;
  for (int64_t i = begin; i < end; ++i) sum += i * i;
  return sum;
});

// y = x * (worker_id + 1), element-wise on a float32 tensor.
DISCO_REGISTER_GLOBAL("example.scale_by_rank").set_body_typed([](disco::Tensor x) {
  disco::Tensor y = disco::Tensor::Empty(x.shape(), x.dtype(), x.device());
  float k = static_cast<float>(disco::ThisWorker().worker_id + 1);
  for (int64_t i = 0; i < x.numel(); ++i) y.data_as<float>()[i] = x.data_as<float>()[i] * k;
  return y;
});

int Controller(disco::Session& s) {
  const int64_t n = 1000000;
  std::printf("disco-example: %d workers\n", s.num_workers());
  disco::DRef partial = s.CallPacked(s.GetGlobalFunc("example.partial_square_sum"), n);
  int64_t total = 0;
  for (int w = 0; w < s.num_workers(); ++w) {
    int64_t part = partial.DebugGetFromRemote(w).cast<int64_t>();
    std::printf("  worker %d: partial sum %" PRId64 "\n", w, part);
    total += part;
  }
  // Closed form of sum_{i<n} i^2 = (n-1) n (2n-1) / 6, in 128-bit to avoid overflow.
  __int128 expect = static_cast<__int128>(n - 1) * n * (2 * n - 1) / 6;
  bool sum_ok = static_cast<__int128>(total) == expect;
  std::printf("  sum of squares below %" PRId64 ": %" PRId64 " (%s)\n", n, total,
              sum_ok ? "matches the closed form" : "WRONG");

  // A tensor travels controller -> worker 0 -> computed on every worker -> back.
  disco::Tensor host = disco::Tensor::Empty(disco::Shape{4}, disco::DataType("float32"));
  for (int i = 0; i < 4; ++i) host.data_as<float>()[i] = 1.5f * i;
  disco::DRef x = s.Empty(disco::Shape{4}, disco::DataType("float32"));
  s.CopyToWorker0(host, x);
  disco::DRef y = s.CallPacked(s.GetGlobalFunc("example.scale_by_rank"), x);
  disco::Tensor out = disco::Tensor::Empty(disco::Shape{4}, disco::DataType("float32"));
  s.CopyFromWorker0(out, y);
  bool tensor_ok = true;
  for (int i = 0; i < 4; ++i) tensor_ok &= out.data_as<float>()[i] == 1.5f * i;
  std::printf("  tensor round trip through worker 0: %s\n", tensor_ok ? "ok" : "WRONG");

  // A remote error is raised at the next sync, and the session goes on.
  s.CallPacked(s.GetGlobalFunc("example.no_such_function"));
  try {
    s.SyncAll();
    std::printf("  expected a RemoteError\n");
    return 1;
  } catch (const disco::RemoteError& e) {
    std::printf("  remote error caught as expected (worker %d)\n", e.worker());
  }
  s.SyncAll();
  bool ok = sum_ok && tensor_ok;
  std::printf("disco-example: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "disco-example: a small controller program (run it under mpirun: disco-run -n 4 "
      "disco-example); it takes no options",
      "disco-example");
  disco::cli::Configure(&app);
  if (int code = disco::cli::Parse(&app, argc, argv); code >= 0) return code;
  return disco::Main(argc, argv, Controller);
}
