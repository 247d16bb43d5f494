// JsonNode: typed access to tokenizer.json with the path of every value in its errors.
#include "tokenizer/json_node.h"

#include <disco/error.h>

#include "tokenizer/utf8.h"

namespace tokenizer {

void JsonNode::Fail(const std::string& what) const {
  DISCO_THROW(ValueError) << OneLine(file_ + ": " + (path_.empty() ? "the document" : path_) +
                                     ": " + what);
}

bool JsonNode::Has(const std::string& key) const {
  if (!j_->is_object()) return false;
  auto it = j_->find(key);
  return it != j_->end() && !it->is_null();
}

JsonNode JsonNode::At(const std::string& key) const {
  static const nlohmann::json kNull;
  if (!j_->is_object()) Fail(std::string("is a ") + j_->type_name() + ", not an object");
  const std::string path = path_.empty() ? key : path_ + "." + key;
  auto it = j_->find(key);
  return JsonNode(it == j_->end() ? kNull : *it, file_, path);
}

std::vector<JsonNode> JsonNode::Items() const {
  if (!j_->is_array()) Fail(std::string("is a ") + j_->type_name() + ", not an array");
  std::vector<JsonNode> out;
  for (size_t i = 0; i < j_->size(); ++i) {
    out.emplace_back((*j_)[i], file_, path_ + "[" + std::to_string(i) + "]");
  }
  return out;
}

std::vector<std::pair<std::string, JsonNode>> JsonNode::Members() const {
  if (!j_->is_object()) Fail(std::string("is a ") + j_->type_name() + ", not an object");
  std::vector<std::pair<std::string, JsonNode>> out;
  for (auto it = j_->begin(); it != j_->end(); ++it) {
    out.emplace_back(it.key(), JsonNode(it.value(), file_, path_ + "[\"" + it.key() + "\"]"));
  }
  return out;
}

std::string JsonNode::AsString() const {
  if (!j_->is_string()) Fail(std::string("is a ") + j_->type_name() + ", not a string");
  return j_->get<std::string>();
}

int64_t JsonNode::AsId() const {
  if (!j_->is_number_integer() || j_->get<int64_t>() < 0 || j_->get<int64_t>() >= (1LL << 31)) {
    Fail("is " + j_->dump() + ", not a token id (an integer in [0, 2^31))");
  }
  return j_->get<int64_t>();
}

std::string JsonNode::String(const std::string& key) const {
  JsonNode n = At(key);
  if (n.is_null()) n.Fail("is missing");
  return n.AsString();
}

std::string JsonNode::String(const std::string& key, const std::string& dflt) const {
  JsonNode n = At(key);
  return n.is_null() ? dflt : n.AsString();
}

bool JsonNode::Bool(const std::string& key, bool dflt) const {
  JsonNode n = At(key);
  if (n.is_null()) return dflt;
  if (!n.json().is_boolean()) n.Fail(std::string("is a ") + n.json().type_name() + ", not a bool");
  return n.json().get<bool>();
}

int64_t JsonNode::Int(const std::string& key, int64_t dflt) const {
  JsonNode n = At(key);
  if (n.is_null()) return dflt;
  if (!n.json().is_number_integer()) n.Fail("is " + n.json().dump() + ", not an integer");
  return n.json().get<int64_t>();
}

void JsonNode::Unsupported(const std::string& kind, const std::string& supported) const {
  At("type").Fail("unsupported " + kind + " '" + Type() + "' (disco supports: " + supported + ")");
}

}  // namespace tokenizer
