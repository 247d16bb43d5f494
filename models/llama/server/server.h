// disco-llm-server: a checkpoint served over HTTP in OpenAI's shapes (docs/serve-llm.md). Rank 0's
// controller loads the model on every rank, runs the HTTP front (http.h) and the scheduler
// (engine.h); the other ranks run disco's worker loop. SIGTERM or SIGINT: new requests are
// refused, the running batch finishes, the waiting requests fail (503), and every rank exits 0.
#ifndef DISCO_MODELS_LLAMA_SERVER_SERVER_H_
#define DISCO_MODELS_LLAMA_SERVER_SERVER_H_

#include <disco/session.h>

#include <cstdint>
#include <functional>
#include <string>

namespace llm_server {

struct ServerOptions {
  std::string model;  // a Hugging Face checkpoint directory with its tokenizer
  std::string host = "127.0.0.1";
  int port = 8000;
  int64_t max_batch = 8;
  int64_t max_len = 0;  // 0: the config's max_position_embeddings
  std::string api_key_file;
  std::string dtype = "float32";
  std::string kv_dtype = "float32";  // the KV cache's: float32 or float16
  /// Called on the controller before it waits for requests with none waiting: the program parks
  /// the other ranks there (a private part of the session, out of a model's reach), so that an
  /// idle server's workers sleep rather than spin in MPI. May be empty.
  std::function<void(disco::Session&)> idle;
};

/// Runs the server under disco::Main on every rank; returns the process exit code. Call it before
/// any thread starts: it blocks SIGTERM and SIGINT in every thread, and rank 0 waits for them.
int ServerMain(int argc, char** argv, const ServerOptions& o);

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_SERVER_H_
