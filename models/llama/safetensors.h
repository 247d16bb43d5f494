// Hugging Face checkpoints in safetensors files: a directory with config.json and either
// model.safetensors or model.safetensors.index.json and the shards it names.
//
// A safetensors file is an 8-byte little-endian header length, a JSON header
// {name: {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]},
//  "__metadata__": {...}}, then the data (offsets relative to the end of the header). Every rank
// reads the headers (small) and then, with pread, only the rows or columns of its own shards,
// converting the dtype on the way through a bounded scratch buffer: no rank maps or holds a whole
// tensor it does not keep.
#ifndef DISCO_MODELS_LLAMA_SAFETENSORS_H_
#define DISCO_MODELS_LLAMA_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llama/config.h"

namespace llama {

/// Element types of checkpoint files and of the model's weights in memory.
enum class DType { kF32, kF16, kBF16, kOther };
/// "F32", "F16", "BF16" (safetensors' names).
const char* DTypeName(DType d);
int DTypeSize(DType d);

/// float <-> bfloat16 (round to nearest even; NaN stays NaN) and float16 -> float.
/// Converts `n` elements of type `from` at `src` to type `to` (kF32 or kBF16) at `dst`.
void ConvertElements(DType from, const void* src, int64_t n, DType to, void* dst);

/// One tensor of a checkpoint directory.
struct TensorInfo {
  std::string name;
  std::string file;             // full path of the safetensors file holding it
  DType dtype = DType::kOther;  // kOther: a dtype this reader does not convert
  std::string dtype_name;       // as the header spells it
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute offset of the first byte in `file`
  uint64_t nbytes = 0;
};

class OpenedFile;

/// The tensors of a Hugging Face checkpoint directory. Opening reads config.json and every
/// safetensors header and checks them (JSON, header length, offsets inside the file, sizes that
/// match shape and dtype); errors name the file, and the tensor where there is one.
class Checkpoint {
 public:
  static Checkpoint Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_text() const { return config_text_; }
  const Config& config() const { return config_; }
  /// nullptr when absent.
  const TensorInfo* Find(const std::string& name) const;
  /// Every weight the config needs is present, of a supported dtype and of the config's shape;
  /// throws ValueError naming the tensor and both shapes otherwise.
  void CheckWeights() const;
  /// Reads rows [r0, r1) and columns [c0, c1) of the 2-D tensor `t` (a 1-D tensor is one row)
  /// into `dst`, compact, converted to `to` (kF32 or kBF16).
  void ReadSlice(const TensorInfo& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1, DType to,
                 void* dst) const;
  /// Throws ValueError naming a safetensors file whose size or modification time changed since
  /// its header was read (written in place meanwhile: the slices read may mix two versions).
  void CheckUnchanged() const;

 private:
  // Opens the safetensors file at `path`, keeps it open and parses its header into `out`.
  void ReadHeaderOf(const std::string& path, std::map<std::string, TensorInfo>* out);

  std::string dir_;
  std::string config_text_;
  Config config_;
  std::map<std::string, TensorInfo> tensors_;
  // Each safetensors file, open from its header's reading on: the slices come from the file whose
  // header was checked, even when another file is moved over its name during the load.
  std::map<std::string, std::shared_ptr<const OpenedFile>> files_;
};

/// Reads a whole file into a string; throws ValueError naming it.
std::string ReadFile(const std::string& path);
/// True when `path` is a directory.
bool IsDirectory(const std::string& path);
bool Exists(const std::string& path);
/// `s` with each control byte (C0: NUL, newline, escape...; DEL) as '?', for a message that shows
/// a caller's or a file's text: nothing cuts it short, forges a line of it or drives a terminal.
std::string ControlBytesShown(std::string s);
/// Why `path` cannot be looked at (strerror of stat: "No such file or directory", "Permission
/// denied", "Too many levels of symbolic links"...), or "" when it can.
std::string StatError(const std::string& path);

/// A tensor to write: name, shape, and a generator that fills elements [begin, begin + n) of the
/// flattened tensor (called in order, in chunks).
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(int64_t begin, int64_t n, float* out)> fill;
};
/// Writes a safetensors file of `tensors` in `dtype` (kF32, kF16 or kBF16), streaming through a
/// small buffer.
void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      DType dtype);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_SAFETENSORS_H_
