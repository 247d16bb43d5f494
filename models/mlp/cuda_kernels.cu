// The demo MLP's element-wise kernels on CUDA tensors (see cuda_kernels.h); the same math as the
// CPU path in model.cc (tanh GELU, layer norm with epsilon 1e-5).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mlp/cuda_kernels.h"

namespace disco {
namespace demo {
namespace cuda {
namespace {

__device__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ float Load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ void Store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

template <typename T>
__global__ void BiasGeluKernel(T* h, const T* b1, int64_t tokens, int64_t cols) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * cols) return;
  float v = Load(h, i) + Load(b1, i % cols);
  Store(h, i, 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))));
}

constexpr int kThreads = 256;

// One block per row: z = x + y + b2, then two block-wide sums (mean, then variance).
template <typename T>
__global__ void ResidualLayerNormKernel(const T* x, const T* y, const T* b2, const T* g,
                                        const T* beta, int64_t width, T* out) {
  __shared__ float partial[kThreads];
  const int64_t row = blockIdx.x;
  auto z = [&](int64_t j) {
    return Load(x, row * width + j) + Load(y, row * width + j) + Load(b2, j);
  };
  auto block_sum = [&](float v) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    float total = partial[0];
    __syncthreads();
    return total;
  };
  float sum = 0;
  for (int64_t j = threadIdx.x; j < width; j += kThreads) sum += z(j);
  const float mean = block_sum(sum) / width;
  float sq = 0;
  for (int64_t j = threadIdx.x; j < width; j += kThreads) sq += (z(j) - mean) * (z(j) - mean);
  const float inv = rsqrtf(block_sum(sq) / width + 1e-5f);
  for (int64_t j = threadIdx.x; j < width; j += kThreads) {
    Store(out, row * width + j, (z(j) - mean) * inv * Load(g, j) + Load(beta, j));
  }
}

}  // namespace

void BiasGelu(void* h, const void* b1, int64_t tokens, int64_t cols, bool bf16) {
  const int64_t n = tokens * cols;
  const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  if (n == 0) return;
  if (bf16) {
    BiasGeluKernel<<<blocks, kThreads>>>(static_cast<__nv_bfloat16*>(h),
                                         static_cast<const __nv_bfloat16*>(b1), tokens, cols);
  } else {
    BiasGeluKernel<<<blocks, kThreads>>>(static_cast<float*>(h), static_cast<const float*>(b1),
                                         tokens, cols);
  }
}

void ResidualLayerNorm(const void* x, const void* y, const void* b2, const void* g,
                       const void* beta, int64_t tokens, int64_t width, void* out, bool bf16) {
  if (tokens == 0) return;
  const unsigned blocks = static_cast<unsigned>(tokens);
  if (bf16) {
    using T = __nv_bfloat16;
    ResidualLayerNormKernel<<<blocks, kThreads>>>(
        static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(b2),
        static_cast<const T*>(g), static_cast<const T*>(beta), width, static_cast<T*>(out));
  } else {
    ResidualLayerNormKernel<<<blocks, kThreads>>>(
        static_cast<const float*>(x), static_cast<const float*>(y), static_cast<const float*>(b2),
        static_cast<const float*>(g), static_cast<const float*>(beta), width,
        static_cast<float*>(out));
  }
}

const char* LastLaunchError() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace cuda
}  // namespace demo
}  // namespace disco
