// The Llama decoder's worker functions, registered by name when libdisco_llama loads (a
// controller in C++ or Python calls them through the session; every worker runs each call on its
// own shards). The model is told at the top of models/llama/model.cc.
//
//   llama.open(path, dtype) -> Model           a Hugging Face directory; this worker's shards
//   llama.new_model(config_json, dtype) -> Model    no weights yet (then llama.set_weight)
//   llama.set_weight(model, name, shard)        this worker's shard of `name` (e.g. from HDF5)
//   llama.weight(model, name) -> Tensor         this worker's shard of `name`
//   llama.config(model) -> str                  config.json text (every field the model uses)
//   llama.new_state(model, batch, max_len, max_rows, max_new_tokens, keep_logits[, kv_dtype])
//                                               -> State; kv_dtype "float32" (the default) or
//                                               "float16" (CPU: half the cache's bytes, as
//                                               llama.cpp's default)
//   llama.begin_prefill(state, tokens, lengths) the prompts, concatenated, and their lengths
//                                               (int64 tensors; a Shape holds at most 64)
//   llama.begin_decode(state, step)             step 1..max_new_tokens-1: the last token of each
//   llama.begin_step(state, slots, positions, counts, tokens)
//                                               slot mode (continuous batching): each listed slot
//                                               (a sequence of the KV cache) advances by counts[j]
//                                               tokens from positions[j] (int64 tensors; at most
//                                               max_rows tokens); then embed..head as usual
//   llama.set_sampling(state, temperatures, seeds, top_ps)  after llama.begin_step: each listed
//                                               slot's temperature (float32; 0: greedy), seed
//                                               (int64) and top_p (float32, (0, 1]; 1: all); the
//                                               head draws by Gumbel-max, noise a hash of (seed,
//                                               position, token), from the nucleus (found on the
//                                               whole vocabulary, an allreduce): the same draw at
//                                               any batch
//   llama.next_tokens(state) -> Tensor int64 (slots)  the token llama.head picked for each listed
//                                               slot (after its last row), in the step's order;
//                                               -2 for a slot whose keys or values passed
//                                               float16's range in the step, -1 for one whose
//                                               row or logits are NaN or infinite
//   llama.embed(state)                          x = embedding of the batch's tokens (allreduce)
//   llama.attention(state, layer)               x += attention block (one allreduce)
//   llama.mlp(state, layer)                     x += MLP block (one allreduce)
//   llama.head(state)                           next token of every sequence (one allreduce)
//   llama.tokens(state) -> Tensor int64 (batch, max_new_tokens)
//   llama.logits(state) -> Tensor float32 (max_new_tokens, batch, vocab/N)  with keep_logits
//                                               (slot mode: [0, j] the last step's j-th slot's)
//   llama.reset_stats(state), llama.stats(state) -> (compute us, allreduce us, calls,
//                                                    peak RSS KiB, weight bytes, KV cache bytes,
//                                                    bytes of weights in huge pages, bytes of
//                                                    the KV cache in huge pages)
//
// Model and State are opaque worker-local objects (disco::Object) in registers. dtype is
// "float32", "bfloat16" (weights stored as bfloat16, computed in float32) or "int8" (on the CPU:
// the linear layers' weights quantized when the model is first used, as llama.cpp's Q8_0, q8.h;
// llama.weight then refuses them). A model lives on the worker's device when it is made: its GPU
// after InitCCL("nccl") (then every call queues its work on disco::ThisWorkerStream() and returns
// without waiting for the GPU; llama.tokens, llama.logits and llama.stats wait), else the host.
#ifndef DISCO_MODELS_LLAMA_MODEL_H_
#define DISCO_MODELS_LLAMA_MODEL_H_

#include <string>
#include <vector>

namespace llama {

/// The names of the worker functions above (all registered once this library is loaded).
std::vector<std::string> WorkerFunctionNames();

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_MODEL_H_
