#include "core/device_memory.h"

#include <disco/config.h>
#include <disco/error.h>
#include <disco/types.h>

#include <cstdlib>
#include <cstring>

#include "core/cuda_check.h"

namespace disco {
namespace memory {

bool IsHost(DLDevice device) {
  return device.device_type == kDLCPU || device.device_type == kDLCUDAHost;
}

int CudaDeviceCount() {
#if DISCO_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

namespace {
[[noreturn]] void ThrowUnsupported(DLDevice device) {
  DISCO_THROW(ValueError) << "device " << DeviceToString(device) << " is not supported"
#if !DISCO_HAVE_CUDA
                          << (device.device_type == kDLCUDA ? " (disco was built without CUDA)"
                                                            : "")
#endif
      ;
}
}  // namespace

void* Alloc(DLDevice device, size_t nbytes) {
  if (device.device_type == kDLCPU) {
    size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    if (rounded == 0) rounded = kHostAlignment;
    void* ptr = std::aligned_alloc(kHostAlignment, rounded);
    DISCO_CHECK(ptr != nullptr, RuntimeError)
        << "out of host memory allocating " << nbytes << " bytes";
    return ptr;
  }
#if DISCO_HAVE_CUDA
  if (device.device_type == kDLCUDA) {
    CudaDeviceGuard guard(device.device_id);
    void* ptr = nullptr;
    DISCO_CUDA_CALL(cudaMalloc(&ptr, nbytes == 0 ? 1 : nbytes));
    return ptr;
  }
  if (device.device_type == kDLCUDAHost) {
    void* ptr = nullptr;
    DISCO_CUDA_CALL(cudaMallocHost(&ptr, nbytes == 0 ? 1 : nbytes));
    return ptr;
  }
#endif
  ThrowUnsupported(device);
}

void Free(DLDevice device, void* ptr) {
  if (ptr == nullptr) return;
  if (device.device_type == kDLCPU) {
    std::free(ptr);
    return;
  }
#if DISCO_HAVE_CUDA
  // Errors are ignored: a free during teardown after a CUDA failure must not throw.
  if (device.device_type == kDLCUDA) {
    cudaFree(ptr);
    return;
  }
  if (device.device_type == kDLCUDAHost) {
    cudaFreeHost(ptr);
    return;
  }
#endif
}

void Copy(void* dst, DLDevice dst_device, const void* src, DLDevice src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (IsHost(dst_device) && IsHost(src_device)) {
    std::memcpy(dst, src, nbytes);
    return;
  }
#if DISCO_HAVE_CUDA
  if (dst_device.device_type == kDLCUDA || src_device.device_type == kDLCUDA) {
    int device = dst_device.device_type == kDLCUDA ? dst_device.device_id : src_device.device_id;
    CudaDeviceGuard guard(device);
    DISCO_CUDA_CALL(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
    return;
  }
#endif
  ThrowUnsupported(IsHost(dst_device) ? src_device : dst_device);
}

}  // namespace memory
}  // namespace disco
