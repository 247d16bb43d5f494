// The controller of disco-demo's decoder: greedy generation from a Hugging Face checkpoint (or
// its HDF5 conversion) with tensor parallelism over every rank of the job.
#ifndef DISCO_MODELS_LLAMA_DRIVER_H_
#define DISCO_MODELS_LLAMA_DRIVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "llama/config.h"

namespace llama {

/// disco-demo's options; its command line (src/tools/disco_demo_main.cc) fills them and says what
/// each does (disco-demo --help).
struct Options {
  Options();                                  // the default checkpoint's sizes
  std::string model;                          // empty: the default checkpoint (written once)
  std::vector<std::vector<int64_t>> prompts;  // empty: three default prompts
  std::vector<std::string> texts;  // prompts as text (--text), for the checkpoint's tokenizer
  int64_t max_new_tokens = 16;
  std::string dtype = "float32";
  std::string kv_dtype = "float32";  // the KV cache's (float16: CPU only)
  std::string device = "cpu";        // cuda: each rank's model on its GPU, allreduces by NCCL
  std::string dump_logits;
  std::string convert;
  bool calls = false;
  int64_t warmup = 1;
  int64_t repeat = 1;
  // The default checkpoint's config and seed.
  Config config;
  uint64_t seed = 1234;
};

/// Completes parsed options: the default prompts, and without --model the default checkpoint's
/// head size. Throws disco::ValueError naming the options when that checkpoint's config is not one
/// the model accepts.
void FinishOptions(Options* o);

/// Runs the decoder with `o` under disco::Main on every rank. Returns the process exit code.
int DemoMain(int argc, char** argv, Options o);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_DRIVER_H_
