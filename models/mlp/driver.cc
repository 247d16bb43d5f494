// disco-demo-mlp's controller (see driver.h): checkpoint, load, steps both ways, the check.
#include "mlp/driver.h"

#include <disco/graph.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace disco {
namespace demo {
namespace {

// Refuses options that do not fit the job (--ffn over the workers, --dtype, --device), prints the
// run's first line and sets up the collectives.
void Start(Session& s, const Config& c) {
  const int n = s.num_workers();
  DISCO_CHECK(c.ffn % n == 0, ValueError)
      << "disco-demo: --ffn " << c.ffn << " cannot be split over " << n << " workers";
  static_cast<void>(DataType(c.dtype));  // a dtype disco does not know is refused first
  DISCO_CHECK(c.dtype == "float32" || c.dtype == "bfloat16", ValueError)
      << "disco-demo: --dtype is float32 or bfloat16, not " << c.dtype;
  std::printf("disco-demo: %d workers, %lld layers, hidden %lld, ffn %lld, %lld tokens, %s on %s\n",
              n, static_cast<long long>(c.layers), static_cast<long long>(c.hidden),
              static_cast<long long>(c.ffn), static_cast<long long>(c.tokens), c.dtype.c_str(),
              c.device.c_str());
  const bool cuda = c.device == "cuda";
  DISCO_CHECK(cuda || c.device == "cpu", ValueError)
      << "disco-demo: --device is cpu or cuda, not " << c.device;
  DISCO_CHECK(!cuda || HaveCudaPath(), ValueError)
      << "disco-demo: --device cuda: this build has no CUDA path (it needs CUDA, cuBLAS and nvcc)";
  s.InitCCL(cuda ? "nccl" : "mpi");
}

// The checkpoint's path (--checkpoint, else the default one), written first when missing.
std::string EnsureCheckpoint(Session& s, const Config& c) {
  std::string path = c.checkpoint.empty() ? DefaultCheckpoint(c) : c.checkpoint;
  struct stat st;
  if (c.checkpoint.empty() && lstat(path.c_str(), &st) == 0) {
    // Made by this user's earlier run, or planted: /tmp is anyone's.
    DISCO_CHECK(S_ISREG(st.st_mode) && st.st_uid == geteuid(), ValueError)
        << "disco-demo: the default checkpoint " << path << " is not a file of yours (uid "
        << geteuid() << "): remove it or pass --checkpoint FILE.h5";
  }
  if (access(path.c_str(), F_OK) != 0) {
    double t0 = NowMs();
    WriteCheckpoint(s, c, path);
    std::printf("[checkpoint] wrote %s (seed %llu) in %.0f ms\n", path.c_str(),
                static_cast<unsigned long long>(c.seed), NowMs() - t0);
  }
  return path;
}

// Steps timed one way: their times, the workers' busy times, and the last output.
struct StepRun {
  std::vector<double> step_ms;
  std::vector<WorkerTimes> times;
  DRef out;
};

// The model's steps on the input `x`: the L layer commands, captured once and replayed as one
// frame (the default), or sent one by one (--calls).
class Stepper {
 public:
  Stepper(Session& s, const Config& c, const std::map<std::string, DRef>& w, DRef x)
      : s_(s), c_(c), w_(w), x_(std::move(x)) {
    step_ = s_.Capture(1, [this](const std::vector<Any>& in) {
      graph_out_ = Forward(s_, c_, w_, in[0].cast<DRef>());
    });
  }

  // One step, by replay or call by call, and a sync.
  DRef Step(bool replay) {
    DRef out;
    if (replay) {
      step_.Replay({Any(x_)});
      out = graph_out_;
    } else {
      out = Forward(s_, c_, w_, x_);
    }
    s_.SyncAll();
    return out;
  }

  // Runs the configured number of steps one way (printing each with `print`).
  StepRun Run(bool replay, bool print) {
    StepRun r;
    ResetWorkerTimes(s_);
    for (int64_t i = 0; i < c_.steps; ++i) {
      double t0 = NowMs();
      r.out = Step(replay);
      r.step_ms.push_back(NowMs() - t0);
      if (print) {
        std::printf("[step %lld/%lld] %.2f ms\n", static_cast<long long>(i + 1),
                    static_cast<long long>(c_.steps), r.step_ms.back());
      }
    }
    r.times = GetWorkerTimes(s_);
    return r;
  }

 private:
  Session& s_;
  const Config& c_;
  const std::map<std::string, DRef>& w_;
  DRef x_;
  DRef graph_out_;
  Graph step_;
};

// The share of a run's wall time in which no worker computed or reduced (the runtime's), and the
// run's total, in ms.
std::pair<double, double> RuntimeMs(const StepRun& r) {
  double total = 0, busy_max = 0;
  for (double t : r.step_ms) total += t;
  for (const WorkerTimes& t : r.times) busy_max = std::max(busy_max, t.compute_ms + t.allreduce_ms);
  return std::make_pair(std::max(0.0, total - busy_max), total);
}

// The output against the single-process reference.
struct Check {
  double max_abs = 0;
  double rel = 0;
  double tol = 0;
};

Check CheckOutput(Session& s, const Config& c, const std::string& path,
                  const std::vector<float>& input_f, const DRef& out) {
  Tensor result = Tensor::Empty(Shape{c.tokens, c.hidden}, DataType(c.dtype));
  s.CopyFromWorker0(result, out);
  std::vector<float> ref = Reference(c, path, input_f);
  Check k;
  double max_ref = 0;
  for (int64_t i = 0; i < result.numel(); ++i) {
    float got = ToFloat(result, i);
    k.max_abs = std::max(k.max_abs, std::fabs(static_cast<double>(got) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  k.rel = max_ref > 0 ? k.max_abs / max_ref : k.max_abs;
  k.tol = c.tolerance >= 0 ? c.tolerance : (c.dtype == "bfloat16" ? 5e-2 : 1e-4);
  return k;
}

// The summary: step times, the time split, the runtime's share each way, memory and the check.
void PrintSummary(const Config& c, const StepRun& main_run, const StepRun& other_run,
                  const Check& k) {
  // Per-worker time split and memory.
  std::vector<double> sorted = main_run.step_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  double compute_sum = 0, allreduce_sum = 0;
  std::string peaks;
  for (size_t wkr = 0; wkr < main_run.times.size(); ++wkr) {
    const WorkerTimes& t = main_run.times[wkr];
    compute_sum += t.compute_ms;
    allreduce_sum += t.allreduce_ms;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.0f", wkr ? " " : "", t.peak_kib / 1024.0);
    peaks += buf;
  }
  std::printf("\nsummary: %lld steps of %lld layers, median step %.2f ms, %.0f tokens/s\n",
              static_cast<long long>(c.steps), static_cast<long long>(c.layers), median,
              c.tokens / (median / 1e3));
  std::printf("  time in layers (all workers): compute %.1f%%, allreduce %.1f%%\n",
              100 * compute_sum / (compute_sum + allreduce_sum),
              100 * allreduce_sum / (compute_sum + allreduce_sum));
  const StepRun& replayed = c.calls ? other_run : main_run;
  const StepRun& called = c.calls ? main_run : other_run;
  for (const StepRun* r : {&replayed, &called}) {
    auto [rt, total] = RuntimeMs(*r);
    std::printf(
        "  runtime (dispatch and control) share of a step, %s: %.2f%% (%.3f ms per step)%s\n",
        r == &replayed ? "by replay   " : "call by call", 100 * rt / total, rt / c.steps,
        (r == &main_run ? "" : " [the other way, for comparison]"));
  }
  std::printf("  peak memory per rank (MiB): %s\n", peaks.c_str());
  std::printf(
      "  check vs single-process reference: max abs error %.3g, max rel error %.3g "
      "(tolerance %.3g): %s\n",
      k.max_abs, k.rel, k.tol, k.rel <= k.tol ? "PASS" : "FAIL");
}

int RunChecked(Session& s, const Config& c) {
  Start(s, c);
  const bool cuda = c.device == "cuda";
  const std::string path = EnsureCheckpoint(s, c);

  // Load: every worker reads only its shards.
  double t_load = NowMs();
  std::map<std::string, DRef> w = LoadModel(s, c, path);
  if (cuda) MoveToDevice(s, &w);
  std::printf("[load] %lld datasets from %s, sharded over %d workers, in %.0f ms\n",
              static_cast<long long>(6 * c.layers), path.c_str(), s.num_workers(),
              NowMs() - t_load);

  // Input: controller -> worker 0 -> broadcast.
  std::vector<float> input_f;
  Tensor input = MakeInput(c, &input_f);
  DRef x = s.Empty(Shape{c.tokens, c.hidden}, DataType(c.dtype));
  s.CopyToWorker0(input, x);
  if (cuda) x = MoveToDevice(s, x);  // worker 0's copy is the one broadcast
  s.Broadcast(x, false, x);
  Stepper stepper(s, c, w, x);
  double t_warm = NowMs();
  for (int64_t i = 0; i < c.warmup; ++i) {
    stepper.Step(true);
    stepper.Step(false);
  }
  std::printf("[warm-up] %lld steps each way in %.0f ms\n", static_cast<long long>(c.warmup),
              NowMs() - t_warm);
  std::printf("[steps] %s\n", c.calls ? "call by call (--calls)" : "by replay of a captured graph");
  StepRun main_run = stepper.Run(!c.calls, true);
  StepRun other_run = stepper.Run(c.calls, false);  // the other way, for the comparison

  const Check k = CheckOutput(s, c, path, input_f, main_run.out);
  PrintSummary(c, main_run, other_run, k);
  return k.rel <= k.tol ? 0 : 1;
}

}  // namespace

// Errors of the run (a bad checkpoint, a worker that failed) end it with a message and exit 1.
int Run(Session& s, const Config& c) {
  try {
    return RunChecked(s, c);
  } catch (const Error& e) {
    std::fprintf(stderr, "disco-demo: %s\n", e.what());
    return 1;
  }
}

}  // namespace demo
}  // namespace disco
