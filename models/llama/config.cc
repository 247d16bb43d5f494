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

// The families this loader implements, by model_type, and the one architecture each names. They
// share Llama's tensor names and differ in weights or rules of their own (biases, q/k norms, a
// sliding window): whatever a family has that the model does not implement is refused, never
// computed silently wrong.
const std::pair<const char*, const char*> kFamilies[] = {{"llama", "LlamaForCausalLM"},
                                                         {"mistral", "MistralForCausalLM"},
                                                         {"qwen2", "Qwen2ForCausalLM"},
                                                         {"qwen3", "Qwen3ForCausalLM"}};

const char* Architecture(const std::string& model_type) {
  for (const auto& [type, arch] : kFamilies) {
    if (model_type == type) return arch;
  }
  return nullptr;
}

std::string ModelType(const Json& j, const std::string& what) {
  const char* supported = "this loader reads \"llama\", \"mistral\", \"qwen2\" and \"qwen3\"";
  const Json* type = j.Find("model_type");
  DISCO_CHECK(type != nullptr && type->is_string(), ValueError)
      << what << ": \"model_type\" is " << (type == nullptr ? "missing" : type->Dump()) << "; "
      << supported;
  const char* want = Architecture(type->as_string());
  DISCO_CHECK(want != nullptr, ValueError)
      << what << ": model_type " << type->Dump() << " is not supported; " << supported;
  const Json* arch = j.Find("architectures");
  if (arch == nullptr || arch->is_null()) return type->as_string();
  DISCO_CHECK(arch->is_array() && !arch->items().empty(), ValueError)
      << what << ": \"architectures\" must be a list naming " << want << ", not " << arch->Dump();
  for (const Json& a : arch->items()) {
    DISCO_CHECK(a.is_string() && a.as_string() == want, ValueError)
        << what << ": architectures " << arch->Dump() << " is not supported with model_type "
        << type->Dump() << "; this loader reads " << want << " only";
  }
  return type->as_string();
}

bool Bool(const Json& j, const char* key, const std::string& what, bool fallback) {
  const Json* b = j.Find(key);
  if (b == nullptr || b->is_null()) return fallback;
  DISCO_CHECK(b->kind() == Json::Kind::kBool, ValueError)
      << what << ": \"" << key << "\" must be true or false, not " << b->Dump();
  return b->as_bool();
}

double PositiveNumber(const Json& j, const char* key, const std::string& what, double fallback) {
  const Json* v = j.Find(key);
  if (v == nullptr || v->is_null()) return fallback;
  DISCO_CHECK(v->is_number() && v->as_double() > 0, ValueError)
      << what << ": \"" << key << "\" must be a positive number, not " << v->Dump();
  return v->as_double();
}

// A number in [lo, hi] (a bound that keeps RoPE's frequencies finite), or `fallback` when absent.
double NumberIn(const Json& j, const char* key, const std::string& what, double fallback, double lo,
                double hi) {
  const double v = PositiveNumber(j, key, what, fallback);
  DISCO_CHECK(v >= lo && v <= hi, ValueError)
      << what << ": \"" << key << "\" " << v << " is outside [" << lo << ", " << hi << "]";
  return v;
}

// One RoPE object (rope_parameters or rope_scaling, `field` naming it) into `c`.
void ReadRopeObject(const Json& r, const std::string& field, Config* c) {
  DISCO_CHECK(r.is_object(), ValueError) << field << " must be an object, not " << r.Dump();
  c->rope_theta = NumberIn(r, "rope_theta", field, c->rope_theta, 1, 1e12);
  const Json* type = r.Find("rope_type");
  if (type == nullptr || type->is_null()) type = r.Find("type");
  c->rope_type = "default";
  if (type != nullptr && !type->is_null()) {
    DISCO_CHECK(type->is_string(), ValueError)
        << field << ": the rope type must be a string, not " << type->Dump();
    c->rope_type = type->as_string();
  } else {
    // Without a type only rope_theta may be given (a per-layer-type map, or a factor without its
    // type, would otherwise be read as no scaling at all).
    for (const auto& member : r.members()) {
      const std::string& name = member.first;
      DISCO_CHECK(name == "rope_theta" || name == "partial_rotary_factor", ValueError)
          << field << " has \"" << name << "\" but no \"rope_type\" (nor \"type\")";
    }
  }
  DISCO_CHECK(c->rope_type == "default" || c->rope_type == "linear" || c->rope_type == "llama3",
              ValueError)
      << field << ": rope type \"" << c->rope_type
      << "\" is not supported (only \"default\", \"linear\" and \"llama3\")";
  const double partial = PositiveNumber(r, "partial_rotary_factor", field, 1.0);
  DISCO_CHECK(partial == 1.0, ValueError)
      << field << ": partial_rotary_factor " << partial << " is not supported (only 1)";
  if (c->rope_type == "default") return;
  auto required = [&](const char* name, double lo, double hi) {
    const Json* v = r.Find(name);
    DISCO_CHECK(v != nullptr && !v->is_null(), ValueError)
        << field << ": rope type \"" << c->rope_type << "\" needs \"" << name << "\"";
    return NumberIn(r, name, field, 0, lo, hi);
  };
  c->rope_factor = required("factor", 1e-3, 1e6);
  if (c->rope_type == "linear") return;
  c->rope_low_freq_factor = required("low_freq_factor", 1e-3, 1e6);
  c->rope_high_freq_factor = required("high_freq_factor", 1e-3, 1e6);
  DISCO_CHECK(c->rope_high_freq_factor != c->rope_low_freq_factor, ValueError)
      << field << ": high_freq_factor and low_freq_factor must differ";
  required("original_max_position_embeddings", 1, 1e18);
  c->rope_original_max_positions =
      PositiveInt(r, "original_max_position_embeddings", field, true, 0, kMaxPositions);
}

// RoPE's parameters: transformers 5's rope_parameters (rope_theta inside), else rope_scaling
// (and rope_theta beside it). Scalings this model does not implement (yarn, dynamic, longrope,
// ...) are refused naming the type; both given and saying different things, refused too.
void ReadRope(const Json& j, const std::string& what, Config* c) {
  c->rope_theta = NumberIn(j, "rope_theta", what, 10000.0, 1, 1e12);
  const double partial = PositiveNumber(j, "partial_rotary_factor", what, 1.0);
  DISCO_CHECK(partial == 1.0, ValueError)
      << what << ": partial_rotary_factor " << partial << " is not supported (only 1)";
  const Json* params = j.Find("rope_parameters");
  const Json* scaling = j.Find("rope_scaling");
  const bool has_params = params != nullptr && !params->is_null();
  const bool has_scaling = scaling != nullptr && !scaling->is_null();
  if (has_params) ReadRopeObject(*params, what + ": rope_parameters", c);
  if (!has_scaling) return;
  Config other = *c;
  ReadRopeObject(*scaling, what + ": rope_scaling", has_params ? &other : c);
  if (!has_params) return;
  DISCO_CHECK(other.rope_type == c->rope_type && other.rope_factor == c->rope_factor &&
                  other.rope_low_freq_factor == c->rope_low_freq_factor &&
                  other.rope_high_freq_factor == c->rope_high_freq_factor &&
                  other.rope_original_max_positions == c->rope_original_max_positions &&
                  other.rope_theta == c->rope_theta,
              ValueError)
      << what << ": rope_parameters and rope_scaling say different things (rope type \""
      << c->rope_type << "\" and \"" << other.rope_type << "\"); give one of them";
}

// What each family adds to Llama: biases (llama, qwen2, qwen3), q/k norms (qwen3, by model_type
// alone), a sliding window (mistral). Qwen's sliding-window layers (use_sliding_window, or
// layer_types naming one) are not implemented: refused.
void ReadFamily(const Json& j, const std::string& what, Config* c) {
  const std::string& t = c->model_type;
  if (t == "llama" || t == "qwen3") c->attention_bias = Bool(j, "attention_bias", what, false);
  if (t == "llama") c->mlp_bias = Bool(j, "mlp_bias", what, false);
  if (t == "mistral") {  // null: none
    c->sliding_window = PositiveInt(j, "sliding_window", what, false, 0, kMaxPositions);
  }
  if (t == "qwen2" || t == "qwen3") {
    DISCO_CHECK(!Bool(j, "use_sliding_window", what, false), ValueError)
        << what << ": \"use_sliding_window\": true is not supported (" << t
        << "'s sliding-window layers); only full attention";
  }
  const Json* types = j.Find("layer_types");
  if (types == nullptr || types->is_null()) return;
  const char* want = c->sliding_window > 0 ? "sliding_attention" : "full_attention";
  DISCO_CHECK(types->is_array(), ValueError)
      << what << ": \"layer_types\" must be a list, not " << types->Dump();
  DISCO_CHECK(static_cast<int64_t>(types->items().size()) == c->num_hidden_layers, ValueError)
      << what << ": \"layer_types\" has " << types->items().size() << " entries, but "
      << "num_hidden_layers is " << c->num_hidden_layers;
  for (const Json& l : types->items()) {
    DISCO_CHECK(l.is_string() && l.as_string() == want, ValueError)
        << what << ": layer_types " << types->Dump() << " is not supported: every layer must be \""
        << want << "\"";
  }
}

// The dtype the checkpoint was saved in (torch_dtype; transformers 5: dtype), when given: one of
// those a checkpoint's tensors may have. The tensors' own dtypes are what the loader reads.
void CheckStorageDtype(const Json& j, const std::string& what) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    const Json* d = j.Find(key);
    if (d == nullptr || d->is_null()) continue;
    const std::string v = d->is_string() ? d->as_string() : "";
    DISCO_CHECK(v == "float32" || v == "bfloat16" || v == "float16", ValueError)
        << what << ": \"" << key << "\" is " << d->Dump()
        << "; a checkpoint this loader reads is \"float32\", \"bfloat16\" or \"float16\"";
  }
}

}  // namespace

Config Config::FromJson(const Json& j, const std::string& what) {
  DISCO_CHECK(j.is_object(), ValueError)
      << what << ": expected a JSON object, got a " << j.kind_name();
  Config c;
  c.model_type = ModelType(j, what);
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
  c.tie_word_embeddings = Bool(j, "tie_word_embeddings", what, false);
  // Variants this model does not implement are refused, never silently computed wrong.
  if (const Json* a = j.Find("hidden_act"); a != nullptr && !a->is_null()) {
    DISCO_CHECK(a->is_string() && a->as_string() == "silu", ValueError)
        << what << ": hidden_act " << a->Dump() << " is not supported (only \"silu\")";
  }
  CheckStorageDtype(j, what);
  ReadRope(j, what, &c);
  ReadFamily(j, what, &c);
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
  m["architectures"] = Json::Array({Json::String(Architecture(model_type))});
  m["model_type"] = Json::String(model_type);
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
  m["attention_bias"] = Json::Bool(attention_bias);
  m["mlp_bias"] = Json::Bool(mlp_bias);
  if (model_type == "mistral") {
    m["sliding_window"] = sliding_window > 0 ? Json::Int(sliding_window) : Json();
  }
  if (rope_type != "default") {
    std::map<std::string, Json> r;
    r["rope_type"] = Json::String(rope_type);
    r["factor"] = Json::Number(rope_factor);
    if (rope_type == "llama3") {
      r["low_freq_factor"] = Json::Number(rope_low_freq_factor);
      r["high_freq_factor"] = Json::Number(rope_high_freq_factor);
      r["original_max_position_embeddings"] = Json::Int(rope_original_max_positions);
    }
    m["rope_scaling"] = Json::Object(std::move(r));
  }
  m["torch_dtype"] = Json::String("float32");
  return Json::Object(std::move(m)).Dump();
}

std::vector<float> Config::InvFreq() const {
  const int64_t half = head_dim / 2;
  std::vector<float> out(static_cast<size_t>(half));
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < half; ++i) {
    // inv_freq[i] = 1 / theta^(2i / dim) (transformers' default).
    double f =
        1.0 / std::pow(rope_theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
    if (rope_type == "linear") f /= rope_factor;
    if (rope_type == "llama3") {
      // _compute_llama3_parameters: wavelengths past the original context's / low_freq_factor
      // are slowed by `factor`, those under its / high_freq_factor kept, and those between
      // interpolated smoothly.
      const double old_len = static_cast<double>(rope_original_max_positions);
      const double wavelen = 2 * pi / f;
      const double low_wavelen = old_len / rope_low_freq_factor;
      const double high_wavelen = old_len / rope_high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= rope_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - rope_low_freq_factor) /
                              (rope_high_freq_factor - rope_low_freq_factor);
        f = (1 - smooth) * f / rope_factor + smooth * f;
      }
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
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
  if (QkvBias()) os << (attention_bias ? ", attention biases" : ", q/k/v biases");
  if (mlp_bias) os << ", mlp biases";
  if (QkNorm()) os << ", q/k norms";
  if (sliding_window > 0) os << ", sliding window " << sliding_window;
  if (rope_type != "default") os << ", rope " << rope_type << " x" << rope_factor;
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
  const std::string ds = n("head_dim", c.head_dim);
  std::vector<WeightSpec> out;
  out.push_back({"model.embed_tokens.weight", {v, h}, Split::kRows, vs + ", " + hs});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {h}, Split::kReplicated, hs});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}, Split::kRows, qs + ", " + hs});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}, Split::kRows, kvs + ", " + hs});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}, Split::kRows, kvs + ", " + hs});
    if (c.QkvBias()) {
      out.push_back({p + "self_attn.q_proj.bias", {q}, Split::kRows, qs});
      out.push_back({p + "self_attn.k_proj.bias", {kv}, Split::kRows, kvs});
      out.push_back({p + "self_attn.v_proj.bias", {kv}, Split::kRows, kvs});
    }
    if (c.QkNorm()) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, Split::kReplicated, ds});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, Split::kReplicated, ds});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q}, Split::kColumns, hs + ", " + qs});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.o_proj.bias", {h}, Split::kReplicated, hs});
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}, Split::kReplicated, hs});
    out.push_back({p + "mlp.gate_proj.weight", {f, h}, Split::kRows, fs + ", " + hs});
    out.push_back({p + "mlp.up_proj.weight", {f, h}, Split::kRows, fs + ", " + hs});
    out.push_back({p + "mlp.down_proj.weight", {h, f}, Split::kColumns, hs + ", " + fs});
    if (c.mlp_bias) {
      out.push_back({p + "mlp.gate_proj.bias", {f}, Split::kRows, fs});
      out.push_back({p + "mlp.up_proj.bias", {f}, Split::kRows, fs});
      out.push_back({p + "mlp.down_proj.bias", {h}, Split::kReplicated, hs});
    }
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
