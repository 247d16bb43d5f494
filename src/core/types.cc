#include <disco/any.h>
#include <disco/error.h>
#include <disco/types.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace disco {
namespace detail {

bool TryParseDataType(const std::string& s, DLDataType* out) {
  struct Prefix {
    const char* name;
    uint8_t code;
  };
  static const Prefix kPrefixes[] = {{"bfloat", kDLBfloat},
                                     {"float", kDLFloat},
                                     {"uint", kDLUInt},
                                     {"int", kDLInt},
                                     {"complex", kDLComplex}};
  for (const Prefix& p : kPrefixes) {
    size_t n = std::string(p.name).size();
    if (s.compare(0, n, p.name) != 0) continue;
    std::string rest = s.substr(n);
    uint16_t lanes = 1;
    size_t x = rest.find('x');
    if (x != std::string::npos) {
      std::string lane_text = rest.substr(x + 1);
      rest = rest.substr(0, x);
      if (lane_text.empty() || lane_text.size() > 5 ||
          lane_text.find_first_not_of("0123456789") != std::string::npos) {
        return false;
      }
      long l = std::strtol(lane_text.c_str(), nullptr, 10);  // NOLINT(runtime/int)
      if (l < 1 || l > 65535) return false;
      lanes = static_cast<uint16_t>(l);
    }
    if (rest.empty() || rest.size() > 3 ||
        rest.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    long bits = std::strtol(rest.c_str(), nullptr, 10);  // NOLINT(runtime/int)
    bool ok = false;
    switch (p.code) {
      case kDLInt:
      case kDLUInt:
        ok = bits == 8 || bits == 16 || bits == 32 || bits == 64;
        break;
      case kDLFloat:
        ok = bits == 16 || bits == 32 || bits == 64;
        break;
      case kDLBfloat:
        ok = bits == 16;
        break;
      case kDLComplex:
        ok = bits == 64 || bits == 128;
        break;
    }
    if (!ok) return false;
    *out = DLDataType{p.code, static_cast<uint8_t>(bits), lanes};
    return true;
  }
  return false;
}

DLDataType ParseDataTypeOrThrow(const std::string& s) {
  // TVM's "bool" is a 1-bit type: no tensor of it can be addressed by bytes. Say so at once.
  DISCO_CHECK(s != "bool", ValueError)
      << "'bool' is not a data type disco tensors hold (1-bit elements are not addressable by "
         "bytes); use uint8 (or int8) for flags";
  DLDataType out;
  DISCO_CHECK(TryParseDataType(s, &out), ValueError)
      << "'" << s
      << "' is not a data type (expected e.g. int8, uint32, float16, bfloat16, float32)";
  return out;
}

}  // namespace detail

DLDataType DataType(const std::string& name) { return detail::ParseDataTypeOrThrow(name); }

std::string DataTypeToString(DLDataType dtype) {
  std::string base;
  if (dtype.code == kDLUInt && dtype.bits == 1) {
    base = "bool";
  } else {
    switch (dtype.code) {
      case kDLInt:
        base = "int";
        break;
      case kDLUInt:
        base = "uint";
        break;
      case kDLFloat:
        base = "float";
        break;
      case kDLBfloat:
        base = "bfloat";
        break;
      case kDLComplex:
        base = "complex";
        break;
      case kDLOpaqueHandle:
        base = "handle";
        break;
      default:
        base = "code" + std::to_string(dtype.code) + "_";
    }
    base += std::to_string(dtype.bits);
  }
  if (dtype.lanes != 1) base += "x" + std::to_string(dtype.lanes);
  return base;
}

size_t DataTypeBytes(DLDataType dtype) {
  return (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8;
}

DLDevice CPU() { return DLDevice{kDLCPU, 0}; }
DLDevice CUDA(int index) {
  DISCO_CHECK(index >= 0, ValueError) << "CUDA device index must be >= 0, got " << index;
  return DLDevice{kDLCUDA, index};
}

DLDevice ThisWorkerGpu() { return DLDevice{kDLCUDA, -1}; }

std::string DeviceToString(DLDevice device) {
  switch (device.device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda:" + std::to_string(device.device_id);
    case kDLCUDAHost:
      return "cuda_host";
    default:
      return "device_type" + std::to_string(static_cast<int>(device.device_type)) + ":" +
             std::to_string(device.device_id);
  }
}

namespace detail {
BytesBlock* BytesBlock::Create(size_t size) {
  DISCO_CHECK(size <= SIZE_MAX - sizeof(BytesBlock), ValueError)
      << "a byte string of " << size << " bytes is too large";
  void* raw = ::operator new(sizeof(BytesBlock) + size);
  auto* block = new (raw) BytesBlock{};
  block->refs.store(1, std::memory_order_relaxed);
  block->size = size;
  return block;
}

void BytesBlock::Release() noexcept {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    this->~BytesBlock();
    ::operator delete(this);
  }
}
}  // namespace detail

Bytes::Bytes(const void* data, size_t size) : size_(size), inline_(size <= kInlineBytes) {
  if (inline_) {
    if (size != 0) std::memcpy(small_, data, size);
    return;
  }
  block_ = detail::BytesBlock::Create(size);
  std::memcpy(block_->data(), data, size);
}

Bytes Bytes::Allocate(size_t size, char** data) {
  Bytes b;
  if (size == 0) {
    *data = nullptr;
    return b;
  }
  b.block_ = detail::BytesBlock::Create(size);  // uninitialized: filled by the caller
  b.inline_ = false;
  b.size_ = size;
  *data = b.block_->data();
  return b;
}

bool Bytes::operator==(const Bytes& other) const {
  return size_ == other.size_ && (size_ == 0 || std::memcmp(data(), other.data(), size_) == 0);
}

int64_t Shape::Numel() const {
  for (int64_t d : dims_) {
    DISCO_CHECK(d >= 0, ValueError) << "shape " << ToString() << " has a negative extent";
    if (d == 0) return 0;  // whatever the other extents are
  }
  int64_t n = 1;
  for (int64_t d : dims_) {
    DISCO_CHECK(d == 0 || n <= INT64_MAX / d, ValueError)
        << "shape " << ToString() << " has more than 2^63 elements";
    n *= d;
  }
  return n;
}

std::string Shape::ToString() const {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) os << ", ";
    os << dims_[i];
  }
  if (dims_.size() == 1) os << ",";
  os << ")";
  return os.str();
}

}  // namespace disco
