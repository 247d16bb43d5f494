// A node of a parsed tokenizer.json with its JSON path ("pre_tokenizer.pretokenizers[1]"), so that
// every refusal names the file, the path and what is wrong:
// "tokenizer.json: pre_tokenizer.type: unsupported pre-tokenizer 'Punctuation'".
#ifndef DISCO_MODELS_TOKENIZER_JSON_NODE_H_
#define DISCO_MODELS_TOKENIZER_JSON_NODE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tokenizer {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& j, std::string file, std::string path)
      : j_(&j), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *j_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  bool is_null() const { return j_->is_null(); }

  /// Throws disco::ValueError "<file>: <path>: <what>".
  [[noreturn]] void Fail(const std::string& what) const;

  /// Whether the object has `key` with a value other than null.
  bool Has(const std::string& key) const;
  /// The member `key` (null when absent); the node must be an object.
  JsonNode At(const std::string& key) const;
  /// The items of an array (the node must be one).
  std::vector<JsonNode> Items() const;
  /// The members of an object (the node must be one), in key order.
  std::vector<std::pair<std::string, JsonNode>> Members() const;

  /// Typed values of member `key`: required unless a default is given (used when absent or null).
  std::string String(const std::string& key) const;
  std::string String(const std::string& key, const std::string& dflt) const;
  bool Bool(const std::string& key, bool dflt) const;
  int64_t Int(const std::string& key, int64_t dflt) const;
  /// This node as a string / a non-negative integer.
  std::string AsString() const;
  int64_t AsId() const;

  /// The member "type", a string, required.
  std::string Type() const { return String("type"); }
  /// Refuses the node: "<path>.type: unsupported <kind> '<type>' (disco supports: <supported>)".
  [[noreturn]] void Unsupported(const std::string& kind, const std::string& supported) const;

 private:
  const nlohmann::json* j_;
  std::string file_, path_;
};

}  // namespace tokenizer

#endif  // DISCO_MODELS_TOKENIZER_JSON_NODE_H_
