// A small JSON reader and writer for the two JSON files of a Hugging Face checkpoint (config.json,
// model.safetensors.index.json) and the header of a safetensors file. Strict RFC 8259: one value,
// no comments, no trailing commas, strings in UTF-8 with escapes (\uXXXX pairs included), numbers
// kept as double (and as int64 when integral and exact). Errors name what was read and the byte
// offset: "config.json: byte 17: expected ':' after an object key".
#ifndef DISCO_MODELS_LLAMA_JSON_H_
#define DISCO_MODELS_LLAMA_JSON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llama {

/// One JSON value. Objects keep their keys sorted (duplicates are an error).
class Json {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Json() = default;
  static Json Bool(bool v);
  static Json Number(double v);
  static Json Int(int64_t v);
  static Json String(std::string v);
  static Json Array(std::vector<Json> v = {});
  static Json Object(std::map<std::string, Json> v = {});

  /// Parses `text` (all of it, surrounded by optional white space); throws disco::ValueError
  /// "<what>: byte N: <why>".
  static Json Parse(const std::string& text, const std::string& what);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  /// "null", "bool", "number", "string", "array", "object".
  const char* kind_name() const;

  bool as_bool() const { return bool_; }
  double as_double() const { return number_; }
  /// Whether the number is an integer that int64 holds exactly.
  bool is_int() const { return kind_ == Kind::kNumber && is_int_; }
  int64_t as_int() const { return int_; }
  const std::string& as_string() const { return string_; }
  const std::vector<Json>& items() const { return array_; }
  const std::map<std::string, Json>& members() const { return object_; }
  /// The member `key` of an object, or nullptr (also for non-objects).
  const Json* Find(const std::string& key) const;

  /// Compact JSON text; objects in key order.
  std::string Dump() const;

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string string_;
  std::vector<Json> array_;
  std::map<std::string, Json> object_;
};

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_JSON_H_
