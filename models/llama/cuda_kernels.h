// The GPU path of the decoder: the CPU kernels' math (kernels.h) on CUDA tensors, in a module of
// its own, libdisco_llama_cuda.so (cuda_kernels.cu), that libdisco_llama loads only when a model
// goes on a GPU: cuBLAS alone adds about 150 MiB to a process's resident set, which CPU ranks
// should not pay. The module hands out one table of functions (Ops); model.cc calls nothing else
// of CUDA, so libdisco_llama itself builds and runs without it.
//
// Every operation is queued on the stream it is given (the worker's compute stream,
// disco::ThisWorkerStream()) and none waits for the device (but `synchronize`). Activations are
// float32; with bfloat16 weights the products take bfloat16 copies of their inputs (written by
// the kernel that makes the input) and accumulate in float32 (CUBLAS_COMPUTE_32F); float32
// products stay float32 (no TF32). Errors throw disco::RuntimeError naming the operation.
#ifndef DISCO_MODELS_LLAMA_CUDA_KERNELS_H_
#define DISCO_MODELS_LLAMA_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace llama {
namespace cuda {

struct Ops {
  /// kVersion of the module (a stale module next to a newer library is refused).
  int version;

  /// A cuBLAS handle bound to `stream` (and to the current device); freed by delete_blas.
  void* (*new_blas)(void* stream);
  void (*delete_blas)(void* blas);
  /// y[m, n] = x[m, k] w[n, k]^T (row-major; y's rows `ldy` floats apart). x and w are both
  /// float32, or both bfloat16 (`bf16`); y is float32.
  void (*linear)(void* blas, const void* x, int64_t m, int64_t k, const void* w, bool bf16,
                 int64_t n, float* y, int64_t ldy);

  /// x[r] = embedding row (row_tok[r] - vocab_start) widened to float32 when that row is this
  /// rank's (0 <= it < vocab), else zeros; h floats per row.
  void (*embed)(const int64_t* row_tok, int64_t rows, const void* embed, bool bf16,
                int64_t vocab_start, int64_t vocab, int64_t h, float* x, void* stream);
  /// out[i] = rmsnorm(x[rows_of[i]]) * w for i < rows (rows_of null: row i), in float32, and its
  /// bfloat16 copy into out_bf16 when that is not null. out may be x (rows_of null): Qwen3's
  /// q/k norms, one row per head.
  void (*rms_norm)(const float* x, const int64_t* rows_of, int64_t rows, const float* w, int64_t h,
                   float eps, float* out, void* out_bf16, void* stream);
  /// Rotary embedding (rotate_half) of each row's query heads (q: rows x heads x dim) and key
  /// heads (k: rows x kv_heads x dim) at the row's position (cos/sin: [position][dim / 2]), then
  /// the row's key and value into the layer's caches ([sequence][kv head][max_len][dim]) at its
  /// sequence and position.
  void (*rope_and_cache)(float* q, float* k, const float* v, int64_t rows, const int64_t* row_seq,
                         const int64_t* row_pos, int64_t heads, int64_t kv_heads, int64_t dim,
                         const float* cos, const float* sin, float* kcache, float* vcache,
                         int64_t max_len, void* stream);
  /// Causal grouped-query attention of every row and query head (query head j uses kv head
  /// j / (heads / kv_heads)) over positions 0..row_pos[r] of the row's sequence in the layer's
  /// caches (window > 0: the positions > row_pos[r] - window only): out = softmax(q k^T * scale)
  /// v (rows x heads x dim), and its bfloat16 copy when out_bf16 is not null. `scores` holds
  /// rows x heads x max_len floats.
  void (*attend)(const float* q, int64_t rows, const int64_t* row_seq, const int64_t* row_pos,
                 int64_t heads, int64_t kv_heads, int64_t dim, const float* kcache,
                 const float* vcache, int64_t max_len, int64_t window, float scale, float* scores,
                 float* out, void* out_bf16, void* stream);
  /// y += x (n floats).
  void (*add)(const float* x, float* y, int64_t n, void* stream);
  /// Each of the `rows` rows of y (n floats each) += bias (n floats).
  void (*add_bias)(const float* bias, float* y, int64_t rows, int64_t n, void* stream);
  /// out = silu(g) * u (n floats; out may be g), and its bfloat16 copy when out_bf16 is not null.
  void (*silu_mul)(const float* g, const float* u, float* out, void* out_bf16, int64_t n,
                   void* stream);
  /// For each of the b rows of logits (vl floats each), the packed (value, index) key of its
  /// first maximum (the CPU path's PackBest: a larger value wins, then a smaller index; the index
  /// counted from vocab_start): one int64 per row into best.
  void (*argmax_packed)(const float* logits, int64_t b, int64_t vl, int64_t vocab_start,
                        int64_t* best, void* stream);
  /// tokens[i * max_new + step] = the index packed in best[i] (after the allreduce(max)).
  void (*store_tokens)(const int64_t* best, int64_t b, int64_t max_new, int64_t step,
                       int64_t* tokens, void* stream);
  /// A decode step's batch: row i is sequence i at position seq_len[i] + step - 1, its token the
  /// one generated at step - 1; last_row[i] = i.
  void (*decode_rows)(const int64_t* tokens, const int64_t* seq_len, int64_t b, int64_t max_new,
                      int64_t step, int64_t* row_seq, int64_t* row_pos, int64_t* row_tok,
                      int64_t* last_row, void* stream);

  /// Copies (any pair of host and device memory) and fills, queued; waits for the stream.
  void (*copy_async)(void* dst, const void* src, size_t bytes, void* stream);
  void (*memset_async)(void* dst, int value, size_t bytes, void* stream);
  void (*synchronize)(void* stream);
  /// Timing events: the milliseconds between two recorded (and completed) events.
  void* (*new_event)();
  void (*delete_event)(void* event);
  void (*record)(void* event, void* stream);
  float (*elapsed_ms)(void* start, void* end);
};

constexpr int kVersion = 2;  // 2: attend's window, add_bias

}  // namespace cuda
}  // namespace llama

/// The module's one entry point.
extern "C" const llama::cuda::Ops* disco_llama_cuda_ops();

#endif  // DISCO_MODELS_LLAMA_CUDA_KERNELS_H_
