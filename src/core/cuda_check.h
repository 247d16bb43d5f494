// DISCO_CUDA_CALL: evaluates a CUDA runtime call once and throws RuntimeError with
// cudaGetErrorString when it fails. ThrowIfGraphCapture: refuses to run inside a CUDA graph
// capture. CudaDeviceGuard: a device made current for a scope.
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
                                << ": " << cudaGetErrorString(disco_cuda_status_)               \
                                << ::disco::detail::CudaCaptureHint(disco_cuda_status_);        \
    }                                                                                           \
  } while (0)

namespace disco {
namespace detail {
/// Why a capture-related CUDA error happened to a disco call ("" for any other error): the check
/// below misses captures that CUDA forbids only some calls during (a global-mode capture on a
/// non-blocking stream), which then fail with one of these.
inline const char* CudaCaptureHint(cudaError_t status) {
  switch (status) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorCapturedEvent:
      return " (disco calls cannot be captured into a CUDA graph: call them before or after the "
             "capture, or capture disco's own calls with Session::Capture)";
    default:
      return "";
  }
}
}  // namespace detail

/// Throws RuntimeError when a CUDA graph capture is in progress that disco's next step (`what`)
/// would break: disco allocates, copies and orders NCCL on the current device's legacy default
/// stream (stream 0) and waits on the host, none of which a capture may contain, and stream 0
/// joining a capturing blocking stream invalidates the user's capture with an obscure error.
/// cudaStreamIsCapturing(cudaStreamLegacy) answers cudaErrorStreamCaptureImplicit, without
/// invalidating anything, while a blocking stream of the current device captures: one cheap query
/// per call, no synchronization. Other errors of the query are left to the call that follows.
inline void ThrowIfGraphCapture(const char* what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t st = cudaStreamIsCapturing(cudaStreamLegacy, &status);
  if (st == cudaSuccess && status == cudaStreamCaptureStatusNone) return;
  if (st != cudaSuccess) {
    cudaGetLastError();  // the query's error is no error of the next call
    if (st != cudaErrorStreamCaptureImplicit) return;  // not about capture: the call will say
  }
  int device = -1;
  cudaGetDevice(&device);
  DISCO_THROW(RuntimeError) << what << ": disco calls cannot be captured into a CUDA graph (a "
                            << "capture is in progress on cuda:" << device << ", and disco's "
                            << "allocations, copies and collectives run on the legacy default "
                            << "stream and wait on the host, which would invalidate it; call "
                            << "disco before cudaStreamBeginCapture or after "
                            << "cudaStreamEndCapture, or record disco's own calls with "
                            << "Session::Capture)";
}

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
