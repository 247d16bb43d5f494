#include "llama/weight_arena.h"

#include <disco/error.h>
#include <dlpack/dlpack.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace llama {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kAlign = 64;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A tensor over `data` (`shape`, `dtype`) that holds `arena` until it is freed.
disco::Tensor View(std::shared_ptr<WeightArena> arena, void* data, const disco::Shape& shape,
                   DLDataType dtype) {
  struct Hold {
    std::shared_ptr<WeightArena> arena;
    std::vector<int64_t> shape;
  };
  auto* hold = new Hold{std::move(arena), {shape.begin(), shape.end()}};
  auto* m = new DLManagedTensor{};
  m->dl_tensor.data = data;
  m->dl_tensor.device = DLDevice{kDLCPU, 0};
  m->dl_tensor.ndim = static_cast<int32_t>(hold->shape.size());
  m->dl_tensor.dtype = dtype;
  m->dl_tensor.shape = hold->shape.data();
  m->manager_ctx = hold;
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<Hold*>(self->manager_ctx);
    delete self;
  };
  try {
    return disco::Tensor::FromDLPack(m);
  } catch (...) {
    m->deleter(m);
    throw;
  }
}

}  // namespace

std::shared_ptr<WeightArena> WeightArena::Make(size_t bytes, const char* what) {
  DISCO_CHECK(bytes <= (size_t{1} << 62), RuntimeError)
      << "out of host memory: " << bytes << " bytes asked for " << what;
  const size_t size = RoundUp(bytes == 0 ? 1 : bytes, kHugePage);
  // Map one huge page more and keep the 2 MiB-aligned part (a huge page must be aligned).
  void* p =
      mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  DISCO_CHECK(p != MAP_FAILED, RuntimeError)
      << "out of host memory mapping " << size << " bytes for " << what << ": "
      << std::strerror(errno);
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = RoundUp(start, kHugePage);
  if (base > start) munmap(p, base - start);
  if (base + size < start + size + kHugePage) {
    munmap(reinterpret_cast<void*>(base + size), start + size + kHugePage - base - size);
  }
  auto* b = reinterpret_cast<char*>(base);
  // Refused where THP is compiled out: then ordinary pages. Not asked for less than half a huge
  // page (a small model's KV cache): the memory written would be a whole 2 MiB page.
  if (bytes >= kHugePage / 2) madvise(b, size, MADV_HUGEPAGE);
  return std::shared_ptr<WeightArena>(new WeightArena(b, size));
}

WeightArena::~WeightArena() { munmap(base_, size_); }

disco::Tensor WeightArena::Take(const disco::Shape& shape, DLDataType dtype) {
  const size_t n = static_cast<size_t>(shape.Numel()) * ((dtype.bits * dtype.lanes + 7) / 8);
  DISCO_ICHECK(used_ + n <= size_)
      << "weight arena of " << size_ << " bytes: " << used_ << " used, " << n << " more asked";
  char* data = base_ + used_;
  used_ = RoundUp(used_ + n, kAlign);
  return View(shared_from_this(), data, shape, dtype);
}

disco::Tensor WeightArena::Copy(const disco::Tensor& t) {
  DISCO_ICHECK(t.device().device_type == kDLCPU) << "weight arena: a copy of " << t.ToString();
  disco::Tensor out = Take(t.shape(), t.dtype());
  std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

size_t WeightArena::HugeBytes() const {
  std::ifstream smaps("/proc/self/smaps");
  const auto lo = reinterpret_cast<uintptr_t>(base_), hi = lo + size_;
  std::string line;
  bool inside = false;
  size_t kib = 0;
  while (std::getline(smaps, line)) {
    unsigned long long a = 0, b = 0, v = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &a, &b) == 2) {
      inside = a < hi && b > lo;
    } else if (inside && std::sscanf(line.c_str(), "AnonHugePages: %llu kB", &v) == 1) {
      kib += static_cast<size_t>(v);
    }
  }
  return kib * 1024;
}

size_t ArenaBytes(const std::vector<size_t>& nbytes) {
  size_t n = 0;
  for (size_t b : nbytes) n = RoundUp(n + b, kAlign);
  return n;
}

}  // namespace llama
