// libFuzzer target for the JSON a checkpoint holds (models/llama/json.h, config.h,
// safetensors.h): the first input byte picks the reader, the rest is its input.
//   0: config.json (Json::Parse, then Config::FromJson)
//   1: a safetensors header (Json::ParseSafetensorsHeader)
//   2: a whole checkpoint: the rest as model.safetensors' header, read by Checkpoint::Open
// The contract under test: malformed input raises disco::ValueError and never crashes, leaks, reads
// out of bounds or hits undefined behaviour; what parses dumps to JSON that parses to the same
// tree. Anything else escapes as an uncaught exception or a trap, which libFuzzer reports.
//
// Built with -DDISCO_BUILD_FUZZ=ON by clang (tests/fuzz/CMakeLists.txt); seeds in json_corpus/.
#include <disco/error.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "llama/config.h"
#include "llama/json.h"
#include "llama/safetensors.h"

namespace {

// Dump, parse again, dump again: the same text (the tree survives the round trip).
void CheckRoundTrip(const llama::Json& j) {
  const std::string text = j.Dump();
  if (llama::Json::Parse(text, "dump").Dump() != text) __builtin_trap();
}

// A checkpoint directory of this process: a fixed config.json and model.safetensors; removed at
// exit.
const std::string* dir = nullptr;

void RemoveDir() {
  std::remove((*dir + "/model.safetensors").c_str());
  std::remove((*dir + "/config.json").c_str());
  ::rmdir(dir->c_str());
}

const std::string& Dir() {
  if (dir != nullptr) return *dir;
  char tmpl[] = "/tmp/disco-json-fuzz-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) std::abort();
  dir = new std::string(tmpl);
  std::ofstream(*dir + "/config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "vocab_size": 16, "max_position_embeddings": 32, "torch_dtype": "float32"})";
  std::atexit(RemoveDir);
  return *dir;
}

// model.safetensors: the 8-byte length of `header`, `header`, 4 KiB of data.
void OpenCheckpoint(const std::string& header) {
  {
    std::ofstream f(Dir() + "/model.safetensors", std::ios::binary | std::ios::trunc);
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    f << header << std::string(4096, '\0');
  }
  llama::Checkpoint::Open(Dir());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  llama::Json parsed;
  try {
    switch (data[0] % 3) {
      case 0:
        parsed = llama::Json::Parse(text, "config.json");
        llama::Config::FromJson(parsed, "config.json");
        break;
      case 1:
        parsed = llama::Json::ParseSafetensorsHeader(text, "m (safetensors header)");
        break;
      default:
        OpenCheckpoint(text);
        break;
    }
  } catch (const disco::ValueError&) {
    // Malformed input, refused as it must be.
  }
  CheckRoundTrip(parsed);  // outside the try: a ValueError here escapes as a crash
  return 0;
}
