#include "llama/safetensors.h"

#include <disco/error.h>
#include <disco/half.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <utility>

namespace llama {
namespace {

// Reads and writes go through buffers of at most this many bytes.
constexpr size_t kChunkBytes = size_t{4} << 20;
// The most elements one tensor may have (2^50: 4 PiB of float32, far past any real checkpoint).
constexpr uint64_t kMaxTensorElements = uint64_t{1} << 50;
// A header longer than this is not a header (safetensors itself refuses 100 MB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

// Throws naming `path` when it is a symbolic link, `err` being why following it failed: a link
// that leads nowhere (its target gone, as in a Hugging Face cache whose blob a partial download
// never wrote, or a loop) is named so, not taken for an absent file.
void CheckNotADanglingLink(const std::string& path, int err) {
  struct stat st;
  DISCO_CHECK(::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode), ValueError)
      << path << " is a symbolic link that leads nowhere: " << std::strerror(err);
}

// An open regular file, closed on destruction.
class File {
 public:
  File(const std::string& path, int flags, mode_t mode = 0644) : path_(path) {
    // O_NONBLOCK: a FIFO planted as a checkpoint file opens at once (and is refused below)
    // instead of waiting forever for a writer. It changes nothing for a regular file.
    do {
      fd_ = ::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, mode);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) {
      const int err = errno;
      if (err == ENOENT) CheckNotADanglingLink(path, err);
      DISCO_THROW(ValueError) << "cannot open " << path << ": " << std::strerror(err);
    }
    struct stat st;
    DISCO_CHECK(::fstat(fd_, &st) == 0, ValueError)
        << "cannot stat " << path << ": " << std::strerror(errno);
    DISCO_CHECK(S_ISREG(st.st_mode), ValueError)
        << path << " is not a regular file (" << KindOf(st.st_mode) << ")";
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  struct stat Stat() const {
    struct stat st;
    DISCO_CHECK(::fstat(fd_, &st) == 0, ValueError)
        << "cannot stat " << path_ << ": " << std::strerror(errno);
    return st;
  }
  uint64_t Size() const { return static_cast<uint64_t>(Stat().st_size); }
  // Exactly `n` bytes at `offset`, or an error naming the file and `what`.
  void ReadAt(void* dst, size_t n, uint64_t offset, const std::string& what) const {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      DISCO_CHECK(got >= 0, ValueError)
          << "reading " << what << " from " << path_ << ": " << std::strerror(errno);
      DISCO_CHECK(got > 0, ValueError)
          << "reading " << what << " from " << path_ << ": the file ends at byte " << Size()
          << " (truncated?), before byte " << offset;
      p += got;
      n -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
  }
  void Write(const void* src, size_t n) {
    const auto* p = static_cast<const char*>(src);
    while (n > 0) {
      ssize_t put = ::write(fd_, p, n);
      if (put < 0 && errno == EINTR) continue;
      DISCO_CHECK(put > 0, ValueError) << "writing " << path_ << ": " << std::strerror(errno);
      p += put;
      n -= static_cast<size_t>(put);
    }
  }
  void Close() {
    int fd = fd_;
    fd_ = -1;
    DISCO_CHECK(::close(fd) == 0, ValueError)
        << "closing " << path_ << ": " << std::strerror(errno);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

DType ParseDType(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  return DType::kOther;
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// A name from a checkpoint file as a message shows it: its first 60 bytes, control bytes as '?'.
std::string ShownName(const std::string& name) {
  const std::string shown = ControlBytesShown(name.substr(0, 60));
  return name.size() > 60 ? shown + "... (" + std::to_string(name.size()) + " bytes)" : shown;
}

// A name from a checkpoint file, refused when it holds a control character: it goes into
// messages, where a newline would forge a line of its own and an escape sequence reach the
// terminal. Unicode's C1 controls (U+0080-U+009F: an 8-bit escape sequence's start) and its
// direction overrides (U+202A-U+202E, U+2066-U+2069: text shown in another order than it is)
// count too.
void CheckPrintable(const std::string& name, const std::string& what) {
  auto control = [&](size_t i) -> size_t {  // the bytes of a control character at i, or 0
    const auto c = [&](size_t k) { return k < name.size() ? static_cast<uint8_t>(name[k]) : 0; };
    if (c(i) < 0x20 || c(i) == 0x7f) return 1;
    if (c(i) == 0xc2 && c(i + 1) >= 0x80 && c(i + 1) <= 0x9f) return 2;
    if (c(i) == 0xe2 && ((c(i + 1) == 0x80 && c(i + 2) >= 0xaa && c(i + 2) <= 0xae) ||
                         (c(i + 1) == 0x81 && c(i + 2) >= 0xa6 && c(i + 2) <= 0xa9))) {
      return 3;
    }
    return 0;
  };
  for (size_t i = 0; i < name.size(); ++i) {
    const size_t n = control(i);
    if (n == 0) continue;
    std::string hex;
    for (size_t k = i; k < i + n; ++k) {
      char b[4];
      std::snprintf(b, sizeof b, "%02x", static_cast<uint8_t>(name[k]));
      hex += b;
    }
    DISCO_THROW(ValueError) << what << " holds the control character 0x" << hex << " (at byte " << i
                            << "): '" << ShownName(name) << "'";
  }
}

// Parses the header of one safetensors file (`f`, open at `path`) into `out` (name -> info).
void ReadHeader(const File& f, const std::string& path, std::map<std::string, TensorInfo>* out) {
  const uint64_t size = f.Size();
  DISCO_CHECK(size >= 8, ValueError)
      << path << " is not a safetensors file: it has " << size << " bytes (a header needs 8)";
  unsigned char len_bytes[8];
  f.ReadAt(len_bytes, 8, 0, "the header length");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  DISCO_CHECK(len <= size - 8 && len <= kMaxHeaderBytes, ValueError)
      << path << ": the header length " << len << " exceeds the file (" << size
      << " bytes): not a safetensors file, or truncated";
  std::string text(len, '\0');
  f.ReadAt(text.data(), len, 8, "the header");
  Json header = Json::ParseSafetensorsHeader(text, path + " (safetensors header)");
  DISCO_CHECK(header.is_object(), ValueError)
      << path << ": the safetensors header is a " << header.kind_name() << ", not an object";
  const uint64_t data_start = 8 + len, data_size = size - data_start;
  for (const auto& [name, entry] : header.members()) {
    if (name == "__metadata__") continue;
    CheckPrintable(name, path + ": a tensor name");
    const std::string where = path + ": tensor '" + name + "'";
    DISCO_CHECK(entry.is_object(), ValueError) << where << ": the entry is not an object";
    const Json* dtype = entry.Find("dtype");
    const Json* shape = entry.Find("shape");
    const Json* offsets = entry.Find("data_offsets");
    DISCO_CHECK(dtype != nullptr && dtype->is_string(), ValueError)
        << where << ": no \"dtype\" string";
    DISCO_CHECK(shape != nullptr && shape->is_array(), ValueError)
        << where << ": no \"shape\" array";
    DISCO_CHECK(offsets != nullptr && offsets->is_array() && offsets->items().size() == 2,
                ValueError)
        << where << ": no \"data_offsets\" pair";
    TensorInfo t;
    t.name = name;
    t.file = path;
    t.dtype_name = dtype->as_string();
    t.dtype = ParseDType(t.dtype_name);
    uint64_t numel = 1;
    for (const Json& d : shape->items()) {
      DISCO_CHECK(d.is_int() && d.as_int() >= 0 && d.as_int() < (int64_t{1} << 40), ValueError)
          << where << ": bad dimension " << d.Dump() << " in its shape";
      t.shape.push_back(d.as_int());
      // Checked before the product is formed: [2^39, 2^39] must not wrap to 0.
      const uint64_t dim = static_cast<uint64_t>(d.as_int());
      DISCO_CHECK(dim == 0 || numel <= kMaxTensorElements / dim, ValueError)
          << where << ": shape " << shape->Dump() << " has more than " << kMaxTensorElements
          << " elements";
      numel *= dim;
    }
    const Json& b = offsets->items()[0];
    const Json& e = offsets->items()[1];
    DISCO_CHECK(b.is_int() && e.is_int() && b.as_int() >= 0 && e.as_int() >= b.as_int(), ValueError)
        << where << ": bad data_offsets " << offsets->Dump();
    const uint64_t begin = static_cast<uint64_t>(b.as_int()),
                   end = static_cast<uint64_t>(e.as_int());
    DISCO_CHECK(end <= data_size, ValueError)
        << where << ": data_offsets " << offsets->Dump() << " reach past the end of the data ("
        << data_size << " bytes): the file is truncated or damaged";
    t.offset = data_start + begin;
    t.nbytes = end - begin;
    if (t.dtype != DType::kOther) {
      DISCO_CHECK(t.nbytes == numel * static_cast<uint64_t>(DTypeSize(t.dtype)), ValueError)
          << where << ": data_offsets " << offsets->Dump() << " hold " << t.nbytes
          << " bytes, but shape " << ShapeString(t.shape) << " of " << t.dtype_name << " needs "
          << numel * static_cast<uint64_t>(DTypeSize(t.dtype));
    }
    (*out)[name] = std::move(t);
  }
  // Tensors lie apart: two whose bytes overlap would read each other's data (the format packs
  // them back to back).
  std::vector<std::pair<uint64_t, const TensorInfo*>> spans;
  for (const auto& [name, t] : *out) {
    if (t.file == path && t.nbytes > 0) spans.push_back({t.offset, &t});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    const TensorInfo& a = *spans[i - 1].second;
    const TensorInfo& b = *spans[i].second;
    DISCO_CHECK(b.offset >= a.offset + a.nbytes, ValueError)
        << path << ": the data of tensors '" << a.name << "' and '" << b.name
        << "' overlap: the file is damaged or forged";
  }
}

}  // namespace

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kOther:
      break;
  }
  return "?";
}

int DTypeSize(DType d) { return d == DType::kF32 ? 4 : 2; }

void ConvertElements(DType from, const void* src, int64_t n, DType to, void* dst) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n) * DTypeSize(from));
    return;
  }
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  if (to == DType::kF32) {
    auto* d = static_cast<float*>(dst);
    if (from == DType::kBF16) {
      for (int64_t i = 0; i < n; ++i) d[i] = disco::Bf16ToFloat(s16[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = disco::HalfToFloat(s16[i]);
    }
    return;
  }
  auto* d = static_cast<uint16_t*>(dst);
  if (to == DType::kBF16) {
    if (from == DType::kF32) {
      for (int64_t i = 0; i < n; ++i) d[i] = disco::FloatToBf16(s32[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = disco::FloatToBf16(disco::HalfToFloat(s16[i]));
    }
    return;
  }
  // to F16
  if (from == DType::kF32) {
    for (int64_t i = 0; i < n; ++i) d[i] = disco::FloatToHalf(s32[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = disco::FloatToHalf(disco::Bf16ToFloat(s16[i]));
  }
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string ControlBytesShown(std::string s) {
  for (char& c : s) c = (c >= 0 && c < 0x20) || c == 0x7f ? '?' : c;
  return s;
}

std::string StatError(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? std::string() : std::strerror(errno);
}

namespace {

// Whether anything is at `path` (a link that leads nowhere is an error naming it, not absent).
bool Present(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  CheckNotADanglingLink(path, err);
  if (err == ENOENT) return false;
  // A directory that cannot be searched, a name too long, ...
  DISCO_THROW(ValueError) << "cannot look at " << path << ": " << std::strerror(err);
}

}  // namespace

std::string ReadFile(const std::string& path) {
  File f(path, O_RDONLY);
  const uint64_t size = f.Size();
  DISCO_CHECK(size <= kMaxHeaderBytes, ValueError)
      << path << " has " << size << " bytes: too large for a JSON file";
  std::string text(size, '\0');
  f.ReadAt(text.data(), size, 0, "the file");
  return text;
}

class OpenedFile {
 public:
  explicit OpenedFile(const std::string& path) : file(path, O_RDONLY), at_open(file.Stat()) {}
  File file;
  struct stat at_open;  // size and modification time when the header was read
};

void Checkpoint::ReadHeaderOf(const std::string& path, std::map<std::string, TensorInfo>* out) {
  auto opened = std::make_shared<const OpenedFile>(path);
  ReadHeader(opened->file, path, out);
  files_[path] = std::move(opened);
}

void Checkpoint::CheckUnchanged() const {
  auto same = [](const timespec& a, const timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
  };
  for (const auto& [path, opened] : files_) {
    const struct stat now = opened->file.Stat(), &then = opened->at_open;
    // Not the change time: moving another file over the name changes this one's (its link count).
    DISCO_CHECK(now.st_size == then.st_size && same(now.st_mtim, then.st_mtim), ValueError)
        << path << " changed while the weights were read from it (" << then.st_size
        << " bytes modified at " << then.st_mtim.tv_sec << "." << then.st_mtim.tv_nsec << " s, "
        << now.st_size << " bytes at " << now.st_mtim.tv_sec << "." << now.st_mtim.tv_nsec
        << " s now): a copy or download still writing it? Load it again once it is done";
  }
}

Checkpoint Checkpoint::Open(const std::string& dir) {
  DISCO_CHECK(IsDirectory(dir), ValueError)
      << dir << " is not a directory (a Hugging Face checkpoint: config.json and safetensors)";
  Checkpoint ck;
  ck.dir_ = dir;
  const std::string config_path = Join(dir, "config.json");
  DISCO_CHECK(Present(config_path), ValueError) << dir << " has no config.json";
  ck.config_text_ = ReadFile(config_path);
  ck.config_ = Config::FromText(ck.config_text_, config_path);

  const std::string single = Join(dir, "model.safetensors");
  const std::string index = Join(dir, "model.safetensors.index.json");
  if (Present(single)) {
    ck.ReadHeaderOf(single, &ck.tensors_);
    return ck;
  }
  DISCO_CHECK(Present(index), ValueError)
      << dir << " holds neither model.safetensors nor model.safetensors.index.json";
  Json j = Json::Parse(ReadFile(index), index);
  const Json* map = j.Find("weight_map");
  DISCO_CHECK(map != nullptr && map->is_object(), ValueError)
      << index << ": no \"weight_map\" object";
  std::map<std::string, std::string> file_of;
  for (const auto& [name, file] : map->members()) {
    CheckPrintable(name, index + ": a weight_map name");
    if (file.is_string()) CheckPrintable(file.as_string(), index + ": a weight_map file");
    DISCO_CHECK(file.is_string() && !file.as_string().empty() &&
                    file.as_string().find('/') == std::string::npos,
                ValueError)
        << index << ": weight_map[\"" << name
        << "\"] is not a file name in the directory: " << file.Dump();
    file_of[name] = file.as_string();
  }
  std::map<std::string, std::map<std::string, TensorInfo>> shards;
  for (const auto& [name, file] : file_of) {
    if (shards.count(file) == 0) ck.ReadHeaderOf(Join(dir, file), &shards[file]);
  }
  for (const auto& [name, file] : file_of) {
    auto& in_file = shards[file];
    auto it = in_file.find(name);
    DISCO_CHECK(it != in_file.end(), ValueError)
        << index << " maps tensor '" << name << "' to " << file << ", which does not hold it";
    ck.tensors_[name] = it->second;
  }
  return ck;
}

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void Checkpoint::CheckWeights() const {
  const std::vector<WeightSpec> specs = WeightSpecs(config_);
  std::set<std::string> read;
  for (const WeightSpec& w : specs) read.insert(w.name);
  // A tensor the model would not read means a model it does not implement (biases the config does
  // not declare, Qwen3's q/k norms under another model_type): computing without it is silently
  // wrong. Older Llama checkpoints carry the rotary inverse frequencies, which the model computes
  // from rope_theta as Hugging Face does.
  const std::string inv_freq = ".self_attn.rotary_emb.inv_freq";
  for (const auto& [name, t] : tensors_) {
    const bool rotary = name.size() > inv_freq.size() &&
                        name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0;
    DISCO_CHECK(read.count(name) != 0 || rotary, ValueError)
        << "checkpoint " << dir_ << ": tensor '" << ShownName(name) << "' in " << t.file
        << " is not one this model reads (a " << config_.model_type
        << " model: " << config_.Summary()
        << "): a checkpoint of another architecture, or of other settings, is refused";
  }
  for (const WeightSpec& w : specs) {
    const TensorInfo* t = Find(w.name);
    DISCO_CHECK(t != nullptr, ValueError)
        << "checkpoint " << dir_ << ": tensor '" << w.name << "' is missing (the config needs "
        << ShapeString(w.shape) << ": " << w.why << ")";
    DISCO_CHECK(t->dtype != DType::kOther, ValueError)
        << "checkpoint " << dir_ << ": tensor '" << w.name << "' in " << t->file << " has dtype "
        << t->dtype_name << "; only F32, F16 and BF16 are read";
    DISCO_CHECK(t->shape == w.shape, ValueError)
        << "checkpoint " << dir_ << ": tensor '" << w.name << "' has shape "
        << ShapeString(t->shape) << ", but the config needs " << ShapeString(w.shape) << " ("
        << w.why << ")";
  }
}

void Checkpoint::ReadSlice(const TensorInfo& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                           DType to, void* dst) const {
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : (t.shape.empty() ? 1 : t.shape[0]);
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  DISCO_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows && 0 <= c0 && c0 <= c1 && c1 <= cols, ValueError)
      << "tensor '" << t.name << "': slice rows [" << r0 << ", " << r1 << ") columns [" << c0
      << ", " << c1 << ") is outside its shape " << ShapeString(t.shape);
  auto opened = files_.find(t.file);
  DISCO_ICHECK(opened != files_.end()) << t.file << " was not opened with the checkpoint";
  const File& f = opened->second->file;
  const int es = DTypeSize(t.dtype), ds = DTypeSize(to);
  const std::string what = "tensor '" + t.name + "'";
  auto* out = static_cast<char*>(dst);
  std::vector<char> scratch;
  // Reads `n` elements starting at element `first` of the tensor into `out`, converted.
  auto read_run = [&](int64_t first, int64_t n) {
    const uint64_t at = t.offset + static_cast<uint64_t>(first) * es;
    if (t.dtype == to) {
      f.ReadAt(out, static_cast<size_t>(n) * es, at, what);
      out += n * ds;
      return;
    }
    const int64_t per_chunk = static_cast<int64_t>(kChunkBytes) / es;
    scratch.resize(static_cast<size_t>(std::min(n, per_chunk)) * es);
    for (int64_t done = 0; done < n;) {
      const int64_t k = std::min(n - done, per_chunk);
      f.ReadAt(scratch.data(), static_cast<size_t>(k) * es, at + static_cast<uint64_t>(done) * es,
               what);
      ConvertElements(t.dtype, scratch.data(), k, to, out);
      out += k * ds;
      done += k;
    }
  };
  if (c0 == 0 && c1 == cols) {
    read_run(r0 * cols, (r1 - r0) * cols);  // whole rows: one contiguous run
  } else {
    for (int64_t r = r0; r < r1; ++r) read_run(r * cols + c0, c1 - c0);
  }
}

void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      DType dtype) {
  const int es = DTypeSize(dtype);
  std::map<std::string, Json> header;
  header["__metadata__"] = Json::Object({{"format", Json::String("pt")}});
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    std::vector<Json> dims;
    for (int64_t d : t.shape) {
      numel *= d;
      dims.push_back(Json::Int(d));
    }
    const uint64_t bytes = static_cast<uint64_t>(numel) * es;
    header[t.name] = Json::Object(
        {{"dtype", Json::String(DTypeName(dtype))},
         {"shape", Json::Array(dims)},
         {"data_offsets", Json::Array({Json::Int(static_cast<int64_t>(offset)),
                                       Json::Int(static_cast<int64_t>(offset + bytes))})}});
    offset += bytes;
  }
  std::string text = Json::Object(std::move(header)).Dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // the data starts 8-byte aligned
  File f(path, O_WRONLY | O_CREAT | O_TRUNC);
  unsigned char len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  f.Write(len, 8);
  f.Write(text.data(), text.size());
  const int64_t chunk = 1 << 18;
  std::vector<float> values(chunk);
  std::vector<char> bytes(static_cast<size_t>(chunk) * es);
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    for (int64_t begin = 0; begin < numel; begin += chunk) {
      const int64_t k = std::min(chunk, numel - begin);
      t.fill(begin, k, values.data());
      ConvertElements(DType::kF32, values.data(), k, dtype, bytes.data());
      f.Write(bytes.data(), static_cast<size_t>(k) * es);
    }
  }
  f.Close();
}

}  // namespace llama
