// libdisco_llama_cuda.so: the decoder's GPU kernels and cuBLAS products (see cuda_kernels.h).
// The math follows the CPU kernels (kernels.cc) operation for operation, in float32.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <disco/error.h>

#include <cfloat>
#include <cstdint>

#include "llama/cuda_kernels.h"

namespace llama {
namespace cuda {
namespace {

void Check(cudaError_t st, const char* what) {
  DISCO_CHECK(st == cudaSuccess, RuntimeError)
      << "llama (CUDA): " << what << " failed: " << cudaGetErrorName(st) << " ("
      << cudaGetErrorString(st) << ")";
}
// A launch's configuration errors show at once; its execution errors at the next synchronization.
void CheckLaunch(const char* what) { Check(cudaGetLastError(), what); }
void CheckBlas(cublasStatus_t st, const char* what) {
  DISCO_CHECK(st == CUBLAS_STATUS_SUCCESS, RuntimeError)
      << "llama (cuBLAS): " << what << " failed: " << cublasGetStatusName(st) << " ("
      << cublasGetStatusString(st) << ")";
}
cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

constexpr int kThreads = 256;
unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ float Load(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
              : static_cast<const float*>(p)[i];
}

// The sum (or maximum) of one value per thread of a block of kThreads; every thread gets it.
template <bool kMax>
__device__ float BlockReduce(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const float o = shared[threadIdx.x + s];
      shared[threadIdx.x] = kMax ? fmaxf(shared[threadIdx.x], o) : shared[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

__global__ void EmbedKernel(const int64_t* row_tok, int64_t rows, const void* embed, bool bf16,
                            int64_t vocab_start, int64_t vocab, int64_t h, float* x) {
  const int64_t r = blockIdx.x;
  const int64_t local = row_tok[r] - vocab_start;
  const bool mine = local >= 0 && local < vocab;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    x[r * h + j] = mine ? Load(embed, bf16, local * h + j) : 0.0f;
  }
}

__global__ void RmsNormKernel(const float* x, const int64_t* rows_of, const float* w, int64_t h,
                              float eps, float* out, __nv_bfloat16* out_bf16) {
  __shared__ float shared[kThreads];
  const int64_t i = blockIdx.x;
  const float* row = x + (rows_of != nullptr ? rows_of[i] : i) * h;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < h; j += kThreads) ss += row[j] * row[j];
  const float total = BlockReduce<false>(ss, shared);
  // Squares past float's range (|x| above about 1.8e19) would make the row zeros (1 / inf): then
  // the row is scaled by its largest magnitude first (as the CPU kernel's float64 sum, in float).
  float scale = 1.0f, inv = 1.0f / sqrtf(total / static_cast<float>(h) + eps);
  if (isinf(total)) {
    float m = 0;
    for (int64_t j = threadIdx.x; j < h; j += kThreads) m = fmaxf(m, fabsf(row[j]));
    scale = 1.0f / BlockReduce<true>(m, shared);
    float sc = 0;
    for (int64_t j = threadIdx.x; j < h; j += kThreads) sc += (row[j] * scale) * (row[j] * scale);
    inv = 1.0f / sqrtf(BlockReduce<false>(sc, shared) / static_cast<float>(h));
  }
  for (int64_t j = threadIdx.x; j < h; j += kThreads) {
    const float v = w[j] * ((row[j] * scale) * inv);
    out[i * h + j] = v;
    if (out_bf16 != nullptr) out_bf16[i * h + j] = __float2bfloat16(v);
  }
}

// One block per row; threads over (query heads + kv heads) x dim / 2 rotations, then the key and
// value copies.
__global__ void RopeAndCacheKernel(float* q, float* k, const float* v, const int64_t* row_seq,
                                   const int64_t* row_pos, int64_t heads, int64_t kv_heads,
                                   int64_t dim, const float* cos, const float* sin, float* kcache,
                                   float* vcache, int64_t max_len) {
  const int64_t r = blockIdx.x, half = dim / 2, pos = row_pos[r], seq = row_seq[r];
  const float* c = cos + pos * half;
  const float* s = sin + pos * half;
  for (int64_t t = threadIdx.x; t < (heads + kv_heads) * half; t += blockDim.x) {
    const int64_t head = t / half, i = t % half;
    float* p =
        head < heads ? q + (r * heads + head) * dim : k + (r * kv_heads + head - heads) * dim;
    const float a = p[i], b = p[i + half];
    p[i] = a * c[i] - b * s[i];
    p[i + half] = b * c[i] + a * s[i];
  }
  __syncthreads();
  for (int64_t t = threadIdx.x; t < kv_heads * dim; t += blockDim.x) {
    const int64_t g = t / dim, d = t % dim;
    const int64_t at = ((seq * kv_heads + g) * max_len + pos) * dim + d;
    kcache[at] = k[(r * kv_heads + g) * dim + d];
    vcache[at] = v[(r * kv_heads + g) * dim + d];
  }
}

// One block per (row, query head): scores into `scores`, softmax, then the weighted values, over
// positions first..n-1 (first > 0 with a sliding window).
__global__ void AttendKernel(const float* q, const int64_t* row_seq, const int64_t* row_pos,
                             int64_t heads, int64_t kv_heads, int64_t dim, const float* kcache,
                             const float* vcache, int64_t max_len, int64_t window, float scale,
                             float* scores, float* out, __nv_bfloat16* out_bf16) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x, head = blockIdx.y, g = head / (heads / kv_heads);
  const int64_t n = row_pos[r] + 1;
  const int64_t first = window > 0 && n > window ? n - window : 0;
  const float* qh = q + (r * heads + head) * dim;
  const float* kc = kcache + (row_seq[r] * kv_heads + g) * max_len * dim;
  const float* vc = vcache + (row_seq[r] * kv_heads + g) * max_len * dim;
  float* sc = scores + (r * heads + head) * max_len;
  float local_max = -FLT_MAX;
  for (int64_t p = first + threadIdx.x; p < n; p += kThreads) {
    float dot = 0;
    for (int64_t d = 0; d < dim; ++d) dot += qh[d] * kc[p * dim + d];
    sc[p] = dot * scale;
    local_max = fmaxf(local_max, sc[p]);
  }
  const float m = BlockReduce<true>(local_max, shared);
  float local_sum = 0;
  for (int64_t p = first + threadIdx.x; p < n; p += kThreads) {
    const float e = expf(sc[p] - m);
    sc[p] = e;
    local_sum += e;
  }
  const float total = BlockReduce<false>(local_sum, shared);  // its barriers publish sc
  const float inv = 1.0f / total;
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    float acc = 0;
    for (int64_t p = first; p < n; ++p) acc += sc[p] * vc[p * dim + d];
    const float o = acc * inv;
    out[(r * heads + head) * dim + d] = o;
    if (out_bf16 != nullptr) out_bf16[(r * heads + head) * dim + d] = __float2bfloat16(o);
  }
}

__global__ void AddKernel(const float* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void AddBiasKernel(const float* bias, float* y, int64_t rows, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * n) y[i] += bias[i % n];
}

__global__ void SiluMulKernel(const float* g, const float* u, float* out, __nv_bfloat16* out_bf16,
                              int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = g[i] / (1.0f + expf(-g[i])) * u[i];
  out[i] = v;
  if (out_bf16 != nullptr) out_bf16[i] = __float2bfloat16(v);
}

__device__ int64_t PackBest(float value, int64_t index) {
  if (value == 0.0f) value = 0.0f;  // -0 and +0 are equal
  uint32_t u = __float_as_uint(value);
  u = (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
  const uint64_t key =
      (static_cast<uint64_t>(u) << 32) | (0xFFFFFFFFull - static_cast<uint64_t>(index));
  return static_cast<int64_t>(key ^ (1ull << 63));
}

// One block per row: each thread's first maximum over its strided columns, then the block's (a
// larger value wins, then a smaller index: the first maximum of the row).
__global__ void ArgmaxKernel(const float* logits, int64_t vl, int64_t vocab_start, int64_t* best) {
  __shared__ float value[kThreads];
  __shared__ int64_t index[kThreads];
  const float* row = logits + blockIdx.x * vl;
  float v = -FLT_MAX;
  int64_t at = -1;
  for (int64_t j = threadIdx.x; j < vl; j += kThreads) {
    if (at < 0 || row[j] > v) v = row[j], at = j;
  }
  value[threadIdx.x] = v;
  index[threadIdx.x] = at;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const float ov = value[threadIdx.x + s];
      const int64_t oi = index[threadIdx.x + s];
      const int64_t mi = index[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > value[threadIdx.x] || (ov == value[threadIdx.x] && oi < mi))) {
        value[threadIdx.x] = ov;
        index[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) best[blockIdx.x] = PackBest(value[0], vocab_start + index[0]);
}

__global__ void StoreTokensKernel(const int64_t* best, int64_t b, int64_t max_new, int64_t step,
                                  int64_t* tokens) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= b) return;
  tokens[i * max_new + step] =
      static_cast<int64_t>(0xFFFFFFFFull - (static_cast<uint64_t>(best[i]) & 0xFFFFFFFFull));
}

__global__ void DecodeRowsKernel(const int64_t* tokens, const int64_t* seq_len, int64_t b,
                                 int64_t max_new, int64_t step, int64_t* row_seq, int64_t* row_pos,
                                 int64_t* row_tok, int64_t* last_row) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= b) return;
  row_seq[i] = i;
  row_pos[i] = seq_len[i] + step - 1;
  row_tok[i] = tokens[i * max_new + step - 1];
  last_row[i] = i;
}

// ---- The table ---------------------------------------------------------------------------------

void* NewBlas(void* stream) {
  cublasHandle_t h = nullptr;
  CheckBlas(cublasCreate(&h), "cublasCreate");
  cublasStatus_t st = cublasSetStream(h, S(stream));
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) cublasDestroy(h);
  CheckBlas(st, "cublasSetStream");
  return h;
}
void DeleteBlas(void* blas) {
  if (blas != nullptr) cublasDestroy(static_cast<cublasHandle_t>(blas));
}
void Linear(void* blas, const void* x, int64_t m, int64_t k, const void* w, bool bf16, int64_t n,
            float* y, int64_t ldy) {
  if (m == 0 || n == 0) return;
  // Row-major y[m, n] = x[m, k] w[n, k]^T is column-major y^T (n x m) = w^T (n x k) x^T (k x m).
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  CheckBlas(cublasGemmEx(static_cast<cublasHandle_t>(blas), CUBLAS_OP_T, CUBLAS_OP_N,
                         static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, w, t,
                         static_cast<int>(k), x, t, static_cast<int>(k), &zero, y, CUDA_R_32F,
                         static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
}
void Embed(const int64_t* row_tok, int64_t rows, const void* embed, bool bf16, int64_t vocab_start,
           int64_t vocab, int64_t h, float* x, void* stream) {
  if (rows == 0) return;
  EmbedKernel<<<static_cast<unsigned>(rows), kThreads, 0, S(stream)>>>(row_tok, rows, embed, bf16,
                                                                       vocab_start, vocab, h, x);
  CheckLaunch("the embedding kernel");
}
void RmsNorm(const float* x, const int64_t* rows_of, int64_t rows, const float* w, int64_t h,
             float eps, float* out, void* out_bf16, void* stream) {
  if (rows == 0) return;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, S(stream)>>>(
      x, rows_of, w, h, eps, out, static_cast<__nv_bfloat16*>(out_bf16));
  CheckLaunch("the RMSNorm kernel");
}
void RopeAndCache(float* q, float* k, const float* v, int64_t rows, const int64_t* row_seq,
                  const int64_t* row_pos, int64_t heads, int64_t kv_heads, int64_t dim,
                  const float* cos, const float* sin, float* kcache, float* vcache, int64_t max_len,
                  void* stream) {
  if (rows == 0) return;
  RopeAndCacheKernel<<<static_cast<unsigned>(rows), kThreads, 0, S(stream)>>>(
      q, k, v, row_seq, row_pos, heads, kv_heads, dim, cos, sin, kcache, vcache, max_len);
  CheckLaunch("the rotary embedding kernel");
}
void Attend(const float* q, int64_t rows, const int64_t* row_seq, const int64_t* row_pos,
            int64_t heads, int64_t kv_heads, int64_t dim, const float* kcache, const float* vcache,
            int64_t max_len, int64_t window, float scale, float* scores, float* out, void* out_bf16,
            void* stream) {
  if (rows == 0) return;
  AttendKernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads)), kThreads, 0,
                 S(stream)>>>(q, row_seq, row_pos, heads, kv_heads, dim, kcache, vcache, max_len,
                              window, scale, scores, out, static_cast<__nv_bfloat16*>(out_bf16));
  CheckLaunch("the attention kernel");
}
void Add(const float* x, float* y, int64_t n, void* stream) {
  if (n == 0) return;
  AddKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(x, y, n);
  CheckLaunch("the residual add kernel");
}
void AddBias(const float* bias, float* y, int64_t rows, int64_t n, void* stream) {
  if (rows * n == 0) return;
  AddBiasKernel<<<Blocks(rows * n), kThreads, 0, S(stream)>>>(bias, y, rows, n);
  CheckLaunch("the bias kernel");
}
void SiluMul(const float* g, const float* u, float* out, void* out_bf16, int64_t n, void* stream) {
  if (n == 0) return;
  SiluMulKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(g, u, out,
                                                       static_cast<__nv_bfloat16*>(out_bf16), n);
  CheckLaunch("the SwiGLU kernel");
}
void ArgmaxPacked(const float* logits, int64_t b, int64_t vl, int64_t vocab_start, int64_t* best,
                  void* stream) {
  if (b == 0) return;
  ArgmaxKernel<<<static_cast<unsigned>(b), kThreads, 0, S(stream)>>>(logits, vl, vocab_start, best);
  CheckLaunch("the argmax kernel");
}
void StoreTokens(const int64_t* best, int64_t b, int64_t max_new, int64_t step, int64_t* tokens,
                 void* stream) {
  if (b == 0) return;
  StoreTokensKernel<<<Blocks(b), kThreads, 0, S(stream)>>>(best, b, max_new, step, tokens);
  CheckLaunch("the token kernel");
}
void DecodeRows(const int64_t* tokens, const int64_t* seq_len, int64_t b, int64_t max_new,
                int64_t step, int64_t* row_seq, int64_t* row_pos, int64_t* row_tok,
                int64_t* last_row, void* stream) {
  if (b == 0) return;
  DecodeRowsKernel<<<Blocks(b), kThreads, 0, S(stream)>>>(tokens, seq_len, b, max_new, step,
                                                          row_seq, row_pos, row_tok, last_row);
  CheckLaunch("the decode batch kernel");
}
void CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(stream)), "cudaMemcpyAsync");
}
void MemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  if (bytes == 0) return;
  Check(cudaMemsetAsync(dst, value, bytes, S(stream)), "cudaMemsetAsync");
}
void Synchronize(void* stream) { Check(cudaStreamSynchronize(S(stream)), "cudaStreamSynchronize"); }
void* NewEvent() {
  cudaEvent_t e = nullptr;
  Check(cudaEventCreate(&e), "cudaEventCreate");
  return e;
}
void DeleteEvent(void* event) {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
void Record(void* event, void* stream) {
  Check(cudaEventRecord(static_cast<cudaEvent_t>(event), S(stream)), "cudaEventRecord");
}
float ElapsedMs(void* start, void* end) {
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)),
        "cudaEventElapsedTime");
  return ms;
}

const Ops kOps = {kVersion,     NewBlas,    DeleteBlas, Linear,      Embed,       RmsNorm,
                  RopeAndCache, Attend,     Add,        AddBias,     SiluMul,     ArgmaxPacked,
                  StoreTokens,  DecodeRows, CopyAsync,  MemsetAsync, Synchronize, NewEvent,
                  DeleteEvent,  Record,     ElapsedMs};

}  // namespace
}  // namespace cuda
}  // namespace llama

extern "C" const llama::cuda::Ops* disco_llama_cuda_ops() { return &llama::cuda::kOps; }
