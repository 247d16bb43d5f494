// Host memory for the weights a decode step streams, in 2 MiB pages where the kernel gives them.
//
// Decode at batch 1 reads every weight matrix once a token, and with 4 KiB pages one core read
// 17-18 GB/s on this project's Zen 4 against 31-33 GB/s in 2 MiB pages (bench/stream.c; the
// hardware prefetchers stop at a page's end and every 4 KiB costs a TLB miss). Linux gives
// anonymous memory huge pages where the process asks (madvise(MADV_HUGEPAGE)) when
// /sys/kernel/mm/transparent_hugepage/enabled is `always` or `madvise`, the default of most
// distributions; under `never` the arena is ordinary memory and nothing else changes.
#ifndef DISCO_MODELS_LLAMA_WEIGHT_ARENA_H_
#define DISCO_MODELS_LLAMA_WEIGHT_ARENA_H_

#include <disco/tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace llama {

class WeightArena : public std::enable_shared_from_this<WeightArena> {
 public:
  /// Maps `bytes` (rounded up to 2 MiB) of anonymous memory aligned to 2 MiB and asks for huge
  /// pages (from 1 MiB up); raises disco::RuntimeError naming the size and `what` the memory is for
  /// when it cannot be had. The memory reads as zeros.
  static std::shared_ptr<WeightArena> Make(size_t bytes, const char* what = "the weights");
  ~WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  /// A tensor of `shape` and `dtype` in the arena's next 64-byte aligned bytes (zeros), that keeps
  /// the arena alive; raises disco::InternalError when the arena is full.
  disco::Tensor Take(const disco::Shape& shape, DLDataType dtype);
  /// The same holding a copy of the host tensor `t`.
  disco::Tensor Copy(const disco::Tensor& t);

  /// Bytes of the arena the kernel backs with huge pages now (/proc/self/smaps), 0 when unknown.
  size_t HugeBytes() const;
  size_t size() const { return size_; }
  /// The arena's first byte (2 MiB-aligned), for memory used as one block (the KV cache).
  char* data() const { return base_; }

 private:
  WeightArena(char* base, size_t size) : base_(base), size_(size) {}
  char* base_;
  size_t size_, used_ = 0;
};

/// The bytes tensors of `nbytes` take in an arena, each 64-byte aligned.
size_t ArenaBytes(const std::vector<size_t>& nbytes);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_WEIGHT_ARENA_H_
