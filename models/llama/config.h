// The model's configuration (a Hugging Face config.json of the Llama family: Llama, Mistral, Qwen2,
// Qwen3) and how it is split over ranks.
#ifndef DISCO_MODELS_LLAMA_CONFIG_H_
#define DISCO_MODELS_LLAMA_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "llama/json.h"

namespace llama {

// The largest value config.json may give each size (the largest checkpoints published use a
// tenth of each or less). Every size a buffer is made of is bounded before anything is allocated,
// and so is every product of them (CheckedProduct).
constexpr int64_t kMaxHidden = int64_t{1} << 17;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxPositions = int64_t{1} << 24;
// The most elements one buffer of the model may have (2^40 floats: 4 TiB).
constexpr int64_t kMaxElements = int64_t{1} << 40;

/// The product of `factors`, or a ValueError "WHAT is more than LIMIT elements" when it would
/// pass `limit` (never a wrapped value).
int64_t CheckedProduct(std::initializer_list<int64_t> factors, const std::string& what,
                       int64_t limit = kMaxElements);

/// The fields of config.json that the model uses (names as Hugging Face spells them). The
/// families differ from Llama only in the fields after tie_word_embeddings.
struct Config {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // default: num_attention_heads
  int64_t head_dim = 0;             // default: hidden_size / num_attention_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  /// "llama", "mistral", "qwen2" or "qwen3" (architectures: LlamaForCausalLM, ...).
  std::string model_type = "llama";
  bool attention_bias = false;  // llama, qwen3: biases of q, k, v and o
  bool mlp_bias = false;        // llama: biases of gate, up and down
  /// mistral: a row attends to the positions > its own - sliding_window only (0: to all).
  int64_t sliding_window = 0;
  /// RoPE scaling (rope_scaling, or transformers 5's rope_parameters): "default", "linear"
  /// (factor) or "llama3" (factor, low_freq_factor, high_freq_factor,
  /// original_max_position_embeddings).
  std::string rope_type = "default";
  double rope_factor = 1.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 1.0;
  int64_t rope_original_max_positions = 0;

  /// q, k and v have biases: attention_bias, or Qwen2 (always).
  bool QkvBias() const { return attention_bias || model_type == "qwen2"; }
  /// q and k go through an RMSNorm per head (weights of head_dim) before the rotation: Qwen3.
  bool QkNorm() const { return model_type == "qwen3"; }
  /// The rotary inverse frequencies (head_dim / 2), scaled as rope_type says, as transformers
  /// computes them (_compute_default/linear/llama3_rope_parameters).
  std::vector<float> InvFreq() const;

  /// Reads and checks a config (`what` names it in errors: "DIR/config.json"). Unsupported
  /// variants (another model_type, architectures other than the model_type's ...ForCausalLM,
  /// hidden_act other than silu, a rope type other than the above, Qwen's sliding-window layers)
  /// and sizes past the bounds above are errors naming the field.
  static Config FromJson(const Json& j, const std::string& what);
  static Config FromText(const std::string& text, const std::string& what);
  /// config.json text with every field above (rope scaling as rope_scaling).
  std::string ToJson() const;

  /// Throws ValueError naming the first size the `ranks` cannot share equally:
  /// "num_key_value_heads 4 cannot be split over 3 ranks".
  void CheckSplit(int ranks) const;
  /// "hidden 256, 4 layers, 8 heads (4 kv, dim 32), ffn 768, vocab 1024", then what is not plain
  /// Llama (", q/k norms, rope llama3 x8"); the family is model_type.
  std::string Summary() const;
  /// The number of parameters of the whole model.
  int64_t NumParams() const;
};

/// How a weight is split over the ranks (Megatron): by rows (output features: q/k/v, gate/up,
/// embedding and LM head by vocabulary; the biases of q/k/v and gate/up, 1-D, by elements), by
/// columns (input features: o and down), or not at all (norms, q/k norms, the biases of o and
/// down: added once, after the allreduce).
enum class Split { kRows, kColumns, kReplicated };

/// One weight of the checkpoint: its Hugging Face name, full shape, and split.
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;  // [out, in] for matrices, [n] for norms and biases
  Split split;
  /// The full shape's explanation in terms of the config, for errors ("num_key_value_heads 4 x
  /// head_dim 32, hidden_size 256").
  std::string why;
};

/// Every weight the model reads, in checkpoint order (lm_head.weight only without tied
/// embeddings; biases and q/k norms as the config says).
std::vector<WeightSpec> WeightSpecs(const Config& c);
/// "[64, 128]".
std::string ShapeString(const std::vector<int64_t>& shape);
/// The shape of `spec`'s shard on one of `ranks` ranks.
std::vector<int64_t> ShardShape(const WeightSpec& spec, int ranks);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_CONFIG_H_
