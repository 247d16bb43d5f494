// DISCO_CUDA_CALL: evaluates a CUDA runtime call once and throws RuntimeError with
// cudaGetErrorString when it fails.
#ifndef DISCO_CORE_CUDA_CHECK_H_
#define DISCO_CORE_CUDA_CHECK_H_

#include <disco/config.h>
#include <disco/error.h>

#if DISCO_HAVE_CUDA
#include <cuda_runtime_api.h>

#define DISCO_CUDA_CALL(expr)                                                                   \
  do {                                                                                          \
    cudaError_t disco_cuda_status_ = (expr);                                                    \
    if (disco_cuda_status_ != cudaSuccess) {                                                    \
      DISCO_THROW(RuntimeError) << #expr << " failed: " << cudaGetErrorName(disco_cuda_status_) \
                                << ": " << cudaGetErrorString(disco_cuda_status_);              \
    }                                                                                           \
  } while (0)

namespace disco {
/// Makes `device` current for the lifetime of the guard and restores the previous one.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    DISCO_CUDA_CALL(cudaGetDevice(&previous_));
    if (previous_ != device) DISCO_CUDA_CALL(cudaSetDevice(device));
    device_ = device;
  }
  ~CudaDeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};
}  // namespace disco
#endif  // DISCO_HAVE_CUDA

#endif  // DISCO_CORE_CUDA_CHECK_H_
