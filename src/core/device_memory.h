// Raw memory on the host and on CUDA devices, and copies between any pair of them. The only place
// that calls cudaMalloc/cudaMemcpy for tensors.
//
// Stream order: every device operation here runs on the device's compute stream (ComputeStream
// below, ThisWorkerStream() for worker functions), the stream the Llama decoder's kernels, its
// cuBLAS calls and AllReduceInFunction on CUDA tensors use. It is a blocking stream (made without
// cudaStreamNonBlocking), so it and CUDA's legacy default stream (stream 0, where user kernels
// launched without a stream, cuBLAS without cublasSetStream and cudaMemcpy run) wait for each
// other's earlier work: code that knows only stream 0 stays ordered with disco. The NCCL backend
// orders each of its builtin operations after both streams (events it waits for), so a kernel or
// copy that writes a buffer on either is complete before NCCL reads it. Work on other user streams
// must be synchronized by its owner first.
#ifndef DISCO_CORE_DEVICE_MEMORY_H_
#define DISCO_CORE_DEVICE_MEMORY_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

namespace disco {
namespace memory {

/// Host alignment of tensor buffers.
constexpr size_t kHostAlignment = 64;

/// The freed memory a device's memory pool keeps across synchronizations (its release
/// threshold): up to this much comes back to the next allocations without a trip to the driver,
/// and CUDA hands whatever the pool holds beyond it back to the device at the next stream, event
/// or device synchronization, where other allocators of the process can have it: NCCL's buffers,
/// which it allocates lazily at a communicator's first collective of each kind, cuBLAS's
/// workspaces, torch or CuPy in Python workers. Keeping everything (the threshold UINT64_MAX)
/// made them run out of memory while the pool sat on freed memory; keeping nothing (0, CUDA's
/// default) would map and unmap memory at every copy and collective, since each of them
/// synchronizes. 256 MiB holds the temporaries a step frees and allocates again (activations of
/// moderate size) and is a small part of a GPU's memory; EmptyCache gives back the rest.
constexpr uint64_t kCudaPoolKeepBytes = uint64_t{256} << 20;

/// Allocates `nbytes` on `device` (host: 64-byte aligned; nbytes 0 gives a valid pointer). CUDA
/// memory comes from the device's memory pool in the compute stream's order (cudaMallocAsync),
/// ready for any work queued on that stream or stream 0 after this call and for the NCCL backend.
/// Throws RuntimeError during a CUDA graph capture (core/cuda_check.h: ThrowIfGraphCapture).
void* Alloc(DLDevice device, size_t nbytes);
/// Fault injection for tests: the next host allocation of this process fails as out of memory
/// would (an allocation that fails on one rank only).
void TestFailNextHostAlloc();
/// Frees on the device that owns `ptr` (made current for the call, whichever device the calling
/// thread had); never throws, so that destructors may call it. CUDA memory goes back to the pool
/// in the compute stream's order (cudaFreeAsync, no wait for the device): work queued on it or
/// stream 0 before the free still reads valid memory. (The NCCL backend keeps the tensors of its
/// unmatched sends alive itself.)
void Free(DLDevice device, void* ptr);
/// Copies `nbytes` between two buffers on any pair of host/CUDA devices. Synchronous: when it
/// returns, the bytes are in `dst` (device to device and pageable host to device included, where a
/// plain cudaMemcpy may return earlier), and the work queued on the compute stream (and stream 0)
/// before it has finished (on both GPUs of a copy between two). Throws RuntimeError during a CUDA
/// graph capture.
void Copy(void* dst, DLDevice dst_device, const void* src, DLDevice src_device, size_t nbytes);
/// Gives the freed memory that the pools of the devices this process allocated on still keep back
/// to the devices (cudaMemPoolTrimTo 0, after the compute streams' queued frees), for other
/// allocators of the process. Returns the bytes released: 0 without CUDA or before any device
/// allocation. The builtin disco.empty_cache; throws RuntimeError during a CUDA graph capture.
int64_t EmptyCache();
/// True for kDLCPU and kDLCUDAHost.
bool IsHost(DLDevice device);
/// Number of CUDA devices this process sees (0 without CUDA, a driver or a GPU).
int CudaDeviceCount();
/// The compute stream of CUDA device `device` in this process (a cudaStream_t; one per device,
/// made on first use with cudaStreamDefault flags and kept until the process ends). Throws
/// ValueError in a build without CUDA or for a device this process does not see.
void* ComputeStream(int device);
/// Makes CUDA device `device` the calling thread's current device (cudaSetDevice when it is not).
void MakeDeviceCurrent(int device);

}  // namespace memory
}  // namespace disco

#endif  // DISCO_CORE_DEVICE_MEMORY_H_
