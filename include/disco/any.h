/// \file disco/any.h
/// \brief `disco::Any`, the value that crosses between controller and workers, and the reference
/// types it can hold: `DRef` (a remote register), `Function` and opaque worker-local `Object`s.
#ifndef DISCO_ANY_H_
#define DISCO_ANY_H_

#include <disco/error.h>
#include <disco/tensor.h>
#include <disco/types.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

namespace disco {

class Any;

/// A controller-side handle to a register that holds a value on every worker. The register is
/// freed on every worker when the last copy of the DRef goes away.
///
/// Like the session it belongs to, a DRef is used on the controller's thread: its reference count
/// is not atomic (copying one costs an increment, not a locked instruction).
class DRef {
 public:
  DRef() = default;
  DRef(const DRef& other) noexcept : obj_(other.obj_), unowned_reg_(other.unowned_reg_) {
    if (obj_ != nullptr) ++obj_->refs;
  }
  DRef(DRef&& other) noexcept : obj_(other.obj_), unowned_reg_(other.unowned_reg_) {
    other.obj_ = nullptr;
  }
  DRef& operator=(const DRef& other) noexcept {
    DRef copy(other);
    std::swap(obj_, copy.obj_);
    unowned_reg_ = other.unowned_reg_;
    return *this;
  }
  DRef& operator=(DRef&& other) noexcept {
    std::swap(obj_, other.obj_);
    unowned_reg_ = other.unowned_reg_;
    return *this;
  }
  ~DRef() {
    if (obj_ != nullptr && --obj_->refs == 0) Release(obj_);
  }

  /// The register id (0 for an empty DRef).
  int64_t reg_id() const { return obj_ != nullptr ? obj_->reg_id : unowned_reg_; }
  bool defined() const { return obj_ != nullptr || unowned_reg_ != 0; }
  /// Fetches this register's value from `worker` (tensors come back by value, on the host).
  Any DebugGetFromRemote(int worker) const;
  /// Overwrites this register on `worker` with `value`.
  void DebugCopyFrom(int worker, const Any& value) const;

  /// The shared state of a DRef's copies. `session` is the generation of the session that owns
  /// the register (0: owned by none), so a DRef that outlives its session frees nothing.
  struct Obj {
    int64_t reg_id;
    int64_t refs;
    uint64_t session;
  };
  /// A DRef owning register `reg_id` of the session of generation `session`.
  static DRef Make(int64_t reg_id, uint64_t session);
  /// A DRef that names `reg_id` without owning it (what a worker sees on the wire); it allocates
  /// nothing.
  static DRef Unowned(int64_t reg_id) {
    DRef ref;
    ref.unowned_reg_ = reg_id;
    return ref;
  }
  /// The generation of the session that owns the register (0 for none).
  uint64_t session() const { return obj_ != nullptr ? obj_->session : 0; }

 private:
  static void Release(Obj* obj) noexcept;
  Obj* obj_ = nullptr;
  int64_t unowned_reg_ = 0;
};

class Args;
struct FunctionObj;

/// A callable with the packed calling convention. Registered globally with
/// `DISCO_REGISTER_GLOBAL` (see disco/function.h).
class Function {
 public:
  Function() = default;
  explicit Function(std::shared_ptr<FunctionObj> obj) : obj_(std::move(obj)) {}
  bool defined() const { return obj_ != nullptr; }
  /// The name it was registered under ("" for anonymous functions).
  const std::string& name() const;
  /// Calls with `num_args` arguments.
  Any CallPacked(const Any* args, size_t num_args) const;
  template <typename... Ts>
  Any operator()(Ts&&... args) const;
  const std::shared_ptr<FunctionObj>& get() const { return obj_; }

 private:
  std::shared_ptr<FunctionObj> obj_;
};

/// An opaque worker-local object (a communicator, a file handle, a model): it lives in a register
/// and can be passed to functions on the same worker, but never crosses the wire.
class Object {
 public:
  Object() = default;
  template <typename T>
  static Object Make(std::shared_ptr<T> ptr, std::string type_name = typeid(T).name()) {
    Object obj;
    obj.ptr_ = std::move(ptr);
    obj.type_ = std::type_index(typeid(T));
    obj.type_name_ = std::move(type_name);
    return obj;
  }
  bool defined() const { return ptr_ != nullptr; }
  const std::string& type_name() const { return type_name_; }
  /// The object as a T, or nullptr when it holds another type.
  template <typename T>
  std::shared_ptr<T> as() const {
    if (type_ != std::type_index(typeid(T))) return nullptr;
    return std::static_pointer_cast<T>(ptr_);
  }

 private:
  std::shared_ptr<void> ptr_;
  std::type_index type_ = std::type_index(typeid(void));
  std::string type_name_;
};

/// A list of values, held by a register like any value: a worker function returns several
/// tensors as an Array, and it crosses the wire (frames, replies, remote sessions) element by
/// element. Copies share the elements (a Tensor element shares its memory, as a Tensor does).
class Array {
 public:
  Array() = default;
  explicit Array(std::vector<Any> items);
  size_t size() const;
  bool empty() const { return size() == 0; }
  const Any& operator[](size_t i) const;
  const std::vector<Any>& items() const;

 private:
  std::shared_ptr<const std::vector<Any>> items_;
};

/// Values by string key (sorted), held by a register like any value; crosses the wire as Array
/// does.
class Map {
 public:
  Map() = default;
  explicit Map(std::map<std::string, Any> items);
  size_t size() const;
  bool empty() const { return size() == 0; }
  bool contains(const std::string& key) const;
  /// The value at `key`; throws ValueError naming the key when it is missing.
  const Any& at(const std::string& key) const;
  const std::map<std::string, Any>& items() const;

 private:
  std::shared_ptr<const std::map<std::string, Any>> items_;
};

/// Type codes of `Any`; their values are also the wire tags (disco/protocol), so never renumber.
enum class TypeCode : uint8_t {
  kNone = 0,
  kBool = 1,
  kInt = 2,
  kFloat = 3,
  kStr = 4,
  kBytes = 5,
  kDataType = 6,
  kDevice = 7,
  kShape = 8,
  kTensor = 9,
  kDRef = 10,
  kFunction = 11,
  kObject = 12,
  kArray = 13,
  kMap = 14,
};

/// "None", "bool", "int", "float", "string", "bytes", "DataType", "Device", "Shape", "Tensor",
/// "DRef", "Function", "Object", "Array", "Map".
const char* TypeCodeName(TypeCode code);

namespace detail {
template <typename T>
struct TypeNameOf;
}  // namespace detail

/// A dynamically typed value: None, bool, int64, double, string, Bytes, DLDataType, DLDevice,
/// Shape, Tensor, DRef, Function, Object, Array or Map.
class Any {
 public:
  Any() = default;
  Any(std::nullptr_t) {}  // NOLINT(runtime/explicit)
  Any(bool v) : v_(v) {}  // NOLINT(runtime/explicit)
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Any(T v) : v_(CheckedInt(v)) {}               // NOLINT(runtime/explicit)
  Any(double v) : v_(v) {}                      // NOLINT(runtime/explicit)
  Any(float v) : v_(static_cast<double>(v)) {}  // NOLINT(runtime/explicit)
  Any(const char* v) : v_(std::string(v)) {}    // NOLINT(runtime/explicit)
  Any(std::string v) : v_(std::move(v)) {}      // NOLINT(runtime/explicit)
  Any(Bytes v) : v_(std::move(v)) {}            // NOLINT(runtime/explicit)
  Any(DLDataType v) : v_(v) {}                  // NOLINT(runtime/explicit)
  Any(DLDevice v) : v_(v) {}                    // NOLINT(runtime/explicit)
  Any(Shape v) : v_(std::move(v)) {}            // NOLINT(runtime/explicit)
  Any(Tensor v) : v_(std::move(v)) {}           // NOLINT(runtime/explicit)
  Any(DRef v) : v_(std::move(v)) {}             // NOLINT(runtime/explicit)
  Any(Function v) : v_(std::move(v)) {}         // NOLINT(runtime/explicit)
  Any(Object v) : v_(std::move(v)) {}           // NOLINT(runtime/explicit)
  Any(Array v) : v_(std::move(v)) {}            // NOLINT(runtime/explicit)
  Any(Map v) : v_(std::move(v)) {}              // NOLINT(runtime/explicit)
  template <typename T>
  Any(std::optional<T> v) {  // NOLINT(runtime/explicit)
    if (v) *this = Any(std::move(*v));
  }
  /// A std::vector becomes an Array, a std::map with string keys a Map (elements converted).
  template <typename T>
  Any(const std::vector<T>& v) {  // NOLINT(runtime/explicit)
    std::vector<Any> items;
    items.reserve(v.size());
    for (const T& x : v) items.emplace_back(x);
    v_ = Array(std::move(items));
  }
  template <typename T>
  Any(const std::map<std::string, T>& m) {  // NOLINT(runtime/explicit)
    std::map<std::string, Any> items;
    for (const auto& kv : m) items.emplace(kv.first, Any(kv.second));
    v_ = Map(std::move(items));
  }

  TypeCode type_code() const { return static_cast<TypeCode>(v_.index()); }
  const char* type_name() const { return TypeCodeName(type_code()); }
  bool is_none() const { return v_.index() == 0; }

  /// The value as a T, or std::nullopt when the type does not convert. Conversions: bool from
  /// int 0/1, int from bool, integers with a range check, double from int, Bytes from string,
  /// DLDataType from a string such as "float32", std::optional<T> from None, std::vector<T> from
  /// an Array (and std::map<std::string, T> from a Map) whose every element converts.
  template <typename T>
  std::optional<T> as() const;
  /// The value as a T; throws TypeError "expected <T>, got <actual>" (ValueError when an integer
  /// is out of T's range).
  template <typename T>
  T cast() const;

  /// A short printable form: 42, "text", bytes[16], Tensor(shape=..., ...), DRef(3).
  std::string ToString() const;

  /// Direct access to the storage, for the serializer.
  using Storage =
      std::variant<std::monostate, bool, int64_t, double, std::string, Bytes, DLDataType, DLDevice,
                   Shape, Tensor, DRef, Function, Object, Array, Map>;
  const Storage& storage() const { return v_; }

 private:
  template <typename T>
  static int64_t CheckedInt(T v) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      DISCO_CHECK(v <= static_cast<T>(std::numeric_limits<int64_t>::max()), ValueError)
          << "unsigned value " << v << " does not fit in int64";
    }
    return static_cast<int64_t>(v);
  }
  [[noreturn]] void ThrowCastError(const char* expected) const;
  [[noreturn]] static void ThrowRangeError(int64_t v, const char* expected);

  Storage v_;
};

namespace detail {
template <typename T>
struct TypeNameOf {
  static constexpr const char* value = "an unsupported type";
};
#define DISCO_DETAIL_TYPE_NAME(T, name)        \
  template <>                                  \
  struct TypeNameOf<T> {                       \
    static constexpr const char* value = name; \
  };
DISCO_DETAIL_TYPE_NAME(bool, "bool")
DISCO_DETAIL_TYPE_NAME(int8_t, "int")
DISCO_DETAIL_TYPE_NAME(int16_t, "int")
DISCO_DETAIL_TYPE_NAME(int32_t, "int")
DISCO_DETAIL_TYPE_NAME(int64_t, "int")
DISCO_DETAIL_TYPE_NAME(uint8_t, "int")
DISCO_DETAIL_TYPE_NAME(uint16_t, "int")
DISCO_DETAIL_TYPE_NAME(uint32_t, "int")
DISCO_DETAIL_TYPE_NAME(uint64_t, "int")
DISCO_DETAIL_TYPE_NAME(long long, "int")  // NOLINT(runtime/int)
DISCO_DETAIL_TYPE_NAME(float, "float")
DISCO_DETAIL_TYPE_NAME(double, "float")
DISCO_DETAIL_TYPE_NAME(std::string, "string")
DISCO_DETAIL_TYPE_NAME(Bytes, "bytes")
DISCO_DETAIL_TYPE_NAME(DLDataType, "DataType")
DISCO_DETAIL_TYPE_NAME(DLDevice, "Device")
DISCO_DETAIL_TYPE_NAME(Shape, "Shape")
DISCO_DETAIL_TYPE_NAME(Tensor, "Tensor")
DISCO_DETAIL_TYPE_NAME(DRef, "DRef")
DISCO_DETAIL_TYPE_NAME(Function, "Function")
DISCO_DETAIL_TYPE_NAME(Object, "Object")
DISCO_DETAIL_TYPE_NAME(Array, "Array")
DISCO_DETAIL_TYPE_NAME(Map, "Map")
DISCO_DETAIL_TYPE_NAME(Any, "Any")
#undef DISCO_DETAIL_TYPE_NAME
template <typename T>
struct TypeNameOf<std::optional<T>> {
  static constexpr const char* value = TypeNameOf<T>::value;
};

template <typename T>
struct TypeNameOf<std::vector<T>> {
  static constexpr const char* value = "Array";
};
template <typename T>
struct TypeNameOf<std::map<std::string, T>> {
  static constexpr const char* value = "Map";
};

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};
template <typename T>
struct IsStringMap : std::false_type {};
template <typename T>
struct IsStringMap<std::map<std::string, T>> : std::true_type {};

DLDataType ParseDataTypeOrThrow(const std::string& s);
bool TryParseDataType(const std::string& s, DLDataType* out);
}  // namespace detail

template <typename T>
std::optional<T> Any::as() const {
  if constexpr (std::is_same_v<T, Any>) {
    return *this;
  } else if constexpr (detail::IsOptional<T>::value) {
    using Inner = typename T::value_type;
    if (is_none()) return T(std::nullopt);
    std::optional<Inner> inner = as<Inner>();
    if (!inner) return std::nullopt;
    return T(std::move(*inner));
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto* b = std::get_if<bool>(&v_)) return *b;
    if (auto* i = std::get_if<int64_t>(&v_)) {
      if (*i == 0 || *i == 1) return *i != 0;
    }
    return std::nullopt;
  } else if constexpr (std::is_integral_v<T>) {
    int64_t v;
    if (auto* i = std::get_if<int64_t>(&v_)) {
      v = *i;
    } else if (auto* b = std::get_if<bool>(&v_)) {
      v = *b ? 1 : 0;
    } else {
      return std::nullopt;
    }
    if constexpr (std::is_unsigned_v<T>) {
      if (v < 0 || static_cast<uint64_t>(v) > std::numeric_limits<T>::max()) return std::nullopt;
    } else {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return std::nullopt;
      }
    }
    return static_cast<T>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (auto* d = std::get_if<double>(&v_)) return static_cast<T>(*d);
    if (auto* i = std::get_if<int64_t>(&v_)) return static_cast<T>(*i);
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, Bytes>) {
    if (auto* b = std::get_if<Bytes>(&v_)) return *b;
    if (auto* s = std::get_if<std::string>(&v_)) return Bytes(*s);
    return std::nullopt;
  } else if constexpr (detail::IsVector<T>::value) {
    const Array* a = std::get_if<Array>(&v_);
    if (a == nullptr) return std::nullopt;
    T out;
    out.reserve(a->size());
    for (const Any& x : a->items()) {
      auto e = x.as<typename T::value_type>();
      if (!e) return std::nullopt;
      out.push_back(std::move(*e));
    }
    return out;
  } else if constexpr (detail::IsStringMap<T>::value) {
    const Map* m = std::get_if<Map>(&v_);
    if (m == nullptr) return std::nullopt;
    T out;
    for (const auto& kv : m->items()) {
      auto e = kv.second.as<typename T::mapped_type>();
      if (!e) return std::nullopt;
      out.emplace(kv.first, std::move(*e));
    }
    return out;
  } else if constexpr (std::is_same_v<T, DLDataType>) {
    if (auto* d = std::get_if<DLDataType>(&v_)) return *d;
    if (auto* s = std::get_if<std::string>(&v_)) {
      DLDataType out;
      if (detail::TryParseDataType(*s, &out)) return out;
    }
    return std::nullopt;
  } else {
    static_assert(
        std::is_same_v<T, std::string> || std::is_same_v<T, DLDevice> || std::is_same_v<T, Shape> ||
            std::is_same_v<T, Tensor> || std::is_same_v<T, DRef> || std::is_same_v<T, Function> ||
            std::is_same_v<T, Object> || std::is_same_v<T, Array> || std::is_same_v<T, Map>,
        "Any::as<T>: T is not a type Any can hold");
    if (auto* p = std::get_if<T>(&v_)) return *p;
    return std::nullopt;
  }
}

template <typename T>
T Any::cast() const {
  std::optional<T> r = as<T>();
  if (r) return std::move(*r);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (auto* i = std::get_if<int64_t>(&v_)) ThrowRangeError(*i, detail::TypeNameOf<T>::value);
  }
  ThrowCastError(detail::TypeNameOf<T>::value);
}

inline Array::Array(std::vector<Any> items)
    : items_(std::make_shared<const std::vector<Any>>(std::move(items))) {}
inline size_t Array::size() const { return items_ ? items_->size() : 0; }
inline const std::vector<Any>& Array::items() const {
  static const std::vector<Any> kEmpty;
  return items_ ? *items_ : kEmpty;
}
inline const Any& Array::operator[](size_t i) const {
  DISCO_CHECK(i < size(), ValueError)
      << "Array index " << i << " out of range (size " << size() << ")";
  return (*items_)[i];
}

inline Map::Map(std::map<std::string, Any> items)
    : items_(std::make_shared<const std::map<std::string, Any>>(std::move(items))) {}
inline size_t Map::size() const { return items_ ? items_->size() : 0; }
inline const std::map<std::string, Any>& Map::items() const {
  static const std::map<std::string, Any> kEmpty;
  return items_ ? *items_ : kEmpty;
}
inline bool Map::contains(const std::string& key) const { return items().count(key) != 0; }
inline const Any& Map::at(const std::string& key) const {
  auto it = items().find(key);
  DISCO_CHECK(it != items().end(), ValueError) << "Map has no key '" << key << "'";
  return it->second;
}

}  // namespace disco

#endif  // DISCO_ANY_H_
