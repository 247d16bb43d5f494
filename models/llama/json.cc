#include "llama/json.h"

#include <disco/error.h>

#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

namespace llama {
namespace {

using StringPtr = std::unique_ptr<std::string>;
using ArrayPtr = std::unique_ptr<std::vector<Json>>;
using ObjectPtr = std::unique_ptr<std::map<std::string, Json>>;

template <typename T>
struct IsUniquePtr : std::false_type {};
template <typename T>
struct IsUniquePtr<std::unique_ptr<T>> : std::true_type {};

// Text from the input shown in an error: bytes outside printable ASCII as \xNN.
std::string Printable(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) {
      out.push_back(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(u));
      out += buf;
    }
  }
  return out;
}

// "an array", "a number", ...: the kind of `v` in a sentence.
std::string WithArticle(const Json& v) {
  const std::string kind = v.kind_name();
  return (kind == "array" || kind == "object" ? "an " : "a ") + kind;
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column
// 5: " prefix (the caller names the byte).
std::string Why(const nlohmann::detail::exception& e) {
  std::string s = e.what();
  if (size_t p = s.find("] "); s.rfind("[json.exception.", 0) == 0 && p != std::string::npos) {
    s = s.substr(p + 2);
  }
  if (s.rfind("parse error", 0) == 0) {
    if (size_t p = s.find(": "); p != std::string::npos) s = s.substr(p + 2);
  }
  return Printable(s);
}

// A pointer into the text that records how far the parser has read: the byte offset of the
// refusals the builder makes (nlohmann passes its own errors' offset).
class TrackedPointer {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedPointer(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const { return *p_; }
  TrackedPointer& operator++() {
    *furthest_ = ++p_;
    return *this;
  }
  bool operator==(const TrackedPointer& o) const { return p_ == o.p_; }
  bool operator!=(const TrackedPointer& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char** furthest_;
};

nlohmann::json ToNlohmann(const Json& j) {
  switch (j.kind()) {
    case Json::Kind::kNull:
      return nullptr;
    case Json::Kind::kBool:
      return j.as_bool();
    case Json::Kind::kNumber:
      if (j.is_int()) return j.as_int();
      return j.as_double();
    case Json::Kind::kString:
      return j.as_string();
    case Json::Kind::kArray: {
      nlohmann::json a = nlohmann::json::array();
      for (const Json& v : j.items()) a.push_back(ToNlohmann(v));
      return a;
    }
    case Json::Kind::kObject: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& [k, v] : j.members()) o[k] = ToNlohmann(v);
      return o;
    }
  }
  return nullptr;
}

}  // namespace

// Receives nlohmann's parse events (its SAX interface) and builds the tree, refusing what passes
// the limits, a duplicate key and, for a safetensors header, what the format does not allow, as
// soon as it is read.
class Json::Builder {
 public:
  Builder(const std::string& what, const JsonLimits& limits, bool header, const char* begin,
          const char* const* read)
      : what_(what), limits_(limits), header_(header), begin_(begin), read_(read) {}

  Json Take() { return std::move(root_); }

  // The events (nlohmann::json_sax); each returns true (go on) or throws.
  bool null() { return Add(Json()); }
  bool boolean(bool v) { return Add(Json::Bool(v)); }
  bool number_integer(int64_t v) { return Add(Json::Int(v)); }
  bool number_unsigned(uint64_t v) {
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Add(Json::Int(static_cast<int64_t>(v)));
    }
    return Add(Json::Number(static_cast<double>(v)));
  }
  // A number written with a fraction or an exponent stays a double, integral or not: config.json's
  // sizes must be written as integers ("hidden_size": 16.0 is refused, naming the key).
  bool number_float(double v, const std::string& /*literal*/) {
    Json j;
    j.v_ = v;
    return Add(std::move(j));
  }
  bool string(std::string& v) {
    if (InMetadata()) return true;  // a string in __metadata__: checked (nlohmann), dropped
    return Add(Json::String(std::move(v)));
  }
  bool binary(nlohmann::json::binary_t& /*v*/) { Fail("binary data is not JSON"); }
  bool start_object(size_t /*elements*/) { return Open(Json::Object()); }
  bool start_array(size_t /*elements*/) { return Open(Json::Array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(std::string& k) {
    const Json* object = stack_.back().container;
    if (object != nullptr && object->Find(k) != nullptr) {
      Fail("duplicate key \"" + Printable(k) + "\"");
    }
    key_ = k;  // a copy: the parser keeps its buffer, and key_ its capacity in __metadata__
    return true;
  }
  bool parse_error(size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    DISCO_THROW(ValueError) << what_ << ": byte " << position << ": " << Why(e);
  }

 private:
  // An open array or object; `container` is nullptr for a safetensors header's __metadata__,
  // whose strings are checked and dropped.
  struct Level {
    Json* container;
    bool metadata;
  };

  [[noreturn]] void Fail(const std::string& why) const {
    DISCO_THROW(ValueError) << what_ << ": byte " << (*read_ - begin_) << ": " << why;
  }

  // The value's depth is stack_.size(): 0 for the document, 1 for the members of the top object.
  void Check(const Json& v) {
    const size_t depth = stack_.size();
    if (depth > static_cast<size_t>(limits_.max_depth)) {
      Fail("nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    if (++values_ > limits_.max_values) {
      Fail("the document holds more than " + std::to_string(limits_.max_values) + " values");
    }
    if (header_) CheckHeader(v, depth);
  }

  // The safetensors format: {"__metadata__": {string: string}, tensor: {dtype, shape,
  // data_offsets}, ...}; a few values per tensor.
  void CheckHeader(const Json& v, size_t depth) {
    if (depth == 0 && !v.is_object()) {
      Fail("the safetensors header is " + WithArticle(v) + ", not an object");
    }
    if (depth == 1) {
      if (key_ == "__metadata__") {
        if (!v.is_null() && !v.is_object()) {
          Fail("\"__metadata__\" is " + WithArticle(v) + ", not an object of strings");
        }
        return;
      }
      if (!v.is_object()) {
        Fail("tensor '" + Printable(key_) + "': the entry is " + WithArticle(v) +
             ", not an object");
      }
      entry_ = key_;
      entry_values_ = 0;
    }
    if (depth >= 2 && ++entry_values_ > kMaxValuesPerTensor) {
      Fail("tensor '" + Printable(entry_) + "': the entry holds more than " +
           std::to_string(kMaxValuesPerTensor) +
           " values (a safetensors entry is a dtype, a shape and a data_offsets pair)");
    }
  }

  // Puts `v` where the parser is; returns where it went (nullptr: dropped).
  Json* Put(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json* parent = stack_.back().container;
    if (parent == nullptr) return nullptr;
    if (parent->is_array()) {
      auto& items = *std::get<ArrayPtr>(parent->v_);
      items.push_back(std::move(v));
      return &items.back();
    }
    auto& members = *std::get<ObjectPtr>(parent->v_);
    return &members.emplace(std::move(key_), std::move(v)).first->second;
  }

  bool InMetadata() const { return !stack_.empty() && stack_.back().metadata; }

  bool Add(Json v) {
    if (InMetadata()) {
      Fail("\"__metadata__\" holds " + WithArticle(v) + " at \"" + Printable(key_) +
           "\": it maps names to strings");
    }
    Check(v);
    Put(std::move(v));
    return true;
  }

  bool Open(Json container) {
    if (InMetadata()) {
      Fail("\"__metadata__\" holds " + WithArticle(container) + " at \"" + Printable(key_) +
           "\": it maps names to strings");
    }
    Check(container);
    const bool metadata = header_ && stack_.size() == 1 && key_ == "__metadata__";
    Json* placed = Put(std::move(container));
    stack_.push_back({metadata ? nullptr : placed, metadata});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  const std::string& what_;
  const JsonLimits& limits_;
  const bool header_;
  const char* const begin_;
  const char* const* const read_;
  Json root_;
  std::vector<Level> stack_;
  std::string key_;  // the key of the member being read
  size_t values_ = 0;
  std::string entry_;  // a header's tensor being read, and its values so far
  size_t entry_values_ = 0;
};

Json::Json(const Json& other) { *this = other; }
Json::Json(Json&& other) noexcept = default;
Json& Json::operator=(Json&& other) noexcept = default;
Json::~Json() = default;

Json& Json::operator=(const Json& other) {
  if (this == &other) return *this;
  std::visit(
      [this](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (IsUniquePtr<T>::value) {
          v_ = std::make_unique<typename T::element_type>(*x);
        } else {
          v_ = x;
        }
      },
      other.v_);
  return *this;
}

Json Json::Bool(bool v) {
  Json j;
  j.v_ = v;
  return j;
}
Json Json::Number(double v) {
  Json j;
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) <= 9007199254740992.0) {
    j.v_ = static_cast<int64_t>(v);
  } else {
    j.v_ = v;
  }
  return j;
}
Json Json::Int(int64_t v) {
  Json j;
  j.v_ = v;
  return j;
}
Json Json::String(std::string v) {
  Json j;
  j.v_ = std::make_unique<std::string>(std::move(v));
  return j;
}
Json Json::Array(std::vector<Json> v) {
  Json j;
  j.v_ = std::make_unique<std::vector<Json>>(std::move(v));
  return j;
}
Json Json::Object(std::map<std::string, Json> v) {
  Json j;
  j.v_ = std::make_unique<std::map<std::string, Json>>(std::move(v));
  return j;
}

Json::Kind Json::kind() const {
  switch (v_.index()) {
    case 1:
      return Kind::kBool;
    case 2:
    case 3:
      return Kind::kNumber;
    case 4:
      return Kind::kString;
    case 5:
      return Kind::kArray;
    case 6:
      return Kind::kObject;
    default:
      return Kind::kNull;
  }
}

const char* Json::kind_name() const {
  switch (kind()) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "bool";
    case Kind::kNumber:
      return "number";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return "array";
    case Kind::kObject:
      return "object";
  }
  return "?";
}

bool Json::as_bool() const {
  const bool* b = std::get_if<bool>(&v_);
  return b != nullptr && *b;
}
double Json::as_double() const {
  if (const int64_t* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
  const double* d = std::get_if<double>(&v_);
  return d != nullptr ? *d : 0;
}
int64_t Json::as_int() const {
  const int64_t* i = std::get_if<int64_t>(&v_);
  return i != nullptr ? *i : 0;
}
const std::string& Json::as_string() const {
  static const auto* kEmpty = new std::string();
  const StringPtr* s = std::get_if<StringPtr>(&v_);
  return s != nullptr ? **s : *kEmpty;
}
const std::vector<Json>& Json::items() const {
  static const auto* kEmpty = new std::vector<Json>();
  const ArrayPtr* a = std::get_if<ArrayPtr>(&v_);
  return a != nullptr ? **a : *kEmpty;
}
const std::map<std::string, Json>& Json::members() const {
  static const auto* kEmpty = new std::map<std::string, Json>();
  const ObjectPtr* o = std::get_if<ObjectPtr>(&v_);
  return o != nullptr ? **o : *kEmpty;
}

const Json* Json::Find(const std::string& key) const {
  const ObjectPtr* o = std::get_if<ObjectPtr>(&v_);
  if (o == nullptr) return nullptr;
  auto it = (*o)->find(key);
  return it == (*o)->end() ? nullptr : &it->second;
}

Json Json::Parse(const std::string& text, const std::string& what, const JsonLimits& limits) {
  return ParseWith(text, what, limits, /*header=*/false);
}

Json Json::ParseSafetensorsHeader(const std::string& text, const std::string& what) {
  JsonLimits limits;
  limits.max_values = kMaxHeaderValues;
  return ParseWith(text, what, limits, /*header=*/true);
}

Json Json::ParseWith(const std::string& text, const std::string& what, const JsonLimits& limits,
                     bool header) {
  DISCO_CHECK(text.size() <= limits.max_bytes, ValueError)
      << what << ": " << text.size() << " bytes of JSON, more than the " << limits.max_bytes
      << " this reader accepts";
  const char* read = text.data();
  Builder builder(what, limits, header, text.data(), &read);
  const bool parsed =
      nlohmann::json::sax_parse(TrackedPointer(text.data(), &read),
                                TrackedPointer(text.data() + text.size(), &read), &builder);
  DISCO_ICHECK(parsed) << what << ": the JSON parser stopped without an error";
  return builder.Take();
}

std::string Json::Dump() const {
  try {
    return ToNlohmann(*this).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::type_error& e) {
    DISCO_THROW(ValueError) << "cannot write JSON: " << Why(e);
  }
}

}  // namespace llama
