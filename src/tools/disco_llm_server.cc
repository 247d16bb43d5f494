// disco-llm-server: a checkpoint served over HTTP in OpenAI's shapes, tensor-parallel over the
// job's ranks (mpirun -n N disco-llm-server --model DIR). The server is models/llama/server;
// this file is its command line.
#include <cstdio>

#include "llama/server/server.h"
#include "session/session_impl.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  llm_server::ServerOptions o;
  CLI::App app(
      "disco-llm-server: an OpenAI-compatible endpoint (/v1/completions, /v1/models, /health)\n"
      "for a Hugging Face checkpoint, tensor-parallel over the N ranks (mpirun -n N\n"
      "disco-llm-server --model DIR). Prints 'listening on http://HOST:PORT' once it answers;\n"
      "SIGTERM or SIGINT ends it (the running batch finishes).",
      "disco-llm-server");
  disco::cli::Configure(&app);
  app.add_option("--model", o.model, "checkpoint directory (config.json, safetensors, tokenizer)")
      ->required();
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  disco::cli::AddInt(&app, "--port", &o.port, 0, 65535, "port to listen on (0: a free one)");
  disco::cli::AddInt(&app, "--max-batch", &o.max_batch, 1, 256, "requests decoded together");
  disco::cli::AddInt(&app, "--max-len", &o.max_len, 0, int64_t{1} << 20,
                     "positions a request may use, prompt and max_tokens (0: the config's "
                     "max_position_embeddings)");
  app.add_option("--api-key-file", o.api_key_file,
                 "ask for this key (Authorization: Bearer KEY) on /v1/ routes; the file must be "
                 "yours and mode 600");
  app.add_option("--dtype", o.dtype,
                 "weights in memory (int8: the linear layers' as llama.cpp's Q8_0, on the CPU)")
      ->check(CLI::IsMember({"float32", "bfloat16", "int8"}))
      ->capture_default_str();
  app.add_option("--kv-dtype", o.kv_dtype,
                 "the KV cache's dtype (float16: half its bytes, so twice the --max-batch x "
                 "--max-len, as llama.cpp's default)")
      ->check(CLI::IsMember({"float32", "float16"}))
      ->capture_default_str();
  if (int code = disco::cli::Parse(&app, argc, argv); code >= 0) return code;
  // Between requests the workers sleep in a barrier instead of spinning for the next frame (as
  // disco-serve's do between clients); the next frame wakes them.
  o.idle = [](disco::Session& s) {
    if (s.impl() != nullptr) s.impl()->ParkWorkers();
  };
  return llm_server::ServerMain(argc, argv, o);
}
