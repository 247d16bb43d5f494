#include <disco/any.h>
#include <disco/function.h>

#include <cmath>
#include <sstream>

namespace disco {

const char* TypeCodeName(TypeCode code) {
  switch (code) {
    case TypeCode::kNone:
      return "None";
    case TypeCode::kBool:
      return "bool";
    case TypeCode::kInt:
      return "int";
    case TypeCode::kFloat:
      return "float";
    case TypeCode::kStr:
      return "string";
    case TypeCode::kBytes:
      return "bytes";
    case TypeCode::kDataType:
      return "DataType";
    case TypeCode::kDevice:
      return "Device";
    case TypeCode::kShape:
      return "Shape";
    case TypeCode::kTensor:
      return "Tensor";
    case TypeCode::kDRef:
      return "DRef";
    case TypeCode::kFunction:
      return "Function";
    case TypeCode::kObject:
      return "Object";
    case TypeCode::kArray:
      return "Array";
    case TypeCode::kMap:
      return "Map";
  }
  return "unknown";
}

void Any::ThrowCastError(const char* expected) const {
  DISCO_THROW(TypeError) << "expected " << expected << ", got " << type_name();
}

void Any::ThrowRangeError(int64_t v, const char* expected) {
  DISCO_THROW(ValueError) << "expected " << expected << ", got int " << v
                          << " which is out of the target type's range";
}

std::string Any::ToString() const {
  std::ostringstream os;
  struct Visitor {
    std::ostringstream& os;
    void operator()(std::monostate) { os << "None"; }
    void operator()(bool b) { os << (b ? "True" : "False"); }
    void operator()(int64_t i) { os << i; }
    void operator()(double d) { os << d; }
    void operator()(const std::string& s) {
      os << '"' << (s.size() > 64 ? s.substr(0, 64) + "..." : s) << '"';
    }
    void operator()(const Bytes& b) { os << "bytes[" << b.size() << "]"; }
    void operator()(DLDataType t) { os << DataTypeToString(t); }
    void operator()(DLDevice d) { os << DeviceToString(d); }
    void operator()(const Shape& s) { os << "Shape" << s.ToString(); }
    void operator()(const Tensor& t) { os << t.ToString(); }
    void operator()(const DRef& r) { os << "DRef(" << r.reg_id() << ")"; }
    void operator()(const Function& f) {
      os << "Function(" << (f.defined() && !f.name().empty() ? f.name() : "anonymous") << ")";
    }
    void operator()(const Object& o) { os << "Object(" << o.type_name() << ")"; }
    void operator()(const Array& a) {
      os << "[";
      for (size_t i = 0; i < a.size() && i < 8; ++i) os << (i ? ", " : "") << a[i].ToString();
      os << (a.size() > 8 ? ", ... (" + std::to_string(a.size()) + " items)]" : "]");
    }
    void operator()(const Map& m) {
      os << "{";
      size_t i = 0;
      for (const auto& kv : m.items()) {
        if (i == 8) {
          os << ", ... (" << m.size() << " items)";
          break;
        }
        os << (i++ ? ", " : "") << '"' << kv.first << "\": " << kv.second.ToString();
      }
      os << "}";
    }
  };
  std::visit(Visitor{os}, v_);
  return os.str();
}

const std::string& Function::name() const {
  static const std::string kEmpty;
  return obj_ ? obj_->name : kEmpty;
}

Any Function::CallPacked(const Any* args, size_t num_args) const {
  DISCO_CHECK(obj_ != nullptr, ValueError) << "call of an undefined Function";
  Any rv;
  obj_->body(Args(args, num_args), &rv);
  return rv;
}

Function MakeFunction(PackedBody body, std::string name) {
  auto obj = std::make_shared<FunctionObj>();
  obj->name = std::move(name);
  obj->body = std::move(body);
  return Function(std::move(obj));
}

}  // namespace disco
