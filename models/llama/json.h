// The JSON of a Hugging Face checkpoint (config.json, model.safetensors.index.json) and the header
// of a safetensors file, read by nlohmann::json's parser (strict RFC 8259: one value, no comments,
// no trailing commas, strings in valid UTF-8) into a small tree of Json values. The reader holds
// every document to explicit bounds (JsonLimits: size, nesting, number of values) and refuses a
// duplicate key; numbers are kept as int64 when integral and exact, else as double. Errors name
// what was read and the byte offset: "config.json: byte 17: duplicate key \"hidden_size\"".
#ifndef DISCO_MODELS_LLAMA_JSON_H_
#define DISCO_MODELS_LLAMA_JSON_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace llama {

/// What a document may hold; past any bound Parse throws instead of allocating more.
struct JsonLimits {
  size_t max_bytes = size_t{100} << 20;  // the text, before anything is parsed
  int max_depth = 64;                    // containers around the deepest value
  size_t max_values = size_t{1} << 20;   // every value, containers and keys' values included
};

/// One JSON value: 16 bytes, strings and containers behind a pointer. Objects keep their keys
/// sorted (duplicates are an error when parsing).
class Json {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Json() = default;
  Json(const Json& other);
  Json(Json&& other) noexcept;
  Json& operator=(const Json& other);
  Json& operator=(Json&& other) noexcept;
  ~Json();

  static Json Bool(bool v);
  /// An integral double that int64 holds exactly (|v| <= 2^53) is stored as that integer.
  static Json Number(double v);
  static Json Int(int64_t v);
  static Json String(std::string v);
  static Json Array(std::vector<Json> v = {});
  static Json Object(std::map<std::string, Json> v = {});

  /// Parses `text` (all of it, surrounded by optional white space) within `limits`; throws
  /// disco::ValueError "<what>: byte N: <why>".
  static Json Parse(const std::string& text, const std::string& what,
                    const JsonLimits& limits = JsonLimits());
  /// Parses the JSON header of a safetensors file: an object whose "__metadata__" is null or an
  /// object of strings (checked, then left out: the result holds an empty object there) and whose
  /// other members, the tensors, are objects of at most kMaxValuesPerTensor values each. Up to
  /// 100 MiB and kMaxHeaderValues values; anything else is refused as it is read.
  static Json ParseSafetensorsHeader(const std::string& text, const std::string& what);
  static constexpr size_t kMaxValuesPerTensor = 32;
  static constexpr size_t kMaxHeaderValues = size_t{1} << 22;

  Kind kind() const;
  bool is_null() const { return kind() == Kind::kNull; }
  bool is_number() const { return kind() == Kind::kNumber; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_object() const { return kind() == Kind::kObject; }
  /// "null", "bool", "number", "string", "array", "object".
  const char* kind_name() const;

  /// The value, or false / 0 / "" / empty for a value of another kind.
  bool as_bool() const;
  double as_double() const;
  /// Whether the number is an integer that int64 holds exactly.
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  int64_t as_int() const;
  const std::string& as_string() const;
  const std::vector<Json>& items() const;
  const std::map<std::string, Json>& members() const;
  /// The member `key` of an object, or nullptr (also for non-objects).
  const Json* Find(const std::string& key) const;

  /// Compact JSON text; objects in key order, doubles in the shortest form that reads back the
  /// same. Throws disco::ValueError for a string that is not valid UTF-8.
  std::string Dump() const;

 private:
  class Builder;  // builds a tree from the parser's events (json.cc)
  static Json ParseWith(const std::string& text, const std::string& what, const JsonLimits& limits,
                        bool header);

  std::variant<std::monostate, bool, int64_t, double, std::unique_ptr<std::string>,
               std::unique_ptr<std::vector<Json>>, std::unique_ptr<std::map<std::string, Json>>>
      v_;
};

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_JSON_H_
