// Config::FromText on config.json files a user may bring: each variant the loader does not read is
// refused in one line naming the file and the key.
#include <disco/error.h>
#include <gtest/gtest.h>

#include <string>

#include "llama/config.h"

namespace llama {
namespace {

const char* const kWhat = "DIR/config.json";

// A valid Qwen3 config with `extra` members spliced in (later keys are refused as duplicates, so
// `extra` names keys the base does not have).
std::string Qwen3(const std::string& extra) {
  return R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
             "vocab_size": 256)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string Refusal(const std::string& text) {
  try {
    Config::FromText(text, kWhat);
  } catch (const disco::ValueError& e) {
    return e.what();
  }
  return "(accepted)";
}

void ExpectRefused(const std::string& extra, const std::string& says) {
  const std::string got = Refusal(Qwen3(extra));
  EXPECT_NE(got.find(kWhat), std::string::npos) << extra << ": " << got;
  EXPECT_NE(got.find(says), std::string::npos) << extra << ": " << got;
  EXPECT_EQ(got.find('\n'), std::string::npos) << "one line: " << got;
}

TEST(LlamaConfigTest, AcceptsWhatTransformersWrites) {
  for (const char* extra :
       {"", R"("architectures": ["Qwen3ForCausalLM"])", R"("architectures": null)",
        R"("torch_dtype": "bfloat16")", R"("dtype": "float16")", R"("torch_dtype": "float32")",
        R"("layer_types": ["full_attention", "full_attention"])", R"("rms_norm_eps": 1e-06)",
        R"("rope_theta": 1000000.0)"}) {
    EXPECT_EQ(Refusal(Qwen3(extra)), "(accepted)") << extra;
  }
  EXPECT_EQ(Config::FromText(Qwen3(R"("rope_theta": 5e5)"), kWhat).rope_theta, 5e5);
}

TEST(LlamaConfigTest, RefusesAnIntegerWrittenAsAFloat) {
  const std::string text = R"({"model_type": "llama", "hidden_size": 16.0, "intermediate_size": 32,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 8})";
  EXPECT_NE(Refusal(text).find("DIR/config.json: \"hidden_size\" must be a positive integer, "
                               "not 16.0"),
            std::string::npos)
      << Refusal(text);
  ExpectRefused(R"("max_position_embeddings": 4096.0)", "\"max_position_embeddings\"");
  ExpectRefused(R"("head_dim": 1.6e1)", "\"head_dim\" must be a positive integer, not 16.0");
}

TEST(LlamaConfigTest, RefusesAnEmptyArchitectures) {
  ExpectRefused(R"("architectures": [])",
                "\"architectures\" must be a list naming Qwen3ForCausalLM, not []");
  ExpectRefused(R"("architectures": "Qwen3ForCausalLM")", "\"architectures\" must be a list");
  ExpectRefused(R"("architectures": ["LlamaForCausalLM"])",
                "architectures [\"LlamaForCausalLM\"] is not supported with model_type");
}

TEST(LlamaConfigTest, RefusesOddStorageDtypes) {
  for (const char* extra :
       {R"("torch_dtype": "float8")", R"("torch_dtype": 16)", R"("torch_dtype": "")",
        R"("torch_dtype": ["float32"])", R"("dtype": "int8")", R"("torch_dtype": "Float32")"}) {
    const std::string key = std::string(extra).substr(1, std::string(extra).find('"', 1) - 1);
    ExpectRefused(extra, "\"" + key + "\" is ");
    ExpectRefused(extra, "\"float32\", \"bfloat16\" or \"float16\"");
  }
}

TEST(LlamaConfigTest, RefusesLayerTypesOfAnotherLength) {
  ExpectRefused(R"("layer_types": ["full_attention"])",
                "\"layer_types\" has 1 entries, but num_hidden_layers is 2");
  ExpectRefused(R"("layer_types": ["full_attention", "full_attention", "full_attention"])",
                "\"layer_types\" has 3 entries, but num_hidden_layers is 2");
  ExpectRefused(R"("layer_types": [])", "\"layer_types\" has 0 entries");
}

TEST(LlamaConfigTest, RefusesAnotherFamilyNamingModelType) {
  const std::string text = R"({"model_type": "gemma", "hidden_size": 64})";
  EXPECT_NE(Refusal(text).find("DIR/config.json: model_type \"gemma\" is not supported"),
            std::string::npos)
      << Refusal(text);
}

}  // namespace
}  // namespace llama
