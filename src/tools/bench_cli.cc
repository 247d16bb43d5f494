// disco-bench's command line: one subcommand per benchmark, each with its options (CLI11, checked
// as they are parsed: disco-bench SUB --help lists them), then the benchmark in a disco::Main job,
// or, for remote, in this process (it starts or attaches to a served job itself).
//   mpirun -n 2 disco-bench call [--iters N] [--repeats R] [--max-bytes B] [--csv FILE]
//   disco-bench remote [--launch "mpirun -n 2" | --server HOST:PORT] ...
#include <cstdio>
#include <exception>
#include <string>

#include "tools/bench_common.h"
#include "tools/cli.h"

namespace disco {
namespace bench {
namespace {

constexpr int64_t kMaxIters = 1000000000, kMaxRepeats = 1000000;
constexpr int64_t kMaxBytes = int64_t{1} << 31;  // element counts of float32 buffers fit an int

void AddOutput(CLI::App* app, Output* out) {
  app->add_option("--csv", out->csv, "write the table to this CSV file")
      ->check(cli::OutputFile())
      ->type_name("FILE");
  app->add_option("--json", out->json, "write the table to this JSON file")
      ->check(cli::OutputFile())
      ->type_name("FILE");
}

// --min-bytes and --max-bytes of a sweep: the smallest size no larger than the largest.
void AddByteRange(CLI::App* app, int64_t* min_bytes, int64_t* max_bytes) {
  cli::AddInt(app, "--min-bytes", min_bytes, 4, kMaxBytes, "smallest size, in bytes");
  cli::AddInt(app, "--max-bytes", max_bytes, 4, kMaxBytes, "largest size, in bytes (x4 steps)");
  app->callback([app, min_bytes, max_bytes] {
    if (*min_bytes > *max_bytes) {
      throw CLI::ValidationError(app->get_name() + ": --min-bytes " + std::to_string(*min_bytes) +
                                 " is larger than --max-bytes " + std::to_string(*max_bytes));
    }
  });
}

CLI::App* AddCall(CLI::App* app, CallOptions* o) {
  CLI::App* sub = app->add_subcommand(
      "call", "a session call's cost next to a raw MPI_Bcast of the same bytes (2 ranks)");
  cli::AddInt(sub, "--iters", &o->iters, 1, kMaxIters, "pipelined calls per timing");
  cli::AddInt(sub, "--latency-iters", &o->latency_iters, 1, kMaxIters,
              "calls per completion-latency timing");
  cli::AddInt(sub, "--repeats", &o->repeats, 1, kMaxRepeats, "interleaved repeats (medians)");
  cli::AddInt(sub, "--max-bytes", &o->max_bytes, 8, kMaxBytes,
              "largest payload (sizes 8 B .. 64 KiB)");
  sub->add_option("--csv", o->csv, "write the table to this CSV file (and FILE.sync.csv)")
      ->check(cli::OutputFile({".sync.csv"}))
      ->type_name("FILE");
  return sub;
}

CLI::App* AddCcl(CLI::App* app, CclOptions* o) {
  CLI::App* sub = app->add_subcommand(
      "ccl", "the session's collectives next to raw MPI ones, with bus bandwidth");
  cli::AddChoice(sub, "--ccl", &o->ccl, {"mpi", "nccl"}, "collective library");
  cli::AddChoice(sub, "--op", &o->op, {"allreduce", "allgather", "reduce_scatter", "broadcast"},
                 "only allreduce, allgather, reduce_scatter or broadcast (default: all)", "OP");
  AddByteRange(sub, &o->min_bytes, &o->max_bytes);
  cli::AddInt(sub, "--repeats", &o->repeats, 1, kMaxRepeats, "repeats (medians)");
  AddOutput(sub, &o->out);
  return sub;
}

CLI::App* AddGraph(CLI::App* app, GraphOptions* o) {
  CLI::App* sub = app->add_subcommand(
      "graph", "captured call sequences replayed next to the same calls one by one");
  cli::AddInt(sub, "--iters", &o->iters, 1, kMaxIters, "calls per timing");
  cli::AddInt(sub, "--repeats", &o->repeats, 1, kMaxRepeats, "interleaved repeats (medians)");
  cli::AddInt(sub, "--bytes", &o->bytes, 4, kMaxBytes, "the step graph's allreduced tensor");
  AddOutput(sub, &o->out);
  return sub;
}

CLI::App* AddLoad(CLI::App* app, LoadOptions* o) {
  CLI::App* sub =
      app->add_subcommand("load", "sharded HDF5 loading next to raw H5Dread of the same slices");
  cli::AddInt(sub, "--bytes", &o->bytes, 1, int64_t{1} << 40, "size of the matrix file");
  cli::AddInt(sub, "--axis", &o->axis, 1, 2, "split by rows (1) or by columns (2)");
  cli::AddInt(sub, "--repeats", &o->repeats, 1, kMaxRepeats, "repeats (medians)");
  sub->add_option("--dir", o->dir, "where the file is written")
      ->type_name("DIR")
      ->capture_default_str();
  AddOutput(sub, &o->out);
  return sub;
}

#if DISCO_BENCH_MLP
CLI::App* AddMlp(CLI::App* app, MlpOptions* o) {
  CLI::App* sub =
      app->add_subcommand("mlp", "the tensor-parallel MLP's step time against its ideal (N ranks)");
  demo::Config& c = o->model;
  const int64_t kMaxSize = int64_t{1} << 20;
  cli::AddInt(sub, "--hidden", &c.hidden, 1, kMaxSize, "model width");
  cli::AddInt(sub, "--ffn", &c.ffn, 1, kMaxSize, "MLP inner width (a multiple of the ranks)");
  cli::AddInt(sub, "--layers", &c.layers, 1, kMaxSize, "MLP blocks");
  cli::AddInt(sub, "--tokens", &c.tokens, 1, kMaxSize, "tokens per step");
  cli::AddInt(sub, "--steps", &c.steps, 1, kMaxRepeats, "timed steps (medians)");
  cli::AddChoice(sub, "--dtype", &c.dtype, {"float32", "bfloat16"}, "weights and activations");
  sub->add_option("--dir", o->dir, "where the checkpoint is written")
      ->type_name("DIR")
      ->capture_default_str();
  AddOutput(sub, &o->out);
  return sub;
}
#endif

CLI::App* AddRemote(CLI::App* app, RemoteOptions* o) {
  CLI::App* sub = app->add_subcommand(
      "remote", "a remote session's calls and copies next to raw TCP (not under mpirun)");
  CLI::Option* launch =
      sub->add_option("--launch", o->launch, "how to start the served job (disco-serve)")
          ->type_name("CMD")
          ->capture_default_str();
  sub->add_option("--server", o->server, "attach to this served job instead of --launch")
      ->type_name("HOST:PORT")
      ->check(CLI::Validator(
          [launch](const std::string&) {
            return launch->count() > 0 ? std::string("give --server or --launch, not both") : "";
          },
          ""));
  cli::AddInt(sub, "--iters", &o->iters, 1, kMaxIters, "calls per latency timing");
  AddByteRange(sub, &o->min_bytes, &o->max_bytes);
  cli::AddInt(sub, "--repeats", &o->repeats, 1, kMaxRepeats, "repeats (medians)");
  AddOutput(sub, &o->out);
  return sub;
}

struct AllOptions {
  CallOptions call;
  CclOptions ccl;
  GraphOptions graph;
  LoadOptions load;
  MlpOptions mlp;
  RemoteOptions remote;
};

int BenchMain(int argc, char** argv) {
  CLI::App app(
      "disco-bench: the runtime measured next to the raw MPI (or TCP) baseline in the "
      "same run.",
      "disco-bench");
  cli::Configure(&app);
  app.require_subcommand(0, 1);  // one benchmark a run
  app.footer(
      "Run a benchmark under mpirun (mpirun -n 2 disco-bench call), remote outside it;\n"
      "disco-bench BENCHMARK --help lists its options.");
  AllOptions o;
  CLI::App* call = AddCall(&app, &o.call);
  CLI::App* ccl = AddCcl(&app, &o.ccl);
  CLI::App* graph = AddGraph(&app, &o.graph);
  CLI::App* load = AddLoad(&app, &o.load);
#if DISCO_BENCH_MLP
  CLI::App* mlp = AddMlp(&app, &o.mlp);
#endif
  CLI::App* remote = AddRemote(&app, &o.remote);
  if (int code = cli::Parse(&app, argc, argv); code >= 0) return code;
  if (remote->parsed()) {
    try {
      return RunRemoteBench(o.remote);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "disco-bench remote: %s\n", e.what());
      return 1;
    }
  }
  if (app.get_subcommands().empty()) {
    return cli::Fail(app, "name a benchmark (call, ccl, graph, load, mlp, remote)");
  }
  return Main(argc, argv, [&](Session& s) {
    if (call->parsed()) return RunCallBench(s, o.call);
    if (ccl->parsed()) return RunCclBench(s, o.ccl);
    if (graph->parsed()) return RunGraphBench(s, o.graph);
    if (load->parsed()) return RunLoadBench(s, o.load);
#if DISCO_BENCH_MLP
    if (mlp->parsed()) return RunMlpBench(s, o.mlp);
#endif
    return 2;  // not reached: a subcommand was parsed
  });
}

}  // namespace
}  // namespace bench
}  // namespace disco

int main(int argc, char** argv) { return disco::bench::BenchMain(argc, argv); }
