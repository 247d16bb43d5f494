#include <disco/error.h>
#include <disco/tensor.h>

#include <sstream>

#include "core/device_memory.h"

namespace disco {

struct Tensor::Impl {
  DLTensor dl{};
  Shape shape;
  int64_t numel = 0;
  size_t nbytes = 0;
  // Exactly one owner: memory disco allocated, or a DLManagedTensor whose deleter we call.
  void* owned = nullptr;
  DLManagedTensor* managed = nullptr;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (owned != nullptr) memory::Free(dl.device, owned);
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
  void Finish() {
    dl.ndim = shape.ndim();
    dl.shape = const_cast<int64_t*>(shape.data());
    dl.strides = nullptr;
    numel = shape.Numel();
    size_t elem = DataTypeBytes(dl.dtype);
    DISCO_CHECK(elem == 0 || static_cast<uint64_t>(numel) <= SIZE_MAX / elem, ValueError)
        << "tensor of shape " << shape.ToString() << " is too large";
    nbytes = static_cast<size_t>(numel) * elem;
  }
};

namespace {
void CheckDevice(DLDevice device) {
  DISCO_CHECK(device.device_type == kDLCPU || device.device_type == kDLCUDA ||
                  device.device_type == kDLCUDAHost,
              ValueError)
      << "tensors on device " << DeviceToString(device) << " are not supported (cpu, cuda only)";
  DISCO_CHECK(device.device_id >= 0, ValueError)
      << "device id must be >= 0, got " << DeviceToString(device);
}
void CheckDType(DLDataType dtype) {
  DISCO_CHECK(dtype.bits > 0 && dtype.lanes > 0 && (dtype.bits * dtype.lanes) % 8 == 0, ValueError)
      << "data type " << DataTypeToString(dtype) << " is not byte-addressable";
}
}  // namespace

Tensor Tensor::Empty(const Shape& shape, DLDataType dtype, DLDevice device) {
  CheckDevice(device);
  CheckDType(dtype);
  auto impl = std::make_shared<Impl>();
  impl->shape = shape;
  impl->dl.dtype = dtype;
  impl->dl.device = device;
  impl->Finish();
  impl->owned = memory::Alloc(device, impl->nbytes);
  impl->dl.data = impl->owned;
  return Tensor(std::move(impl));
}

Tensor Tensor::FromDLPack(DLManagedTensor* managed) {
  DISCO_CHECK(managed != nullptr, ValueError) << "FromDLPack: null DLManagedTensor";
  const DLTensor& src = managed->dl_tensor;
  CheckDevice(src.device);
  CheckDType(src.dtype);
  DISCO_CHECK(src.ndim >= 0 && src.ndim <= 64, ValueError)
      << "FromDLPack: ndim " << src.ndim << " is out of range";
  DISCO_CHECK(src.ndim == 0 || src.shape != nullptr, ValueError) << "FromDLPack: null shape";
  std::vector<int64_t> dims(src.shape, src.shape + src.ndim);
  Shape shape(dims);
  int64_t numel = shape.Numel();
  if (src.strides != nullptr && numel > 1) {
    int64_t expected = 1;
    for (int i = src.ndim - 1; i >= 0; --i) {
      DISCO_CHECK(dims[i] == 1 || src.strides[i] == expected, ValueError)
          << "FromDLPack: tensor of shape " << shape.ToString()
          << " is not compact row-major (stride " << src.strides[i] << " at axis " << i
          << ", expected " << expected << ")";
      expected *= dims[i];
    }
  }
  auto impl = std::make_shared<Impl>();
  impl->shape = std::move(shape);
  impl->dl.dtype = src.dtype;
  impl->dl.device = src.device;
  impl->dl.data = static_cast<char*>(src.data) + src.byte_offset;
  impl->Finish();
  impl->managed = managed;  // ownership taken only once every check passed
  return Tensor(std::move(impl));
}

DLManagedTensor* Tensor::ToDLPack() const {
  DISCO_CHECK(defined(), ValueError) << "ToDLPack of an undefined tensor";
  auto* out = new DLManagedTensor();
  auto* keep = new std::shared_ptr<Impl>(impl_);
  out->dl_tensor = impl_->dl;
  out->dl_tensor.byte_offset = 0;
  out->manager_ctx = keep;
  out->deleter = [](DLManagedTensor* self) {
    delete static_cast<std::shared_ptr<Impl>*>(self->manager_ctx);
    delete self;
  };
  return out;
}

#define DISCO_TENSOR_DEFINED() \
  DISCO_CHECK(impl_ != nullptr, ValueError) << "use of an undefined (default-constructed) Tensor"

const Shape& Tensor::shape() const {
  DISCO_TENSOR_DEFINED();
  return impl_->shape;
}
DLDataType Tensor::dtype() const {
  DISCO_TENSOR_DEFINED();
  return impl_->dl.dtype;
}
DLDevice Tensor::device() const {
  DISCO_TENSOR_DEFINED();
  return impl_->dl.device;
}
void* Tensor::data() const {
  DISCO_TENSOR_DEFINED();
  return impl_->dl.data;
}
int64_t Tensor::numel() const {
  DISCO_TENSOR_DEFINED();
  return impl_->numel;
}
size_t Tensor::nbytes() const {
  DISCO_TENSOR_DEFINED();
  return impl_->nbytes;
}
const DLTensor& Tensor::dl_tensor() const {
  DISCO_TENSOR_DEFINED();
  return impl_->dl;
}

void Tensor::CopyFrom(const Tensor& other) {
  DISCO_TENSOR_DEFINED();
  DISCO_CHECK(other.defined(), ValueError) << "CopyFrom an undefined tensor";
  DISCO_CHECK(dtype() == other.dtype(), ValueError)
      << "CopyFrom: dtype mismatch: destination " << DataTypeToString(dtype()) << ", source "
      << DataTypeToString(other.dtype());
  DISCO_CHECK(numel() == other.numel(), ValueError)
      << "CopyFrom: shape mismatch: destination " << shape().ToString() << ", source "
      << other.shape().ToString();
  memory::Copy(data(), device(), other.data(), other.device(), nbytes());
}

void Tensor::CopyFromBytes(const void* src, size_t n) {
  DISCO_TENSOR_DEFINED();
  DISCO_CHECK(n == nbytes(), ValueError)
      << "CopyFromBytes: " << n << " bytes given for a tensor of " << nbytes() << " bytes";
  memory::Copy(data(), device(), src, CPU(), n);
}

void Tensor::CopyToBytes(void* dst, size_t n) const {
  DISCO_TENSOR_DEFINED();
  DISCO_CHECK(n == nbytes(), ValueError)
      << "CopyToBytes: " << n << " bytes given for a tensor of " << nbytes() << " bytes";
  memory::Copy(dst, CPU(), data(), device(), n);
}

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape().ToString() << ", dtype=" << DataTypeToString(dtype())
     << ", device=" << DeviceToString(device()) << ")";
  return os.str();
}

}  // namespace disco
