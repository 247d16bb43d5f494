// Raw memory on the host and on CUDA devices, and copies between any pair of them. The only place
// that calls cudaMalloc/cudaMemcpy for tensors.
#ifndef DISCO_CORE_DEVICE_MEMORY_H_
#define DISCO_CORE_DEVICE_MEMORY_H_

#include <dlpack/dlpack.h>

#include <cstddef>

namespace disco {
namespace memory {

/// Host alignment of tensor buffers.
constexpr size_t kHostAlignment = 64;

/// Allocates `nbytes` on `device` (host: 64-byte aligned; nbytes 0 gives a valid pointer).
void* Alloc(DLDevice device, size_t nbytes);
void Free(DLDevice device, void* ptr);
/// Copies `nbytes` between two buffers on any pair of host/CUDA devices, synchronously.
void Copy(void* dst, DLDevice dst_device, const void* src, DLDevice src_device, size_t nbytes);
/// True for kDLCPU and kDLCUDAHost.
bool IsHost(DLDevice device);
/// Number of CUDA devices this process sees (0 without CUDA, a driver or a GPU).
int CudaDeviceCount();

}  // namespace memory
}  // namespace disco

#endif  // DISCO_CORE_DEVICE_MEMORY_H_
