/// \file disco/tensor.h
/// \brief `disco::Tensor`: a reference-counted, compact row-major DLPack tensor on the host or on a
/// CUDA device.
#ifndef DISCO_TENSOR_H_
#define DISCO_TENSOR_H_

#include <disco/types.h>
#include <dlpack/dlpack.h>

#include <cstddef>
#include <memory>

namespace disco {

/// A tensor: shape, dtype, device and a buffer. Copies share the buffer (like a shared_ptr);
/// use `CopyFrom` for a deep copy. Tensors are always compact and row-major.
class Tensor {
 public:
  Tensor() = default;

  /// Allocates an uninitialized tensor (host memory is 64-byte aligned; CUDA memory with
  /// cudaMalloc on `device`).
  static Tensor Empty(const Shape& shape, DLDataType dtype, DLDevice device = CPU());
  /// Takes ownership of `managed` (its deleter runs when the last copy of the Tensor goes).
  /// Throws ValueError for non-compact strides or an unsupported device.
  static Tensor FromDLPack(DLManagedTensor* managed);
  /// A new DLManagedTensor that keeps this tensor's buffer alive until its deleter is called.
  DLManagedTensor* ToDLPack() const;

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int ndim() const { return shape().ndim(); }
  DLDataType dtype() const;
  DLDevice device() const;
  /// Start of the data (the DLTensor's data plus byte_offset).
  void* data() const;
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }
  int64_t numel() const;
  size_t nbytes() const;
  /// The underlying DLTensor (valid while this tensor lives).
  const DLTensor& dl_tensor() const;

  /// Copies `other` into this tensor; shapes' element counts and dtypes must match. Any pair of
  /// host and CUDA devices.
  void CopyFrom(const Tensor& other);
  /// Copies `nbytes` host bytes into this tensor (must equal `nbytes()`).
  void CopyFromBytes(const void* data, size_t nbytes);
  /// Copies this tensor's bytes into host memory of `nbytes` (must equal `nbytes()`).
  void CopyToBytes(void* data, size_t nbytes) const;
  /// "Tensor(shape=(2, 3), dtype=float32, device=cpu)".
  std::string ToString() const;

  /// True when both refer to the same buffer.
  bool same_as(const Tensor& other) const { return impl_ == other.impl_; }
  /// An identity shared by the copies of this tensor (nullptr when undefined).
  const void* impl_id() const { return impl_.get(); }

  struct Impl;

 private:
  explicit Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace disco

#endif  // DISCO_TENSOR_H_
