// disco-demo --mlp: tensor-parallel MLP inference from an HDF5 checkpoint, checked against a
// single-process reference. This file is a module (disco-demo-mlp.so) that disco-demo
// (disco_demo_main.cc, which runs the Llama decoder by default) loads only for --mlp: its CUDA path
// links cuBLAS, whose resident data (about 140 MiB per process) the decoder should not carry.
//
// The MLP model is a stack of L Megatron-style MLP blocks over a batch of T tokens of width H:
//
//   h = gelu(x W1 + b1)         W1 (H, F) split by columns: each worker holds F/N of them
//   y = allreduce_sum(h W2)     W2 (F, H) split by rows: each worker's partial product
//   x = layernorm(x + y + b2)   b2, gamma, beta replicated
//
// The controller writes a checkpoint with a fixed seed when none is given: every worker generates
// its own shard (values from a hash of the seed, the dataset name and the global index, so any
// number of workers writes the same file) and h5::SaveTensors writes them. The workers load
// their shards with h5::LoadTensors. The input batch goes from the controller to worker 0
// and out by broadcast; each layer is one command; the output comes back to the controller, which
// recomputes the whole stack alone from the checkpoint file and compares. Matrix products use
// OpenBLAS (one thread per rank); bfloat16 runs keep weights, activations and the allreduce in
// bfloat16 and multiply in float32.
#include <disco/disco.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "tools/mlp_model.h"

namespace disco {
namespace demo {
namespace {

int RunChecked(Session& s, const Config& c);

// Errors of the run (a bad checkpoint, a worker that failed) end it with a message and exit 1.
int Run(Session& s, const Config& c) {
  try {
    return RunChecked(s, c);
  } catch (const Error& e) {
    std::fprintf(stderr, "disco-demo: %s\n", e.what());
    return 1;
  }
}

int RunChecked(Session& s, const Config& c) {
  const int n = s.num_workers();
  DISCO_CHECK(c.ffn % n == 0, ValueError)
      << "disco-demo: --ffn " << c.ffn << " cannot be split over " << n << " workers";
  const DLDataType dtype = DataType(c.dtype);
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

  // Load: every worker reads only its shards.
  double t_load = NowMs();
  std::map<std::string, DRef> w = LoadModel(s, c, path);
  if (cuda) MoveToDevice(s, &w);
  std::printf("[load] %lld datasets from %s, sharded over %d workers, in %.0f ms\n",
              static_cast<long long>(6 * c.layers), path.c_str(), n, NowMs() - t_load);

  // Input: controller -> worker 0 -> broadcast.
  std::vector<float> input_f;
  Tensor input = MakeInput(c, &input_f);
  DRef x = s.Empty(Shape{c.tokens, c.hidden}, dtype);
  s.CopyToWorker0(input, x);
  if (cuda) x = MoveToDevice(s, x);  // worker 0's copy is the one broadcast
  s.Broadcast(x, false, x);
  // A step: the L layer commands, captured once and replayed as one frame (the default), or sent
  // one by one (--calls).
  DRef graph_out;
  Graph step = s.Capture(
      1, [&](const std::vector<Any>& in) { graph_out = Forward(s, c, w, in[0].cast<DRef>()); });
  auto forward = [&](bool replay) {
    DRef out;
    if (replay) {
      step.Replay({Any(x)});
      out = graph_out;
    } else {
      out = Forward(s, c, w, x);
    }
    s.SyncAll();
    return out;
  };
  // Runs `steps` steps one way; their times, the workers' busy times, and the last output.
  struct Run {
    std::vector<double> step_ms;
    std::vector<WorkerTimes> times;
    DRef out;
  };
  auto run = [&](bool replay, bool print) {
    Run r;
    ResetWorkerTimes(s);
    for (int64_t i = 0; i < c.steps; ++i) {
      double t0 = NowMs();
      r.out = forward(replay);
      r.step_ms.push_back(NowMs() - t0);
      if (print) {
        std::printf("[step %lld/%lld] %.2f ms\n", static_cast<long long>(i + 1),
                    static_cast<long long>(c.steps), r.step_ms.back());
      }
    }
    r.times = GetWorkerTimes(s);
    return r;
  };
  // The share of a step's wall time in which no worker computed or reduced: the runtime's.
  auto runtime_ms = [&](const Run& r) {
    double total = 0, busy_max = 0;
    for (double t : r.step_ms) total += t;
    for (const WorkerTimes& t : r.times)
      busy_max = std::max(busy_max, t.compute_ms + t.allreduce_ms);
    return std::make_pair(std::max(0.0, total - busy_max), total);
  };
  double t_warm = NowMs();
  for (int64_t i = 0; i < c.warmup; ++i) {
    forward(true);
    forward(false);
  }
  std::printf("[warm-up] %lld steps each way in %.0f ms\n", static_cast<long long>(c.warmup),
              NowMs() - t_warm);
  std::printf("[steps] %s\n", c.calls ? "call by call (--calls)" : "by replay of a captured graph");
  Run main_run = run(!c.calls, true);
  Run other_run = run(c.calls, false);  // the other way, for the comparison
  const std::vector<double>& step_ms = main_run.step_ms;
  const std::vector<WorkerTimes>& times = main_run.times;
  DRef out = main_run.out;

  // Per-worker time split and memory.
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  double compute_sum = 0, allreduce_sum = 0;
  std::string peaks;
  for (int wkr = 0; wkr < n; ++wkr) {
    const WorkerTimes& t = times[wkr];
    compute_sum += t.compute_ms;
    allreduce_sum += t.allreduce_ms;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.0f", wkr ? " " : "", t.peak_kib / 1024.0);
    peaks += buf;
  }

  // Check against the single-process reference.
  Tensor result = Tensor::Empty(Shape{c.tokens, c.hidden}, dtype);
  s.CopyFromWorker0(result, out);
  std::vector<float> ref = Reference(c, path, input_f);
  double max_abs = 0, max_ref = 0;
  for (int64_t i = 0; i < result.numel(); ++i) {
    float got = ToFloat(result, i);
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(got) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  const double rel = max_ref > 0 ? max_abs / max_ref : max_abs;
  const double tol = c.tolerance >= 0 ? c.tolerance : (c.dtype == "bfloat16" ? 5e-2 : 1e-4);

  std::printf("\nsummary: %lld steps of %lld layers, median step %.2f ms, %.0f tokens/s\n",
              static_cast<long long>(c.steps), static_cast<long long>(c.layers), median,
              c.tokens / (median / 1e3));
  std::printf("  time in layers (all workers): compute %.1f%%, allreduce %.1f%%\n",
              100 * compute_sum / (compute_sum + allreduce_sum),
              100 * allreduce_sum / (compute_sum + allreduce_sum));
  const Run& replayed = c.calls ? other_run : main_run;
  const Run& called = c.calls ? main_run : other_run;
  for (const Run* r : {&replayed, &called}) {
    auto [rt, total] = runtime_ms(*r);
    std::printf(
        "  runtime (dispatch and control) share of a step, %s: %.2f%% (%.3f ms per step)%s\n",
        r == &replayed ? "by replay   " : "call by call", 100 * rt / total, rt / c.steps,
        (r == &main_run ? "" : " [the other way, for comparison]"));
  }
  std::printf("  peak memory per rank (MiB): %s\n", peaks.c_str());
  std::printf(
      "  check vs single-process reference: max abs error %.3g, max rel error %.3g "
      "(tolerance %.3g): %s\n",
      max_abs, rel, tol, rel <= tol ? "PASS" : "FAIL");
  return rel <= tol ? 0 : 1;
}

// The MLP demo's options into `c`, each with its line of --help.
void AddOptions(CLI::App* app, Config* c) {
  using cli::AddInt;
  const int64_t kMaxSize = int64_t{1} << 20;
  AddInt(app, "--hidden", &c->hidden, 1, kMaxSize, "model width");
  AddInt(app, "--ffn", &c->ffn, 1, kMaxSize, "MLP inner width (a multiple of the ranks)");
  AddInt(app, "--layers", &c->layers, 1, kMaxSize, "MLP blocks");
  AddInt(app, "--tokens", &c->tokens, 1, kMaxSize, "tokens per step");
  AddInt(app, "--steps", &c->steps, 1, 1000000, "timed steps");
  AddInt(app, "--warmup", &c->warmup, 0, 1000000, "untimed steps first, each way");
  AddInt(app, "--seed", &c->seed, 0, INT64_MAX, "seed of a written checkpoint's weights");
  cli::AddChoice(app, "--dtype", &c->dtype, {"float32", "bfloat16"}, "weights and activations");
  cli::AddChoice(app, "--device", &c->device, {"cpu", "cuda"},
                 "cuda: cuBLAS + NCCL, one GPU per rank");
  app->add_option("--checkpoint", c->checkpoint,
                  "HDF5 checkpoint, written first when missing (default "
                  "$TMPDIR/disco-u<uid>/mlp-DTYPE-hH-fF-lL-sSEED.h5)")
      ->type_name("FILE.h5");
  cli::AddNumber(app, "--tolerance", &c->tolerance, -1, 1e30,
                 "largest relative error against the reference (< 0: by dtype)");
  app->add_flag("--calls", c->calls, "each layer its own command, not a replay of a graph");
}

// The MLP demo's command line (without --mlp).
int MlpMain(int argc, char** argv) {
  disco::demo::Config c;
  CLI::App app(
      "disco-demo --mlp: the tensor-parallel MLP demo, checked against a single-process "
      "reference\n(without --mlp: the Llama decoder, disco-demo --help)",
      "disco-demo --mlp");
  cli::Configure(&app);
  AddOptions(&app, &c);
  if (int code = cli::Parse(&app, argc, argv); code >= 0) return code;
  return disco::Main(argc, argv, [&](disco::Session& s) { return disco::demo::Run(s, c); });
}

}  // namespace
}  // namespace demo
}  // namespace disco

// The module's entry point, which disco-demo calls for --mlp (the argument removed).
extern "C" __attribute__((visibility("default"))) int disco_demo_mlp_main(int argc, char** argv) {
  return disco::demo::MlpMain(argc, argv);
}
