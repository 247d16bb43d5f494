#include "convert.h"

#include <disco/error.h>

#include <cstring>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

namespace disco {
namespace python {

namespace {

constexpr const char* kPythonObjectType = "python object";

// A strong reference to a Python object that may be dropped without the GIL (a register freed by
// the worker loop): the GIL is taken to release it, and nothing is done once Python has ended.
struct PyRef {
  explicit PyRef(py::handle h) : obj(h.ptr()) { Py_XINCREF(obj); }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() {
    if (obj == nullptr || !Py_IsInitialized()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(obj);
    PyGILState_Release(state);
  }
  PyObject* obj;
};

// A numpy array lent to a disco Tensor (DLPack without the capsule: the array itself is held).
struct NumpyLease {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  PyRef array;
  explicit NumpyLease(py::handle a) : array(a) {}
};

// The dtype's size in bytes, asked of numpy in Python: pybind11 before 2.12 reads it from the
// descriptor struct, whose layout numpy 2 changed (it reads 0 there: a venv's numpy 2).
py::ssize_t ItemSize(const py::dtype& dt) { return dt.attr("itemsize").cast<py::ssize_t>(); }

DLDataType FromNumpyDType(const py::dtype& dt, const char* what) {
  const char kind = dt.kind();
  const auto bits = static_cast<uint8_t>(ItemSize(dt) * 8);
  switch (kind) {
    case 'f':
      return DLDataType{kDLFloat, bits, 1};
    case 'i':
      return DLDataType{kDLInt, bits, 1};
    case 'u':
      return DLDataType{kDLUInt, bits, 1};
    case 'c':
      return DLDataType{kDLComplex, bits, 1};
    default:
      break;
  }
  const std::string name = py::str(static_cast<const py::handle&>(dt));
  DISCO_THROW(TypeError) << what << ": numpy dtype " << name
                         << " has no disco data type (floats, ints, uints and complex only; "
                            "pass bool arrays as uint8)";
}

py::dtype ToNumpyDType(DLDataType t) {
  const std::string bits = std::to_string(t.bits);
  DISCO_CHECK(t.lanes == 1, TypeError)
      << "a " << DataTypeToString(t) << " tensor has no numpy dtype (vector lanes)";
  switch (t.code) {
    case kDLFloat:
      return py::dtype("float" + bits);
    case kDLInt:
      return py::dtype("int" + bits);
    case kDLUInt:
      return py::dtype("uint" + bits);
    case kDLBfloat:
      return py::dtype("uint16");  // numpy has no bfloat16: the raw bits
    case kDLComplex:
      return py::dtype("complex" + bits);
    default:
      break;
  }
  DISCO_THROW(TypeError) << "a " << DataTypeToString(t) << " tensor has no numpy dtype";
}

// Whether numpy's byte-order character `order` ('=', '|', '<' or '>') is this machine's.
bool IsNativeOrder(char order) {
  const uint16_t probe = 1;
  const bool little = *reinterpret_cast<const uint8_t*>(&probe) == 1;
  return order != (little ? '>' : '<');
}

// A Tensor sharing `array`'s memory, or a compact native copy of it when it is read-only,
// strided or in the other byte order (numpy's DLPack refuses that order; disco's tensors are
// native), or when `own` asks for one: `*copied` says which.
Tensor FromNumpy(py::array array, bool own, bool* copied) {
  constexpr int kNeed = py::array::c_style;
  *copied = false;
  if (own && (array.flags() & kNeed) && IsNativeOrder(array.dtype().byteorder())) {
    // A copy of a compact array: straight from its buffer, without lending the array.
    std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
    Tensor t = Tensor::Empty(Shape(std::move(dims)), FromNumpyDType(array.dtype(), "array"), CPU());
    std::memcpy(t.data(), array.data(), t.nbytes());
    *copied = true;
    return t;
  }
  if (!IsNativeOrder(array.dtype().byteorder())) {
    // The values, converted (a byte-swapped copy): never the raw bytes reinterpreted.
    py::object native = array.dtype().attr("newbyteorder")("=");
    array = py::array::ensure(array.attr("astype")(native, py::arg("order") = "C"));
    *copied = true;
  } else if (!(array.flags() & kNeed) || !array.writeable()) {
    // Read-only or strided: the tensor gets a compact copy of its own.
    array = py::array::ensure(py::module_::import("numpy").attr("array")(
        array, py::arg("copy") = true, py::arg("order") = "C"));
    *copied = true;
  }
  DLDataType dtype = FromNumpyDType(array.dtype(), "array");
  auto lease = std::make_unique<NumpyLease>(array);
  lease->shape.assign(array.shape(), array.shape() + array.ndim());
  DLTensor& dl = lease->managed.dl_tensor;
  dl.data = array.mutable_data();
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int32_t>(array.ndim());
  dl.dtype = dtype;
  dl.shape = lease->shape.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  lease->managed.manager_ctx = lease.get();
  lease->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<NumpyLease*>(self->manager_ctx);
  };
  Tensor t = Tensor::FromDLPack(&lease->managed);
  lease.release();  // owned by the tensor now
  return t;
}

// Whether a DLPack tensor is compact row-major (what disco's tensors are).
bool IsCompact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] == 0) return true;  // empty: nothing to lay out
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// Copies the host DLPack tensor `src` (any strides, negative ones included) into the compact
// row-major buffer `dst`, a row of the innermost axis at a time.
void CopyStrided(const DLTensor& src, char* dst) {
  const size_t elem = (static_cast<size_t>(src.dtype.bits) * src.dtype.lanes + 7) / 8;
  const char* base = static_cast<const char*>(src.data) + src.byte_offset;
  const int nd = src.ndim;
  for (int i = 0; i < nd; ++i) {
    if (src.shape[i] == 0) return;
  }
  if (nd == 0) {
    std::memcpy(dst, base, elem);
    return;
  }
  const int64_t inner = src.shape[nd - 1];
  const int64_t inner_stride = src.strides[nd - 1];
  std::vector<int64_t> index(static_cast<size_t>(nd), 0);
  for (;;) {
    int64_t offset = 0;
    for (int i = 0; i < nd - 1; ++i) offset += index[i] * src.strides[i];
    const char* row = base + offset * static_cast<int64_t>(elem);
    if (inner_stride == 1) {
      std::memcpy(dst, row, static_cast<size_t>(inner) * elem);
      dst += static_cast<size_t>(inner) * elem;
    } else {
      for (int64_t j = 0; j < inner; ++j, dst += elem) {
        std::memcpy(dst, row + j * inner_stride * static_cast<int64_t>(elem), elem);
      }
    }
    int axis = nd - 2;
    for (; axis >= 0; --axis) {
      if (++index[axis] < src.shape[axis]) break;
      index[axis] = 0;
    }
    if (axis < 0) return;
  }
}

// A Tensor for a DLPack producer: sharing its memory when it is compact, else (host memory) a
// compact copy, as for a strided numpy array (`*copied`). `in_place`: a destination, never copied.
Tensor FromDLPackProducer(py::handle obj, bool* copied, const char* in_place = nullptr) {
  py::object capsule = obj.attr("__dlpack__")();
  PyObject* cap = capsule.ptr();
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  PyCapsule_SetName(cap, "used_dltensor");
  *copied = false;
  try {
    const DLTensor& dl = managed->dl_tensor;
    const bool host = dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost;
    if (dl.ndim >= 0 && dl.ndim <= 64 && (dl.ndim == 0 || dl.shape != nullptr) && !IsCompact(dl)) {
      DISCO_CHECK(in_place == nullptr, ValueError)
          << in_place << ": the tensor is not contiguous, and it is written in place (pass a "
          << "contiguous one, e.g. t.contiguous())";
      if (host) {
        Tensor compact = Tensor::Empty(Shape(std::vector<int64_t>(dl.shape, dl.shape + dl.ndim)),
                                       dl.dtype, CPU());
        CopyStrided(dl, static_cast<char*>(compact.data()));
        if (managed->deleter != nullptr) managed->deleter(managed);
        *copied = true;
        return compact;
      }
    }
    return Tensor::FromDLPack(managed);  // a device tensor that is not compact is refused here
  } catch (...) {
    if (managed->deleter != nullptr) managed->deleter(managed);
    throw;
  }
}

// A copy of `t` in memory of its own, on the same device.
Tensor OwnCopy(const Tensor& t) {
  Tensor copy = Tensor::Empty(t.shape(), t.dtype(), t.device());
  copy.CopyFrom(t);
  return copy;
}

// ToTensor, and whether the result is a private copy already (`own`: a numpy array is copied).
std::optional<Tensor> ToTensorCopied(py::handle obj, bool own, bool* copied) {
  *copied = false;
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (py::isinstance<py::array>(obj)) {
    return FromNumpy(py::reinterpret_borrow<py::array>(obj), own, copied);
  }
  if (py::hasattr(obj, "__dlpack__")) return FromDLPackProducer(obj, copied);
  return std::nullopt;
}

bool IsPlainInt(py::handle h) { return PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr()); }

int64_t ToInt64(py::handle h) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);  // NOLINT(runtime/int)
  if (overflow != 0) {
    DISCO_THROW(ValueError) << "integer " << std::string(py::str(h)) << " does not fit in int64";
  }
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<int64_t>(v);
}

Any SequenceToAny(py::sequence seq, bool own_tensors) {
  bool all_ints = true;
  for (py::handle item : seq) all_ints = all_ints && IsPlainInt(item);
  if (all_ints) {
    std::vector<int64_t> dims;
    dims.reserve(seq.size());
    for (py::handle item : seq) dims.push_back(ToInt64(item));
    return Any(Shape(std::move(dims)));
  }
  std::vector<Any> items;
  items.reserve(seq.size());
  for (py::handle item : seq) items.push_back(ToAny(item, own_tensors));
  return Any(Array(std::move(items)));
}

}  // namespace

std::optional<Tensor> ToTensor(py::handle obj) {
  bool copied = false;
  return ToTensorCopied(obj, /*own=*/false, &copied);
}

Tensor ToTensorOrThrow(py::handle obj, const char* what) {
  std::optional<Tensor> t = ToTensor(obj);
  DISCO_CHECK(t.has_value(), TypeError)
      << what << ": expected a tensor (numpy array, disco.Tensor or a DLPack producer), got "
      << std::string(py::str(py::type::of(obj).attr("__name__")));
  return *t;
}

Tensor ToTensorInPlace(py::handle obj, const char* what) {
  if (py::isinstance<py::array>(obj)) {
    auto a = py::reinterpret_borrow<py::array>(obj);
    DISCO_CHECK(a.writeable() && (a.flags() & py::array::c_style), ValueError)
        << what << ": the numpy array must be writeable and C-contiguous (it is written in place)";
    DISCO_CHECK(IsNativeOrder(a.dtype().byteorder()), ValueError)
        << what << ": the numpy array is not in native byte order (it is written in place)";
  }
  if (!py::isinstance<Tensor>(obj) && !py::isinstance<py::array>(obj) &&
      py::hasattr(obj, "__dlpack__")) {
    bool copied = false;
    return FromDLPackProducer(obj, &copied, what);
  }
  return ToTensorOrThrow(obj, what);
}

py::array TensorToNumpy(const Tensor& t) {
  DISCO_CHECK(t.defined(), ValueError) << "an undefined tensor has no numpy view";
  DISCO_CHECK(t.device().device_type == kDLCPU || t.device().device_type == kDLCUDAHost, TypeError)
      << "a tensor on " << DeviceToString(t.device())
      << " has no numpy view (copy it to the host first)";
  py::dtype dt = ToNumpyDType(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = ItemSize(dt);
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  // The array's base holds the tensor, so the memory lives as long as either.
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, strides, t.data(), base);
}

DLDevice ToDevice(py::handle obj) {
  if (obj.is_none()) return CPU();
  if (py::isinstance<DLDevice>(obj)) return obj.cast<DLDevice>();
  if (py::isinstance<py::str>(obj)) {
    std::string s = obj.cast<std::string>();
    if (s == "cpu") return CPU();
    if (s == "cuda") return ThisWorkerGpu();
    if (s.rfind("cuda:", 0) == 0) {
      try {
        size_t used = 0;
        int id = std::stoi(s.substr(5), &used);
        if (used == s.size() - 5) return CUDA(id);
      } catch (const std::exception&) {
      }
    }
    DISCO_THROW(ValueError) << "device '" << s
                            << "': expected 'cpu', 'cuda' (each worker's own GPU) or 'cuda:N'";
  }
  const std::string type = py::str(py::type::of(obj).attr("__name__"));
  DISCO_THROW(TypeError) << "device: expected a disco.Device or a string, got " << type;
}

DLDataType ToDataType(py::handle obj) {
  if (py::isinstance<py::str>(obj)) return DataType(obj.cast<std::string>());
  py::object np = py::module_::import("numpy");
  if (py::isinstance(obj, np.attr("dtype")) || py::isinstance<py::type>(obj)) {
    return FromNumpyDType(py::dtype::from_args(py::reinterpret_borrow<py::object>(obj)), "dtype");
  }
  const std::string type = py::str(py::type::of(obj).attr("__name__"));
  DISCO_THROW(TypeError) << "dtype: expected a string such as 'float32' or a numpy dtype, got "
                         << type;
}

Any ToAny(py::handle obj, bool own_tensors) {
  PyObject* p = obj.ptr();
  if (p == Py_None) return Any();
  if (PyBool_Check(p)) return Any(p == Py_True);
  if (PyLong_Check(p)) return Any(ToInt64(obj));
  if (PyFloat_Check(p)) return Any(PyFloat_AS_DOUBLE(p));
  if (PyUnicode_Check(p)) {
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(p, &size);  // cached by str itself: no copy
    if (utf8 == nullptr) throw py::error_already_set();
    return Any(std::string(utf8, static_cast<size_t>(size)));
  }
  if (PyBytes_Check(p)) {
    char* data = nullptr;
    Py_ssize_t size = 0;
    PyBytes_AsStringAndSize(p, &data, &size);
    return Any(Bytes(data, static_cast<size_t>(size)));
  }
  if (py::isinstance<PyDRef>(obj)) return Any(obj.cast<const PyDRef&>().ref);
  if (py::isinstance<DLDevice>(obj)) return Any(obj.cast<DLDevice>());
  bool copied = false;
  if (std::optional<Tensor> t = ToTensorCopied(obj, own_tensors, &copied)) {
    return Any(own_tensors && !copied ? OwnCopy(*t) : std::move(*t));
  }
  if (PyTuple_Check(p) || PyList_Check(p)) {
    return SequenceToAny(py::reinterpret_borrow<py::sequence>(obj), own_tensors);
  }
  if (PyDict_Check(p)) {
    std::map<std::string, Any> items;
    for (auto kv : py::reinterpret_borrow<py::dict>(obj)) {
      DISCO_CHECK(py::isinstance<py::str>(kv.first), TypeError)
          << "dict keys must be strings to become a disco Map, got "
          << std::string(py::str(py::type::of(kv.first).attr("__name__")));
      items.emplace(kv.first.cast<std::string>(), ToAny(kv.second, own_tensors));
    }
    return Any(Map(std::move(items)));
  }
  // numpy scalars and other numbers.
  py::object np = py::module_::import("numpy");
  if (py::isinstance(obj, np.attr("bool_"))) return Any(obj.cast<bool>());
  if (py::isinstance(obj, np.attr("integer"))) {
    PyObject* index = PyNumber_Index(obj.ptr());
    if (index == nullptr) throw py::error_already_set();
    return Any(ToInt64(py::reinterpret_steal<py::object>(index)));
  }
  if (py::isinstance(obj, np.attr("floating"))) return Any(obj.cast<double>());
  if (py::isinstance(obj, np.attr("dtype"))) return Any(ToDataType(obj));
  return Any(Object::Make(std::make_shared<PyRef>(obj), kPythonObjectType));
}

py::object FromAny(const Any& value, bool host_tensors_as_numpy) {
  const Any::Storage& s = value.storage();
  switch (value.type_code()) {
    case TypeCode::kNone:
      return py::none();
    case TypeCode::kBool:
      return py::bool_(std::get<bool>(s));
    case TypeCode::kInt:
      return py::int_(std::get<int64_t>(s));
    case TypeCode::kFloat:
      return py::float_(std::get<double>(s));
    case TypeCode::kStr:
      return py::str(std::get<std::string>(s));
    case TypeCode::kBytes: {
      const Bytes& b = std::get<Bytes>(s);
      return py::bytes(b.data(), b.size());
    }
    case TypeCode::kDataType:
      return py::str(DataTypeToString(std::get<DLDataType>(s)));
    case TypeCode::kDevice:
      return py::cast(std::get<DLDevice>(s));
    case TypeCode::kShape: {
      const Shape& shape = std::get<Shape>(s);
      py::tuple out(shape.size());
      for (size_t i = 0; i < shape.size(); ++i) out[i] = py::int_(shape[i]);
      return std::move(out);
    }
    case TypeCode::kTensor: {
      const Tensor& t = std::get<Tensor>(s);
      if (!t.defined()) return py::none();
      if (host_tensors_as_numpy &&
          (t.device().device_type == kDLCPU || t.device().device_type == kDLCUDAHost)) {
        return TensorToNumpy(t);
      }
      return py::cast(t);
    }
    case TypeCode::kDRef:
      return py::cast(PyDRef(std::get<DRef>(s), nullptr));
    case TypeCode::kFunction: {
      Function f = std::get<Function>(s);
      return py::cpp_function([f](py::args args) {
        std::vector<Any> packed;
        packed.reserve(args.size());
        for (py::handle a : args) packed.push_back(ToAny(a));
        Any rv;
        {
          py::gil_scoped_release release;
          rv = f.CallPacked(packed.data(), packed.size());
        }
        return FromAny(rv);
      });
    }
    case TypeCode::kObject: {
      const Object& o = std::get<Object>(s);
      if (auto ref = o.as<PyRef>()) return py::reinterpret_borrow<py::object>(ref->obj);
      return py::str("<disco object " + o.type_name() + ">");
    }
    case TypeCode::kArray: {
      const std::vector<Any>& items = std::get<Array>(s).items();
      py::tuple out(items.size());
      for (size_t i = 0; i < items.size(); ++i) out[i] = FromAny(items[i], host_tensors_as_numpy);
      return std::move(out);
    }
    case TypeCode::kMap: {
      py::dict out;
      for (const auto& kv : std::get<Map>(s).items()) {
        out[py::str(kv.first)] = FromAny(kv.second, host_tensors_as_numpy);
      }
      return std::move(out);
    }
  }
  DISCO_THROW(InternalError) << "unknown type code " << static_cast<int>(value.type_code());
}

std::string FormatPythonError(py::error_already_set& e, int max_lines) {
  std::string text;
  try {
    py::object tb = py::module_::import("traceback");
    py::list parts = tb.attr("format_exception")(e.type(), e.value(), e.trace());
    for (py::handle part : parts) text += part.cast<std::string>();
  } catch (const std::exception&) {
    text = e.what();
  }
  // Keep the last `max_lines` lines: the innermost frames and the exception itself.
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  size_t first = lines.size() > static_cast<size_t>(max_lines) ? lines.size() - max_lines : 0;
  std::string out;
  for (size_t i = first; i < lines.size(); ++i) {
    if (!out.empty()) out += "\n";
    out += lines[i];
  }
  return out;
}

}  // namespace python
}  // namespace disco
