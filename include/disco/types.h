/// \file disco/types.h
/// \brief Small value types: data types, devices, shapes and byte strings.
#ifndef DISCO_TYPES_H_
#define DISCO_TYPES_H_

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace disco {

/// Parses "float32", "int8", "bfloat16", "float16", "uint64", "bool", ... into a DLDataType.
/// Throws ValueError naming the string when it is not a data type.
DLDataType DataType(const std::string& name);
/// "float32" for {kDLFloat, 32, 1}; vector types get an "x<lanes>" suffix.
std::string DataTypeToString(DLDataType dtype);
/// Bytes of one element: (bits * lanes + 7) / 8.
size_t DataTypeBytes(DLDataType dtype);

/// The host CPU.
DLDevice CPU();
/// CUDA device `index` as numbered inside this process (after CUDA_VISIBLE_DEVICES).
DLDevice CUDA(int index = 0);
/// CUDA(-1): to `disco.empty` and `Session::Empty`, each worker's own GPU (the one InitCCL bound it
/// to), as TVM's Disco allocates on each worker's default device. CUDA(0) is GPU 0 everywhere.
DLDevice ThisWorkerGpu();
/// "cpu", "cuda:1".
std::string DeviceToString(DLDevice device);

/// A tensor shape: a list of non-negative extents. `Shape{}` is the 0-d (scalar) shape.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  size_t size() const { return dims_.size(); }
  int ndim() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  const int64_t* data() const { return dims_.data(); }
  std::vector<int64_t>::const_iterator begin() const { return dims_.begin(); }
  std::vector<int64_t>::const_iterator end() const { return dims_.end(); }
  const std::vector<int64_t>& dims() const { return dims_; }
  /// Product of the extents (1 for a 0-d shape). Throws ValueError on overflow or a negative dim.
  int64_t Numel() const;
  /// "(2, 3)", "()" for 0-d.
  std::string ToString() const;

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }

 private:
  std::vector<int64_t> dims_;
};

namespace detail {
/// The shared buffer of a Bytes longer than its inline capacity: one allocation holds the count,
/// the size and the data.
struct BytesBlock {
  std::atomic<int64_t> refs;
  size_t size;
  char* data() { return reinterpret_cast<char*>(this + 1); }
  static BytesBlock* Create(size_t size);
  void Release() noexcept;
};
}  // namespace detail

/// An immutable byte string; copies share the buffer (up to 16 bytes live inside the object).
class Bytes {
 public:
  static constexpr size_t kInlineBytes = 16;

  Bytes() : size_(0), inline_(true) {}
  explicit Bytes(const std::string& data) : Bytes(data.data(), data.size()) {}
  Bytes(const void* data, size_t size);
  /// A heap buffer of `size` uninitialized bytes, written through `*data` before the Bytes is
  /// shared (the buffer stays put when the Bytes is moved).
  static Bytes Allocate(size_t size, char** data);

  Bytes(const Bytes& other) : size_(other.size_), inline_(other.inline_) {
    if (inline_) {
      if (size_ != 0) std::memcpy(small_, other.small_, size_);
    } else {
      block_ = other.block_;
      block_->refs.fetch_add(1, std::memory_order_relaxed);
    }
  }
  Bytes(Bytes&& other) noexcept : size_(other.size_), inline_(other.inline_) {
    if (inline_) {
      if (size_ != 0) std::memcpy(small_, other.small_, size_);
    } else {
      block_ = other.block_;
      other.inline_ = true;
      other.size_ = 0;
    }
  }
  Bytes& operator=(const Bytes& other) {
    if (this != &other) {
      Bytes copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
  Bytes& operator=(Bytes&& other) noexcept {
    if (this != &other) {
      this->~Bytes();
      new (this) Bytes(std::move(other));
    }
    return *this;
  }
  ~Bytes() {
    if (!inline_) block_->Release();
  }

  const char* data() const { return inline_ ? small_ : block_->data(); }
  size_t size() const { return size_; }
  /// A copy as a std::string.
  std::string str() const { return size_ ? std::string(data(), size_) : std::string(); }
  bool operator==(const Bytes& other) const;

 private:
  union {
    detail::BytesBlock* block_;  // !inline_
    char small_[kInlineBytes];   // inline_
  };
  size_t size_;
  bool inline_;
};

}  // namespace disco

// Equality of the DLPack structs, in the global namespace where argument-dependent lookup finds
// it for these C types. A program that defines its own can opt out with
// DISCO_NO_DLPACK_OPERATORS.
#ifndef DISCO_NO_DLPACK_OPERATORS
inline bool operator==(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
inline bool operator!=(DLDataType a, DLDataType b) { return !(a == b); }
inline bool operator==(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}
inline bool operator!=(DLDevice a, DLDevice b) { return !(a == b); }
#endif

#endif  // DISCO_TYPES_H_
