// disco-bench mlp: the demo's tensor-parallel MLP step at N ranks, next to what perfect scaling
// would give, measured in the same run.
//
// step_ms: median time of one forward step (L layer commands and a SyncAll) on the controller.
// one_rank_ms: the same step with the unsharded weights on worker 0 alone (no allreduce), in the
// same job while the other workers wait. allreduce_ms: one session AllReduce of the activations
// (tokens x hidden, the bytes each layer reduces; the input batch into another tensor, so the
// values stay realistic: no growth into infinities or denormals). ideal_ms = one_rank_ms / N + L *
// allreduce_ms, and ratio = step_ms / ideal_ms (the demo issue asks <= 1.15 at 2 ranks).
// runtime_pct: the share of a step not spent inside the layer functions on the busiest worker
// (dispatch, control plane). Runs with more ranks than cores are labelled oversubscribed.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "mlp/model.h"
#include "tools/bench_common.h"

namespace disco {
namespace bench {

int RunMlpBench(Session& s, const MlpOptions& opts) {
  const demo::Config& c = opts.model;
  const int n = s.num_workers();
  DISCO_CHECK(c.ffn % n == 0, ValueError)
      << "disco-bench mlp: --ffn " << c.ffn << " cannot be split over " << n << " workers";
  s.InitCCL("mpi");

  std::vector<std::string> meta = Metadata(s);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const bool oversubscribed = cpus > 0 && n > cpus;
  meta.push_back("cpus=" + std::to_string(cpus) + (oversubscribed ? " oversubscribed" : ""));
  std::printf("# disco-bench mlp");
  for (const auto& m : meta) std::printf("  %s", m.c_str());
  std::printf("\n# medians of %lld steps after 2 warm-up steps; see src/tools/bench_mlp.cc\n",
              static_cast<long long>(c.steps));

  const std::string path = opts.dir + "/disco-bench-mlp-" + std::to_string(getpid()) + ".h5";
  demo::WriteCheckpoint(s, c, path);
  std::map<std::string, DRef> w = demo::LoadModel(s, c, path);
  std::remove(path.c_str());
  std::vector<float> input_f;
  Tensor input = demo::MakeInput(c, &input_f);
  DRef x = s.Empty(Shape{c.tokens, c.hidden}, DataType(c.dtype));
  s.CopyToWorker0(input, x);
  s.Broadcast(x, false, x);

  // Median step time; `total` gets the sum over the timed steps (after two warm-up steps, at
  // whose end the workers' layer timers restart).
  auto time_steps = [&](const std::map<std::string, DRef>& weights, bool local, double* total) {
    std::vector<double> t;
    for (int64_t i = 0; i < c.steps + 2; ++i) {
      if (i == 2) demo::ResetWorkerTimes(s);
      double t0 = demo::NowMs();
      demo::Forward(s, c, weights, x, local);
      s.SyncAll();
      if (i >= 2) t.push_back(demo::NowMs() - t0);
    }
    *total = 0;
    for (double v : t) *total += v;
    return Median(t);
  };
  double total = 0;
  const double step = time_steps(w, false, &total);
  std::vector<demo::WorkerTimes> times = demo::GetWorkerTimes(s);
  double busy_max = 0;
  for (const demo::WorkerTimes& t : times) {
    busy_max = std::max(busy_max, t.compute_ms + t.allreduce_ms);
  }
  const double runtime_pct = 100 * std::max(0.0, total - busy_max) / total;
  int64_t peak_kib = 0;
  for (const demo::WorkerTimes& t : times) peak_kib = std::max(peak_kib, t.peak_kib);
  w.clear();  // frees the shards before the full copy is made

  double one_rank = step, allreduce = 0;
  if (n > 1) {
    std::map<std::string, DRef> full = demo::MakeFullModelOnWorker0(s, c);
    double unused = 0;
    one_rank = time_steps(full, true, &unused);
    full.clear();
    DRef y = s.Empty(Shape{c.tokens, c.hidden}, DataType(c.dtype));
    const int iters = 200;
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      double t0 = demo::NowMs();
      for (int i = 0; i < iters; ++i) s.AllReduce(x, "sum", false, y);  // x: real activations
      s.SyncAll();
      t.push_back((demo::NowMs() - t0) / iters);
    }
    allreduce = Median(t);
  }
  const double ideal = one_rank / n + c.layers * allreduce;
  Table table({"ranks", "oversubscribed", "hidden", "ffn", "layers", "tokens", "dtype", "step_ms",
               "one_rank_ms", "allreduce_ms", "ideal_ms", "ratio", "tokens_per_s", "runtime_pct",
               "peak_MiB"});
  table.AddRow({std::to_string(n), oversubscribed ? "yes" : "no", std::to_string(c.hidden),
                std::to_string(c.ffn), std::to_string(c.layers), std::to_string(c.tokens), c.dtype,
                Fmt(step, 2), Fmt(one_rank, 2), Fmt(allreduce, 4), Fmt(ideal, 2),
                Fmt(step / ideal, 3), Fmt(c.tokens / (step / 1e3), 0), Fmt(runtime_pct, 3),
                Fmt(peak_kib / 1024.0, 0)});
  Emit(table, opts.out, meta);
  return 0;
}

}  // namespace bench
}  // namespace disco
