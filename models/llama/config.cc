#include "llama/config.h"

#include <disco/error.h>

#include <cmath>
#include <sstream>

namespace llama {
namespace {

// A positive integer of at most `max`, named in the error: config.json comes from anyone, and every
// buffer the model allocates is a product of these (each bound keeps those products in int64).
int64_t PositiveInt(const Json& j, const char* key, const std::string& what, bool required,
                    int64_t fallback, int64_t max) {
  const Json* v = j.Find(key);
  if (v == nullptr || v->is_null()) {
    DISCO_CHECK(!required, ValueError) << what << ": \"" << key << "\" is missing";
    return fallback;
  }
  DISCO_CHECK(v->is_int() && v->as_int() > 0, ValueError)
      << what << ": \"" << key << "\" must be a positive integer, not " << v->Dump();
  DISCO_CHECK(v->as_int() <= max, ValueError) << what << ": \"" << key << "\" is " << v->as_int()
                                              << ", more than this loader accepts (" << max << ")";
  return v->as_int();
}

// The model this loader implements: model_type "llama" (LlamaForCausalLM). Qwen2, Qwen3 and
// Mistral checkpoints have Llama's tensor names plus weights or rules of their own (biases, q/k
// norms, a sliding window): read as Llama they would compute silently wrong, so they are refused.
void CheckArchitecture(const Json& j, const std::string& what) {
  const Json* type = j.Find("model_type");
  DISCO_CHECK(type != nullptr && type->is_string(), ValueError)
      << what << ": \"model_type\" is " << (type == nullptr ? "missing" : type->Dump())
      << "; this loader reads \"llama\" checkpoints only";
  DISCO_CHECK(type->as_string() == "llama", ValueError)
      << what << ": model_type " << type->Dump()
      << " is not supported; this loader reads \"llama\" checkpoints only";
  const Json* arch = j.Find("architectures");
  if (arch == nullptr || arch->is_null()) return;
  DISCO_CHECK(arch->is_array(), ValueError)
      << what << ": \"architectures\" must be a list, not " << arch->Dump();
  for (const Json& a : arch->items()) {
    DISCO_CHECK(a.is_string() && a.as_string() == "LlamaForCausalLM", ValueError)
        << what << ": architectures " << arch->Dump()
        << " is not supported; this loader reads LlamaForCausalLM only";
  }
}

double PositiveNumber(const Json& j, const char* key, const std::string& what, double fallback) {
  const Json* v = j.Find(key);
  if (v == nullptr || v->is_null()) return fallback;
  DISCO_CHECK(v->is_number() && v->as_double() > 0, ValueError)
      << what << ": \"" << key << "\" must be a positive number, not " << v->Dump();
  return v->as_double();
}

}  // namespace

Config Config::FromJson(const Json& j, const std::string& what) {
  DISCO_CHECK(j.is_object(), ValueError)
      << what << ": expected a JSON object, got a " << j.kind_name();
  CheckArchitecture(j, what);
  Config c;
  c.hidden_size = PositiveInt(j, "hidden_size", what, true, 0, kMaxHidden);
  c.intermediate_size = PositiveInt(j, "intermediate_size", what, true, 0, kMaxHidden * 16);
  c.num_hidden_layers = PositiveInt(j, "num_hidden_layers", what, true, 0, kMaxLayers);
  c.num_attention_heads = PositiveInt(j, "num_attention_heads", what, true, 0, kMaxHeads);
  c.num_key_value_heads =
      PositiveInt(j, "num_key_value_heads", what, false, c.num_attention_heads, kMaxHeads);
  c.vocab_size = PositiveInt(j, "vocab_size", what, true, 0, kMaxVocab);
  c.max_position_embeddings =
      PositiveInt(j, "max_position_embeddings", what, false, 2048, kMaxPositions);
  DISCO_CHECK(c.hidden_size % c.num_attention_heads == 0 || j.Find("head_dim") != nullptr,
              ValueError)
      << what << ": hidden_size " << c.hidden_size << " is not a multiple of num_attention_heads "
      << c.num_attention_heads << " (and there is no head_dim)";
  c.head_dim =
      PositiveInt(j, "head_dim", what, false, c.hidden_size / c.num_attention_heads, kMaxHeadDim);
  DISCO_CHECK(c.head_dim % 2 == 0, ValueError)
      << what << ": head_dim " << c.head_dim << " must be even (rotary embedding)";
  DISCO_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, ValueError)
      << what << ": num_attention_heads " << c.num_attention_heads
      << " is not a multiple of num_key_value_heads " << c.num_key_value_heads;
  // The largest weights: each product within int64 by the bounds above, and within kMaxElements.
  CheckedProduct({c.num_attention_heads, c.head_dim, c.hidden_size},
                 what + ": num_attention_heads x head_dim x hidden_size (q_proj)");
  CheckedProduct({c.vocab_size, c.hidden_size}, what + ": vocab_size x hidden_size (embeddings)");
  CheckedProduct({c.intermediate_size, c.hidden_size},
                 what + ": intermediate_size x hidden_size (mlp)");
  c.rms_norm_eps = PositiveNumber(j, "rms_norm_eps", what, 1e-6);
  c.rope_theta = PositiveNumber(j, "rope_theta", what, 10000.0);
  if (const Json* t = j.Find("tie_word_embeddings"); t != nullptr && !t->is_null()) {
    DISCO_CHECK(t->kind() == Json::Kind::kBool, ValueError)
        << what << ": \"tie_word_embeddings\" must be true or false, not " << t->Dump();
    c.tie_word_embeddings = t->as_bool();
  }
  // Variants this model does not implement are refused, never silently computed wrong.
  if (const Json* a = j.Find("hidden_act"); a != nullptr && !a->is_null()) {
    DISCO_CHECK(a->is_string() && a->as_string() == "silu", ValueError)
        << what << ": hidden_act " << a->Dump() << " is not supported (only \"silu\")";
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    const Json* b = j.Find(key);
    DISCO_CHECK(b == nullptr || b->is_null() || (b->kind() == Json::Kind::kBool && !b->as_bool()),
                ValueError)
        << what << ": \"" << key << "\": " << b->Dump() << " is not supported (no biases)";
  }
  if (const Json* r = j.Find("rope_scaling"); r != nullptr) {
    DISCO_CHECK(r->is_null(), ValueError)
        << what << ": rope_scaling " << r->Dump() << " is not supported (plain RoPE only)";
  }
  return c;
}

int64_t CheckedProduct(std::initializer_list<int64_t> factors, const std::string& what,
                       int64_t limit) {
  int64_t p = 1;
  for (int64_t f : factors) {
    DISCO_CHECK(f >= 0 && (f == 0 || p <= limit / f), ValueError)
        << what << " is more than " << limit << " elements";
    p *= f;
  }
  return p;
}

Config Config::FromText(const std::string& text, const std::string& what) {
  return FromJson(Json::Parse(text, what), what);
}

std::string Config::ToJson() const {
  std::map<std::string, Json> m;
  m["architectures"] = Json::Array({Json::String("LlamaForCausalLM")});
  m["model_type"] = Json::String("llama");
  m["hidden_act"] = Json::String("silu");
  m["hidden_size"] = Json::Int(hidden_size);
  m["intermediate_size"] = Json::Int(intermediate_size);
  m["num_hidden_layers"] = Json::Int(num_hidden_layers);
  m["num_attention_heads"] = Json::Int(num_attention_heads);
  m["num_key_value_heads"] = Json::Int(num_key_value_heads);
  m["head_dim"] = Json::Int(head_dim);
  m["vocab_size"] = Json::Int(vocab_size);
  m["max_position_embeddings"] = Json::Int(max_position_embeddings);
  m["rms_norm_eps"] = Json::Number(rms_norm_eps);
  m["rope_theta"] = Json::Number(rope_theta);
  m["tie_word_embeddings"] = Json::Bool(tie_word_embeddings);
  m["attention_bias"] = Json::Bool(false);
  m["mlp_bias"] = Json::Bool(false);
  m["torch_dtype"] = Json::String("float32");
  return Json::Object(std::move(m)).Dump();
}

void Config::CheckSplit(int ranks) const {
  const std::pair<const char*, int64_t> sizes[] = {{"num_attention_heads", num_attention_heads},
                                                   {"num_key_value_heads", num_key_value_heads},
                                                   {"intermediate_size", intermediate_size},
                                                   {"vocab_size", vocab_size}};
  for (const auto& [name, v] : sizes) {
    DISCO_CHECK(v % ranks == 0, ValueError)
        << name << " " << v << " cannot be split over " << ranks << " ranks";
  }
}

std::string Config::Summary() const {
  std::ostringstream os;
  os << "hidden " << hidden_size << ", " << num_hidden_layers << " layers, " << num_attention_heads
     << " heads (" << num_key_value_heads << " kv, dim " << head_dim << "), ffn "
     << intermediate_size << ", vocab " << vocab_size
     << (tie_word_embeddings ? ", tied embeddings" : "");
  return os.str();
}

int64_t Config::NumParams() const {
  int64_t n = 0;
  for (const WeightSpec& w : WeightSpecs(*this)) {
    int64_t e = 1;
    for (int64_t d : w.shape) e *= d;
    n += e;
  }
  return n;
}

std::vector<WeightSpec> WeightSpecs(const Config& c) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size, v = c.vocab_size;
  auto n = [](const char* name, int64_t value) {
    return std::string(name) + " " + std::to_string(value);
  };
  const std::string hs = n("hidden_size", h), fs = n("intermediate_size", f),
                    vs = n("vocab_size", v),
                    qs = n("num_attention_heads", c.num_attention_heads) + " x " +
                         n("head_dim", c.head_dim),
                    kvs = n("num_key_value_heads", c.num_key_value_heads) + " x " +
                          n("head_dim", c.head_dim);
  std::vector<WeightSpec> out;
  out.push_back({"model.embed_tokens.weight", {v, h}, Split::kRows, vs + ", " + hs});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {h}, Split::kReplicated, hs});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}, Split::kRows, qs + ", " + hs});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}, Split::kRows, kvs + ", " + hs});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}, Split::kRows, kvs + ", " + hs});
    out.push_back({p + "self_attn.o_proj.weight", {h, q}, Split::kColumns, hs + ", " + qs});
    out.push_back({p + "post_attention_layernorm.weight", {h}, Split::kReplicated, hs});
    out.push_back({p + "mlp.gate_proj.weight", {f, h}, Split::kRows, fs + ", " + hs});
    out.push_back({p + "mlp.up_proj.weight", {f, h}, Split::kRows, fs + ", " + hs});
    out.push_back({p + "mlp.down_proj.weight", {h, f}, Split::kColumns, hs + ", " + fs});
  }
  out.push_back({"model.norm.weight", {h}, Split::kReplicated, hs});
  if (!c.tie_word_embeddings) {
    out.push_back({"lm_head.weight", {v, h}, Split::kRows, vs + ", " + hs});
  }
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> ShardShape(const WeightSpec& spec, int ranks) {
  std::vector<int64_t> s = spec.shape;
  if (spec.split == Split::kRows) s[0] /= ranks;
  if (spec.split == Split::kColumns) s[1] /= ranks;
  return s;
}

}  // namespace llama
