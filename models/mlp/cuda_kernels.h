// The demo MLP's element-wise kernels on CUDA tensors (models/mlp/cuda_kernels.cu); the
// matrix products go to cuBLAS (models/mlp/model.cc). Pointers are device pointers; `bf16` selects
// bfloat16 storage (float32 otherwise); arithmetic is float32. Kernels run on the default stream.
#ifndef DISCO_MODELS_MLP_CUDA_KERNELS_H_
#define DISCO_MODELS_MLP_CUDA_KERNELS_H_

#include <cstdint>

namespace disco {
namespace demo {
namespace cuda {

/// h[t, j] = gelu(h[t, j] + b1[j]) in place, for `tokens` rows of `cols`.
void BiasGelu(void* h, const void* b1, int64_t tokens, int64_t cols, bool bf16);
/// out[t] = layernorm(x[t] + y[t] + b2) * g + beta, for `tokens` rows of `width`.
void ResidualLayerNorm(const void* x, const void* y, const void* b2, const void* g,
                       const void* beta, int64_t tokens, int64_t width, void* out, bool bf16);
/// The error of the last launch, or "" (cudaGetLastError's message).
const char* LastLaunchError();

}  // namespace cuda
}  // namespace demo
}  // namespace disco

#endif  // DISCO_MODELS_MLP_CUDA_KERNELS_H_
