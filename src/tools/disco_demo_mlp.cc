// disco-demo-mlp: the command line of the tensor-parallel MLP demo (models/mlp: the model, and
// its controller in driver.h). Its own program: `disco-demo --mlp ARGS` runs it (execv) with ARGS,
// so that the decoder's ranks never load what the MLP links (cuBLAS on CUDA builds, about 140 MiB
// of resident data per process). It keeps the name users call it by, disco-demo --mlp, in its
// usage line and errors.
#include <disco/disco.h>

#include <cstdint>

#include "mlp/driver.h"
#include "tools/cli.h"

namespace disco {
namespace demo {
namespace {

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

// The MLP demo's command line (disco-demo --mlp passes what follows its --mlp).
int MlpMain(int argc, char** argv) {
  disco::demo::Config c;
  CLI::App app(
      "disco-demo-mlp (disco-demo --mlp): the tensor-parallel MLP demo, checked against a "
      "single-process\nreference (without --mlp: the Llama decoder, disco-demo --help)",
      "disco-demo --mlp");
  cli::Configure(&app);
  AddOptions(&app, &c);
  if (int code = cli::Parse(&app, argc, argv); code >= 0) return code;
  return disco::Main(argc, argv, [&](disco::Session& s) { return disco::demo::Run(s, c); });
}

}  // namespace
}  // namespace demo
}  // namespace disco

int main(int argc, char** argv) { return disco::demo::MlpMain(argc, argv); }
