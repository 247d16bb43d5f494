// disco-demo: greedy generation with a tensor-parallel Llama-style decoder from a Hugging Face
// checkpoint (models/llama: libdisco_llama, written against disco's public API only), or, with
// --mlp, the tensor-parallel MLP demo, which is a program of its own (disco-demo-mlp, models/mlp)
// that this one execs: its CUDA path links cuBLAS, whose resident data (about 140 MiB per process)
// the decoder's ranks should not carry.
#include <disco/error.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "llama/driver.h"
#include "tools/cli.h"

namespace {

// The directory of this executable.
std::string ExeDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// Runs disco-demo-mlp, next to this program (as built and as installed), with `args` (argv without
// --mlp, ending in nullptr); returns only when it cannot.
int RunMlp(std::vector<char*> args) {
  std::string path = ExeDir() + "/disco-demo-mlp";
  args[0] = path.data();
  execv(path.c_str(), args.data());
  std::fprintf(stderr, "disco-demo: --mlp runs the MLP demo, %s, which cannot be started: %s\n",
               path.c_str(), std::strerror(errno));
  return 2;
}

// The decoder's options into `o`, each with its line of --help.
void AddModelOptions(CLI::App* app, llama::Options* o) {
  using disco::cli::AddInt;
  app->add_option("--model", o->model,
                  "Hugging Face checkpoint directory, or an HDF5 file --convert wrote")
      ->type_name("DIR|FILE.h5");
  app->add_option("--prompt", o->prompts, "token ids of a prompt (repeatable; default: three)")
      ->type_name("IDS")
      ->delimiter(',')
      ->transform(disco::cli::IntIn(0, INT32_MAX).application_index(-1))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--text", o->texts,
                  "a prompt as text, for the tokenizer of --model DIR (repeatable; prints the "
                  "generated text)")
      ->type_name("TEXT")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  AddInt(app, "--max-new-tokens", &o->max_new_tokens, 1, 1 << 20, "tokens generated per prompt");
  disco::cli::AddChoice(app, "--dtype", &o->dtype, {"float32", "bfloat16", "int8"},
                        "float32, bfloat16 or int8 weights (int8: the linear layers' as "
                        "llama.cpp's Q8_0, on the CPU)",
                        "DTYPE");
  disco::cli::AddChoice(app, "--kv-dtype", &o->kv_dtype, {"float32", "float16"},
                        "the KV cache's dtype (float16: half its bytes, as llama.cpp's default; "
                        "CPU only)",
                        "DTYPE");
  disco::cli::AddChoice(app, "--device", &o->device, {"cpu", "cuda"},
                        "cuda: each rank's shards on its own GPU");
  app->add_flag("--calls", o->calls, "decode call by call, not by replay of a captured graph");
  AddInt(app, "--warmup", &o->warmup, 0, 1 << 20, "untimed generations first, each way");
  AddInt(app, "--repeat", &o->repeat, 1, 1 << 20, "timed generations");
  app->add_option("--dump-logits", o->dump_logits, "write every step's logits to this .npy file")
      ->check(disco::cli::OutputFile())
      ->type_name("FILE.npy");
  app->add_option("--convert", o->convert, "write the model (in --dtype) to HDF5 and exit")
      ->check(disco::cli::OutputFile())
      ->type_name("OUT.h5");
}

// The sizes and seed of the default checkpoint (without --model).
void AddDefaultModelOptions(CLI::App* app, llama::Options* o) {
  using disco::cli::AddInt;
  llama::Config& c = o->config;
  const int64_t kMax = int64_t{1} << 20;
  AddInt(app, "--hidden", &c.hidden_size, 1, kMax, "default model: width");
  AddInt(app, "--layers", &c.num_hidden_layers, 1, kMax, "default model: decoder layers");
  AddInt(app, "--heads", &c.num_attention_heads, 1, kMax, "default model: attention heads");
  AddInt(app, "--kv-heads", &c.num_key_value_heads, 1, kMax, "default model: key/value heads");
  AddInt(app, "--head-dim", &c.head_dim, 2, kMax, "default model: head size (default: H/A)");
  AddInt(app, "--ffn", &c.intermediate_size, 1, kMax, "default model: MLP inner width");
  AddInt(app, "--vocab", &c.vocab_size, 1, kMax, "default model: vocabulary");
  app->add_flag("--tie-embeddings", c.tie_word_embeddings,
                "default model: the LM head is the embedding");
  AddInt(app, "--seed", &o->seed, 0, INT64_MAX, "default model: seed of its random weights");
}

// The Llama decoder's command line; --mlp (removed by main) chooses the MLP demo instead.
int LlamaMain(int argc, char** argv) {
  llama::Options o;
  CLI::App app(
      "disco-demo: greedy generation with a Llama-style decoder, tensor-parallel over the N ranks\n"
      "(mpirun -n N disco-demo). Without --model, a checkpoint of random weights (--hidden ...\n"
      "--seed) is written once to $TMPDIR or /tmp. Prints one 'generated:' line per prompt.",
      "disco-demo");
  disco::cli::Configure(&app);
  app.add_flag("--mlp",
               "run the MLP demo instead: disco-demo-mlp, next to this program (its options: "
               "--mlp --help)");
  AddModelOptions(&app, &o);
  AddDefaultModelOptions(&app, &o);
  app.callback([&o] {
    try {
      llama::FinishOptions(&o);
    } catch (const disco::Error& e) {
      throw CLI::ValidationError(disco::cli::Sentence(e.what()));
    }
  });
  if (int code = disco::cli::Parse(&app, argc, argv); code >= 0) return code;
  return llama::DemoMain(argc, argv, o);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  // --mlp among the options (not after "--", which ends them); it takes no value.
  auto mlp = args.end();
  for (auto a = args.begin() + 1; a != args.end() && std::strcmp(*a, "--") != 0; ++a) {
    if (std::strncmp(*a, "--mlp=", 6) == 0) {
      std::fprintf(stderr, "disco-demo: --mlp takes no value (got '%s')\n", *a);
      return 2;
    }
    if (std::strcmp(*a, "--mlp") == 0 && mlp == args.end()) mlp = a;
  }
  if (mlp == args.end()) return LlamaMain(argc, argv);
  args.erase(mlp);
  args.push_back(nullptr);
  return RunMlp(std::move(args));
}
