#include "core/device_memory.h"

#include <disco/config.h>
#include <disco/error.h>
#include <disco/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

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

void* ComputeStream(int device) {
#if DISCO_HAVE_CUDA
  static std::array<std::atomic<cudaStream_t>, 64> streams{};
  static std::mutex mu;
  DISCO_CHECK(
      device >= 0 && device < static_cast<int>(streams.size()) && device < CudaDeviceCount(),
      ValueError)
      << "no compute stream for cuda:" << device << ": this process sees " << CudaDeviceCount()
      << " GPU(s)";
  cudaStream_t s = streams[device].load(std::memory_order_acquire);
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(mu);
  s = streams[device].load(std::memory_order_acquire);
  if (s == nullptr) {
    CudaDeviceGuard guard(device);
    // Blocking (cudaStreamDefault): ordered with the legacy stream 0 both ways. Never destroyed:
    // destructors of static objects may free tensors on it after the runtime is gone.
    DISCO_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
    streams[device].store(s, std::memory_order_release);
  }
  return s;
#else
  DISCO_THROW(ValueError) << "no compute stream for cuda:" << device
                          << ": disco was built without CUDA";
#endif
}

void MakeDeviceCurrent(int device) {
#if DISCO_HAVE_CUDA
  int current = -1;
  DISCO_CUDA_CALL(cudaGetDevice(&current));
  if (current != device) DISCO_CUDA_CALL(cudaSetDevice(device));
#else
  ThrowUnsupported(DLDevice{kDLCUDA, device});
#endif
}

#if DISCO_HAVE_CUDA
namespace {
cudaStream_t StreamOf(int device) { return static_cast<cudaStream_t>(ComputeStream(device)); }

// Device tensors come from the device's default memory pool, in the order of the compute stream
// (cudaMallocAsync / cudaFreeAsync): a free does not wait for the device, as cudaFree does, and
// the pool keeps freed memory for the next allocation. Devices without memory pools use
// cudaMalloc / cudaFree. Per device, decided once.
constexpr int kMaxDevices = 64;
std::atomic<int> g_pool_state[kMaxDevices];  // 0 unknown, 1 pool, 2 plain
bool UsesMemoryPool(int device) {
  if (device < 0 || device >= kMaxDevices) return false;
  int s = g_pool_state[device].load(std::memory_order_acquire);
  if (s == 0) {
    int supported = 0;
    s = 2;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) ==
            cudaSuccess &&
        supported != 0) {
      cudaMemPool_t pool;
      uint64_t keep = kCudaPoolKeepBytes;
      if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess &&
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess) {
        s = 1;
      }
    }
    cudaGetLastError();
    g_pool_state[device].store(s, std::memory_order_release);
  }
  return s == 1;
}
}  // namespace
#endif

namespace {
std::atomic<bool> g_fail_next_host_alloc{false};
}  // namespace

void TestFailNextHostAlloc() { g_fail_next_host_alloc = true; }

void* Alloc(DLDevice device, size_t nbytes) {
  if (device.device_type == kDLCPU) {
    size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    if (rounded == 0) rounded = kHostAlignment;
    void* ptr = g_fail_next_host_alloc.exchange(false)
                    ? nullptr
                    : std::aligned_alloc(kHostAlignment, rounded);
    DISCO_CHECK(ptr != nullptr, RuntimeError)
        << "out of host memory allocating " << nbytes << " bytes";
    return ptr;
  }
#if DISCO_HAVE_CUDA
  if (device.device_type == kDLCUDA) {
    CudaDeviceGuard guard(device.device_id);
    ThrowIfGraphCapture("allocating a CUDA tensor");
    void* ptr = nullptr;
    const size_t n = nbytes == 0 ? 1 : nbytes;
    if (!UsesMemoryPool(device.device_id)) {
      DISCO_CUDA_CALL(cudaMalloc(&ptr, n));
      return ptr;
    }
    cudaStream_t stream = StreamOf(device.device_id);
    cudaError_t st = cudaMallocAsync(&ptr, n, stream);
    if (st == cudaErrorMemoryAllocation) {
      // The pool keeps freed memory: hand it back to the device, then try once more.
      cudaGetLastError();
      cudaMemPool_t pool;
      DISCO_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, device.device_id));
      DISCO_CUDA_CALL(cudaStreamSynchronize(stream));
      DISCO_CUDA_CALL(cudaMemPoolTrimTo(pool, 0));
      st = cudaMallocAsync(&ptr, n, stream);
    }
    DISCO_CUDA_CALL(st);
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
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    bool switched = previous != device.device_id && cudaSetDevice(device.device_id) == cudaSuccess;
    // A failed free leaves its error for nobody: clear it, or the next launch check would see it.
    cudaError_t st = cudaErrorInvalidValue;
    if (!UsesMemoryPool(device.device_id)) {
      st = cudaFree(ptr);
    } else {
      try {
        st = cudaFreeAsync(ptr, StreamOf(device.device_id));
      } catch (const std::exception&) {  // no stream could be made: free in stream 0's order
        st = cudaFreeAsync(ptr, cudaStreamLegacy);
      }
    }
    if (st != cudaSuccess) cudaGetLastError();
    if (switched && previous >= 0) cudaSetDevice(previous);
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
    if (src_device.device_type == kDLCUDA && src_device.device_id != device) {
      // GPU to another GPU: the copy runs on the destination's compute stream, which does not
      // wait for the source's streams. What the source's compute stream (and, through it, its
      // stream 0) still has queued (a kernel writing `src`) finishes first.
      CudaDeviceGuard source(src_device.device_id);
      ThrowIfGraphCapture("copying between CUDA tensors");
      DISCO_CUDA_CALL(cudaStreamSynchronize(StreamOf(src_device.device_id)));
    }
    CudaDeviceGuard guard(device);
    ThrowIfGraphCapture("copying a CUDA tensor");
    // cudaMemcpy returns before a device-to-device or pageable host-to-device copy has landed;
    // the stream synchronization makes this copy (and the streams' earlier work) complete.
    cudaStream_t stream = StreamOf(device);
    DISCO_CUDA_CALL(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
    DISCO_CUDA_CALL(cudaStreamSynchronize(stream));
    return;
  }
#endif
  ThrowUnsupported(IsHost(dst_device) ? src_device : dst_device);
}

int64_t EmptyCache() {
  int64_t released = 0;
#if DISCO_HAVE_CUDA
  for (int device = 0; device < kMaxDevices; ++device) {
    if (g_pool_state[device].load(std::memory_order_acquire) != 1) continue;  // never allocated
    CudaDeviceGuard guard(device);
    ThrowIfGraphCapture("disco.empty_cache");
    cudaMemPool_t pool;
    DISCO_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, device));
    // Measured before the synchronization, which may release what exceeds kCudaPoolKeepBytes.
    uint64_t before = 0, after = 0;
    DISCO_CUDA_CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &before));
    // Frees queued on the compute stream return their memory to the pool once it passed them.
    DISCO_CUDA_CALL(cudaStreamSynchronize(StreamOf(device)));
    DISCO_CUDA_CALL(cudaMemPoolTrimTo(pool, 0));
    DISCO_CUDA_CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &after));
    if (before > after) released += static_cast<int64_t>(before - after);
  }
#endif
  return released;
}

}  // namespace memory
}  // namespace disco
