// disco-demo's decoder: the controller side. It loads a checkpoint sharded (each worker reads only
// its slices), prefills every prompt with its own length, then decodes greedily, each decode step
// a captured graph replayed as one frame (--calls: call by call), and prints the tokens and what
// the runs measured. Only disco's public API is used; the model's worker functions are in
// model.cc.
#include "llama/driver.h"

#include <dirent.h>
#include <disco/disco.h>
#include <disco/h5.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/rng.h"
#include "llama/config.h"
#include "llama/kernels.h"
#include "llama/model.h"
#include "llama/safetensors.h"

namespace llama {
namespace {

using disco::Any;
using disco::DRef;
using disco::Session;
using disco::Shape;
using disco::Tensor;

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- The default checkpoint: a Hugging Face directory of random weights from a seed -----------

using demo_rng::NameHash;
using demo_rng::Uniform;

std::string DefaultCheckpointDir(const Options& o) {
  const Config& c = o.config;
  // In a directory only this user can create names in: no other user of a shared /tmp can plant
  // the checkpoint, or swap it in while this run writes it.
  return disco::PrivateTempDir() + "/llama-h" + std::to_string(c.hidden_size) + "-l" +
         std::to_string(c.num_hidden_layers) + "-a" + std::to_string(c.num_attention_heads) + "-k" +
         std::to_string(c.num_key_value_heads) + "-d" + std::to_string(c.head_dim) + "-f" +
         std::to_string(c.intermediate_size) + "-v" + std::to_string(c.vocab_size) +
         (c.tie_word_embeddings ? "-tied" : "") + "-s" + std::to_string(o.seed);
}

// Removes a partial checkpoint directory and the two files it may hold; true when it is gone.
bool RemovePartialDirectory(const std::string& path) {
  for (const char* f : {"/config.json", "/model.safetensors"}) ::unlink((path + f).c_str());
  return ::rmdir(path.c_str()) == 0;
}

// A checkpoint being written: DIR.partial.XXXXXX, removed unless Commit renames it to DIR. It is
// removed on an error (the destructor) and on SIGTERM/SIGINT (registered with the runtime); while
// it exists its writer holds a lock on it, so a later run removes one whose writer was killed
// (RemoveStalePartials).
class PartialCheckpoint {
 public:
  explicit PartialCheckpoint(const std::string& dir) {
    std::string tmpl = dir + ".partial.XXXXXX";
    DISCO_CHECK(mkdtemp(tmpl.data()) != nullptr, ValueError)
        << "cannot create a directory like " << tmpl << ": " << std::strerror(errno);
    path_ = tmpl;
    disco::RemoveOnAbnormalExit(path_);  // with the files in it
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) {
      const int err = errno;
      Remove();
      DISCO_THROW(ValueError) << "cannot lock " << path_ << ": " << std::strerror(err);
    }
  }
  ~PartialCheckpoint() { Remove(); }
  PartialCheckpoint(const PartialCheckpoint&) = delete;
  PartialCheckpoint& operator=(const PartialCheckpoint&) = delete;

  const std::string& path() const { return path_; }

  // Renames the checkpoint to `dir`, its files synced first. When that fails (a run of this user
  // made it first), `dir` must be a directory of this user's (not a link to one); the partial one
  // goes either way.
  void Commit(const std::string& dir) {
    const int err = disco::CommitRename(path_, dir);
    if (err == 0) {
      Forget();
      path_.clear();
      return;
    }
    Remove();
    struct stat st;
    DISCO_CHECK(::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid(),
                ValueError)
        << "cannot rename the checkpoint written to " << dir << ": " << std::strerror(err)
        << ", and " << dir << " is not a directory of yours";
  }

 private:
  void Forget() {
    disco::ForgetOnAbnormalExit(path_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void Remove() {
    if (path_.empty()) return;
    RemovePartialDirectory(path_);
    Forget();
    path_.clear();
  }

  std::string path_;
  int fd_ = -1;
};

// Removes the partial checkpoints in `parent` (this user's private directory) whose writer is gone:
// a run killed while it wrote one (SIGKILL, a crash) holds no lock on it any more.
void RemoveStalePartials(const std::string& parent) {
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.find(".partial.") == std::string::npos) continue;
    const std::string path = parent + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    // A minute old at least: a run that has just made its partial directory may not hold the
    // lock on it yet.
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_mtime < ::time(nullptr) - 60 &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (RemovePartialDirectory(path))
        std::printf("[checkpoint] removed a stale %s\n", path.c_str());
    }
    ::close(fd);
  }
  ::closedir(d);
}

// Writes config.json and model.safetensors (float32) into a new directory next to `dir`, then
// renames it to `dir`: a run never sees half a checkpoint, and two runs racing keep one.
void WriteDefaultCheckpoint(const std::string& dir, const Config& c, uint64_t seed) {
  RemoveStalePartials(dir.substr(0, dir.rfind('/')));
  PartialCheckpoint partial(dir);
  const std::string& tmp = partial.path();
  {
    FILE* f = std::fopen((tmp + "/config.json").c_str(), "w");
    DISCO_CHECK(f != nullptr, ValueError) << "cannot write " << tmp << "/config.json";
    const std::string text = c.ToJson() + "\n";
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    DISCO_CHECK(std::fclose(f) == 0 && ok, ValueError) << "cannot write " << tmp << "/config.json";
  }
  std::vector<TensorToWrite> tensors;
  for (const WeightSpec& w : WeightSpecs(c)) {
    const uint64_t stream = NameHash(w.name);
    float scale = 1.0f, offset = 0.0f;
    if (w.shape.size() == 1) {
      scale = 0.1f, offset = 1.0f;  // norms: about 1
    } else if (w.name != "model.embed_tokens.weight") {
      scale = 1.0f / std::sqrt(static_cast<float>(w.shape[1]));
    }
    tensors.push_back({w.name, w.shape, [=](int64_t begin, int64_t n, float* out) {
                         for (int64_t i = 0; i < n; ++i) {
                           out[i] = offset +
                                    scale * Uniform(seed, stream, static_cast<uint64_t>(begin + i));
                         }
                       }});
  }
  WriteSafetensors(tmp + "/model.safetensors", tensors, DType::kF32);
  partial.Commit(dir);
}

// ---- .npy ------------------------------------------------------------------------------------

void WriteNpy(const std::string& path, const std::vector<int64_t>& shape,
              const std::vector<float>& data) {
  std::string dims;
  for (int64_t d : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  if (shape.size() == 1) dims += ",";
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t prefix = 10;  // magic (6), version (2), header length (2)
  dict.append((64 - (prefix + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  DISCO_CHECK(f != nullptr, ValueError) << "cannot write " << path << ": " << std::strerror(errno);
  const unsigned char head[prefix] = {0x93,
                                      'N',
                                      'U',
                                      'M',
                                      'P',
                                      'Y',
                                      1,
                                      0,
                                      static_cast<unsigned char>(dict.size() & 0xFF),
                                      static_cast<unsigned char>(dict.size() >> 8)};
  bool ok = std::fwrite(head, 1, prefix, f) == prefix;
  ok = ok && std::fwrite(dict.data(), 1, dict.size(), f) == dict.size();
  ok = ok && std::fwrite(data.data(), sizeof(float), data.size(), f) == data.size();
  DISCO_CHECK(std::fclose(f) == 0 && ok, ValueError) << "cannot write " << path;
}

// ---- The run ----------------------------------------------------------------------------------

// The registers of a loaded model and the calls of a generation.
class Generator {
 public:
  Generator(Session& s, DRef model, const Config& c, const Options& o)
      : s_(s), c_(c), o_(o), model_(std::move(model)) {
    for (const char* name : {"llama.new_state", "llama.begin_prefill", "llama.begin_decode",
                             "llama.embed", "llama.attention", "llama.mlp", "llama.head",
                             "llama.tokens", "llama.logits", "llama.reset_stats", "llama.stats"}) {
      f_[name] = s.GetGlobalFunc(name);
    }
    int64_t max_len = 0, rows = 0;
    std::vector<int64_t> tokens, lengths;
    for (const auto& p : o.prompts) {
      max_len = std::max<int64_t>(max_len, static_cast<int64_t>(p.size()));
      rows += static_cast<int64_t>(p.size());
      tokens.insert(tokens.end(), p.begin(), p.end());
      lengths.push_back(static_cast<int64_t>(p.size()));
    }
    // Tensors, not Shapes: a Shape crosses the wire with at most 64 entries.
    tokens_ = Tensor::Empty(Shape{rows}, disco::DataType("int64"));
    std::memcpy(tokens_.data(), tokens.data(), tokens_.nbytes());
    lengths_ = Tensor::Empty(Shape{static_cast<int64_t>(lengths.size())}, disco::DataType("int64"));
    std::memcpy(lengths_.data(), lengths.data(), lengths_.nbytes());
    batch_ = static_cast<int64_t>(o.prompts.size());
    state_ = s.CallPacked(f_["llama.new_state"], model_, batch_, max_len + o.max_new_tokens - 1,
                          rows, o.max_new_tokens, !o.dump_logits.empty());
    s.SyncAll();
    // A decode step as one graph: its input is the step number.
    step_graph_ = s.Capture(1, [&](const std::vector<Any>& in) { DecodeCalls(in[0]); });
  }

  int64_t batch() const { return batch_; }
  int64_t prompt_tokens() const { return tokens_.numel(); }

  // One generation's timings and result.
  struct Run {
    double prefill_s = 0;
    std::vector<double> step_s;
    std::vector<double> busy_s;   // per worker: time in compute and allreduce during the steps
    std::vector<int64_t> tokens;  // [batch][max_new_tokens]
  };

  Run Generate(bool replay) {
    Run r;
    double t0 = NowS();
    s_.CallPacked(f_["llama.begin_prefill"], state_, tokens_, lengths_);
    Forward();
    s_.SyncAll();
    r.prefill_s = NowS() - t0;
    s_.CallPacked(f_["llama.reset_stats"], state_);
    for (int64_t k = 1; k < o_.max_new_tokens; ++k) {
      t0 = NowS();
      if (replay) {
        step_graph_.Replay({Any(k)});
      } else {
        DecodeCalls(Any(k));
      }
      s_.SyncAll();
      r.step_s.push_back(NowS() - t0);
    }
    DRef stats = s_.CallPacked(f_["llama.stats"], state_);
    for (int w = 0; w < s_.num_workers(); ++w) {
      Shape st = stats.DebugGetFromRemote(w).cast<Shape>();
      r.busy_s.push_back((st[0] + st[1]) * 1e-6);
    }
    Tensor t = s_.CallPacked(f_["llama.tokens"], state_).DebugGetFromRemote(0).cast<Tensor>();
    r.tokens.assign(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
    return r;
  }

  // Every worker's stats: compute us, allreduce us, calls, peak RSS KiB, weight bytes, KV bytes.
  std::vector<Shape> Stats() {
    DRef stats = s_.CallPacked(f_["llama.stats"], state_);
    std::vector<Shape> out;
    for (int w = 0; w < s_.num_workers(); ++w) {
      out.push_back(stats.DebugGetFromRemote(w).cast<Shape>());
    }
    return out;
  }

  // The logits of the last generation, gathered on the controller: [batch][step][vocab].
  std::vector<float> GatherLogits() {
    const int n = s_.num_workers();
    const int64_t t = o_.max_new_tokens, b = batch_, vl = c_.vocab_size / n;
    DRef local = s_.CallPacked(f_["llama.logits"], state_);
    Tensor host = Tensor::Empty(Shape{n, t, b, vl}, disco::DataType("float32"));
    if (o_.device == "cpu") {
      DRef all = s_.Empty(Shape{n, t, b, vl}, disco::DataType("float32"), disco::CPU(),
                          /*worker0_only=*/true);
      s_.Gather(local, false, all);
      s_.CopyFromWorker0(host, all);
    } else {
      // Under NCCL the collectives move GPU tensors; llama.logits' are host tensors: one by one.
      const size_t block = static_cast<size_t>(t * b * vl) * sizeof(float);
      for (int r = 0; r < n; ++r) {
        Tensor part = local.DebugGetFromRemote(r).cast<Tensor>();
        std::memcpy(host.data_as<char>() + r * block, part.data(), block);
      }
    }
    const float* src = host.data_as<float>();
    std::vector<float> out(static_cast<size_t>(b * t * c_.vocab_size));
    for (int r = 0; r < n; ++r) {
      for (int64_t step = 0; step < t; ++step) {
        for (int64_t i = 0; i < b; ++i) {
          std::memcpy(&out[(i * t + step) * c_.vocab_size + r * vl],
                      src + ((r * t + step) * b + i) * vl, static_cast<size_t>(vl) * 4);
        }
      }
    }
    return out;
  }

 private:
  void Forward() {
    s_.CallPacked(f_["llama.embed"], state_);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      s_.CallPacked(f_["llama.attention"], state_, l);
      s_.CallPacked(f_["llama.mlp"], state_, l);
    }
    s_.CallPacked(f_["llama.head"], state_);
  }
  void DecodeCalls(const Any& step) {
    s_.CallPacked(f_["llama.begin_decode"], state_, step);
    Forward();
  }

  Session& s_;
  const Config& c_;
  const Options& o_;
  DRef model_, state_;
  std::map<std::string, DRef> f_;
  Tensor tokens_, lengths_;
  int64_t batch_ = 0;
  disco::Graph step_graph_;
};

// Loads the model on every worker: from a Hugging Face directory (each worker reads its slices)
// or from an HDF5 file in disco-demo's layout (h5::LoadTensors, sharded).
DRef LoadModel(Session& s, const std::string& path, const std::string& dtype, Config* config) {
  const int n = s.num_workers();
  if (IsDirectory(path)) {
    // Checked here first, so that a bad checkpoint is one clear message.
    Checkpoint ck = Checkpoint::Open(path);
    ck.config().CheckSplit(n);
    ck.CheckWeights();
    *config = ck.config();
    return s.CallPacked(s.GetGlobalFunc("llama.open"), path, dtype);
  }
  DISCO_CHECK(Exists(path), ValueError) << "--model " << path << ": no such file or directory";
  auto ends_with = [&](const std::string& suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  DISCO_CHECK(!ends_with(".safetensors") && !ends_with(".json"), ValueError)
      << "--model " << path << ": give the Hugging Face checkpoint's directory (config.json and "
      << "safetensors), not one of its files; a file must be HDF5 (disco-demo --convert)";
  auto cfg = disco::h5::LoadTensors(s, path, {{"config.json", disco::h5::kReplicate}});
  Tensor text = cfg["config.json"].DebugGetFromRemote(0).cast<Tensor>();
  DISCO_CHECK(text.dtype().code == kDLUInt && text.dtype().bits == 8, ValueError)
      << path << ": dataset 'config.json' holds " << text.ToString() << ", not uint8 text";
  *config =
      Config::FromText(std::string(text.data_as<char>(), text.nbytes()), path + ": config.json");
  config->CheckSplit(n);
  DRef model = s.CallPacked(s.GetGlobalFunc("llama.new_model"), config->ToJson(), dtype);
  std::vector<disco::h5::LoadEntry> plan;
  for (const WeightSpec& w : WeightSpecs(*config)) {
    plan.push_back({w.name, w.split == Split::kRows      ? 0
                            : w.split == Split::kColumns ? 1
                                                         : disco::h5::kReplicate});
  }
  auto shards = disco::h5::LoadTensors(s, path, plan);
  DRef set = s.GetGlobalFunc("llama.set_weight");
  for (const auto& entry : plan) s.CallPacked(set, model, entry.name, shards[entry.name]);
  return model;
}

// disco-demo's HDF5 layout: one dataset per Hugging Face tensor name, whole, in the run's dtype,
// and "config.json", the config as uint8 text.
void Convert(Session& s, const DRef& model, const Config& c, const std::string& out) {
  std::vector<disco::h5::SaveEntry> entries;
  DRef weight = s.GetGlobalFunc("llama.weight");
  for (const WeightSpec& w : WeightSpecs(c)) {
    entries.push_back({w.name, s.CallPacked(weight, model, w.name),
                       w.split == Split::kRows      ? 0
                       : w.split == Split::kColumns ? 1
                                                    : disco::h5::kReplicate});
  }
  const std::string text = c.ToJson();
  Tensor host = Tensor::Empty(Shape{static_cast<int64_t>(text.size())}, disco::DataType("uint8"));
  std::memcpy(host.data(), text.data(), text.size());
  entries.push_back({"config.json", s.Broadcast(host), disco::h5::kReplicate});
  disco::h5::SaveTensors(s, out, entries);
}

std::string Mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", bytes / (1024.0 * 1024.0));
  return buf;
}

// Looks up every worker function (a worker without one fails here, first) and starts the
// collectives.
void StartWorkers(Session& s, const Options& o) {
  for (const std::string& name : WorkerFunctionNames()) s.GetGlobalFunc(name);
  // On GPUs, InitCCL("nccl") binds each worker to its own GPU, where llama.open and
  // llama.new_model then put the model.
  try {
    s.InitCCL(o.device == "cuda" ? "nccl" : "mpi");
  } catch (const disco::Error& e) {
    if (o.device != "cuda") throw;
    DISCO_THROW(ValueError) << "--device cuda needs a GPU per rank: " << e.what()
                            << " (on CPUs, leave out --device cuda)";
  }
}

// The checkpoint to load: --model, else the default checkpoint, written once.
std::string CheckpointPath(const Options& o) {
  if (!o.model.empty()) return o.model;
  std::string path = DefaultCheckpointDir(o);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    // Made by this user's earlier run, or planted: a shared temporary directory is anyone's.
    DISCO_CHECK(S_ISDIR(st.st_mode) && st.st_uid == geteuid(), ValueError)
        << "the default checkpoint " << path << " is "
        << (S_ISDIR(st.st_mode) ? "owned by uid " + std::to_string(st.st_uid)
                                : std::string("not a directory"))
        << ", not a directory of yours (uid " << geteuid()
        << "): remove it, set TMPDIR elsewhere, or pass --model DIR";
  } else {
    const double t0 = NowS();
    WriteDefaultCheckpoint(path, o.config, o.seed);
    std::printf("[checkpoint] wrote %s (seed %" PRIu64 ", %s) in %.0f ms\n", path.c_str(), o.seed,
                o.config.Summary().c_str(), (NowS() - t0) * 1e3);
  }
  return path;
}

// Refuses prompt tokens outside the vocabulary; warns when positions pass the model's maximum.
void CheckPrompts(const Options& o, const Config& c) {
  for (size_t i = 0; i < o.prompts.size(); ++i) {
    for (int64_t tok : o.prompts[i]) {
      DISCO_CHECK(tok >= 0 && tok < c.vocab_size, ValueError)
          << "--prompt " << i + 1 << ": token " << tok << " is outside the vocabulary [0, "
          << c.vocab_size << ")";
    }
  }

  size_t longest = 0;
  for (const auto& p : o.prompts) longest = std::max(longest, p.size());
  if (static_cast<int64_t>(longest) + o.max_new_tokens - 1 > c.max_position_embeddings) {
    std::fprintf(stderr,
                 "disco-demo: warning: positions reach %" PRId64
                 ", past max_position_embeddings %" PRId64 " (rotary embeddings go on anyway)\n",
                 static_cast<int64_t>(longest) + o.max_new_tokens - 1, c.max_position_embeddings);
  }
}

// The timed runs' sums: `repeat` generations one way.
struct Totals {
  double prefill_s = 0, decode_s = 0, busy_s = 0;
  std::vector<int64_t> tokens;
};

// `repeat` generations one way (`replay`); the main way's last one leaves its logits in `logits`
// when --dump-logits asks for them.
Totals Timed(Generator& gen, const Options& o, bool replay, bool main, std::vector<float>* logits) {
  Totals t;
  for (int64_t i = 0; i < o.repeat; ++i) {
    Generator::Run r = gen.Generate(replay);
    t.prefill_s += r.prefill_s;
    for (double d : r.step_s) t.decode_s += d;
    t.busy_s += *std::max_element(r.busy_s.begin(), r.busy_s.end());
    DISCO_CHECK(t.tokens.empty() || t.tokens == r.tokens, RuntimeError)
        << "two generations of the same prompts gave different tokens";
    t.tokens = r.tokens;
    if (main && i + 1 == o.repeat && !o.dump_logits.empty()) *logits = gen.GatherLogits();
  }
  return t;
}

// The rates of the main runs and the runtime's share of a decode step each way.
void PrintRates(const Generator& gen, const Options& o, const Totals& main_run,
                const Totals& other_run) {
  const int64_t b = gen.batch(), t = o.max_new_tokens;
  const double reps = static_cast<double>(o.repeat);
  std::printf("prefill: %.1f tokens/s\n", gen.prompt_tokens() * reps / main_run.prefill_s);
  if (t > 1) {
    std::printf("decode: %.1f tokens/s\n",
                static_cast<double>(b * (t - 1)) * reps / main_run.decode_s);
    auto share = [](const Totals& r) {
      return 100.0 * std::max(0.0, r.decode_s - r.busy_s) / r.decode_s;
    };
    const Totals& replayed = o.calls ? other_run : main_run;
    const Totals& called = o.calls ? main_run : other_run;
    if (o.calls) {
      std::printf("runtime share of a decode step: %.2f%% (call by call), %.2f%% (by replay)\n",
                  share(called), share(replayed));
    } else {
      std::printf("runtime share of a decode step: %.2f%% (by replay), %.2f%% (call by call)\n",
                  share(replayed), share(called));
    }
    std::printf("decode step: %.3f ms by replay, %.3f ms call by call (mean of %" PRId64
                " run(s) each)\n",
                replayed.decode_s / (reps * (t - 1)) * 1e3,
                called.decode_s / (reps * (t - 1)) * 1e3, o.repeat);
  } else {
    // --max-new-tokens 1: no decode step; the lines keep their form.
    std::printf("decode: 0.0 tokens/s\n");
    std::printf("runtime share of a decode step: 0.00%% (%s), 0.00%% (%s)\n",
                o.calls ? "call by call" : "by replay", o.calls ? "by replay" : "call by call");
  }
}

// Warm-up, the timed generations both ways, and what they print.
void GenerateTimed(Session& s, const DRef& model, const Config& c, const Options& o) {
  Generator gen(s, model, c, o);
  const double t_warm = NowS();
  for (int64_t i = 0; i < o.warmup; ++i) {
    gen.Generate(!o.calls);
    gen.Generate(o.calls);
  }
  if (o.warmup > 0) {
    std::printf("[warm-up] %" PRId64 " generation(s) each way in %.0f ms\n", o.warmup,
                (NowS() - t_warm) * 1e3);
  }
  // The timed runs: `repeat` generations the chosen way, then as many the other way.
  std::vector<float> logits;
  Totals main_run = Timed(gen, o, !o.calls, true, &logits);
  Totals other_run = Timed(gen, o, o.calls, false, &logits);
  DISCO_CHECK(main_run.tokens == other_run.tokens, RuntimeError)
      << "the decode steps by replay and call by call generated different tokens";

  const int64_t b = gen.batch(), t = o.max_new_tokens;
  for (int64_t i = 0; i < b; ++i) {
    std::string line = "generated:";
    for (int64_t k = 0; k < t; ++k) line += " " + std::to_string(main_run.tokens[i * t + k]);
    std::printf("%s\n", line.c_str());
  }
  if (!o.dump_logits.empty()) {
    WriteNpy(o.dump_logits, {b, t, c.vocab_size}, logits);
    std::printf("[logits] (%" PRId64 ", %" PRId64 ", %" PRId64 ") float32 written to %s\n", b, t,
                c.vocab_size, o.dump_logits.c_str());
  }
  PrintRates(gen, o, main_run, other_run);
  std::vector<Shape> stats = gen.Stats();
  std::string peaks;
  for (const Shape& st : stats) peaks += (peaks.empty() ? "" : " ") + Mib(st[3] * 1024.0);
  std::printf("kv cache per rank: %s MiB\n", Mib(static_cast<double>(stats[0][5])).c_str());
  std::printf("peak rss per rank (MiB): %s\n", peaks.c_str());
  std::printf("weights per rank: %s MiB\n", Mib(static_cast<double>(stats[0][4])).c_str());
}

int RunChecked(Session& s, Options& o) {
  const int n = s.num_workers();
  StartWorkers(s, o);
  const std::string path = CheckpointPath(o);
  const std::string kernels = o.device == "cpu" ? CpuKernels() : "";  // DISCO_CPU_KERNELS checked
  double t0 = NowS();
  Config c;
  DRef model = LoadModel(s, path, o.dtype, &c);
  s.SyncAll();
  std::printf(
      "disco-demo: llama, %d workers, %s (%.1fM parameters), %s%s, from %s, loaded in "
      "%.0f ms\n",
      n, c.Summary().c_str(), static_cast<double>(c.NumParams()) / 1e6, o.dtype.c_str(),
      o.device == "cuda" ? " on each worker's GPU" : "", path.c_str(), (NowS() - t0) * 1e3);
  if (!kernels.empty()) std::printf("kernels: %s\n", kernels.c_str());
  if (!o.convert.empty()) {
    DISCO_CHECK(o.device == "cpu", ValueError)
        << "--convert reads and writes on the host: leave out --device " << o.device;
    t0 = NowS();
    Convert(s, model, c, o.convert);
    std::printf("converted %s to %s (%s) in %.0f ms\n", path.c_str(), o.convert.c_str(),
                o.dtype.c_str(), (NowS() - t0) * 1e3);
    return 0;
  }
  CheckPrompts(o, c);
  GenerateTimed(s, model, c, o);
  return 0;
}

int Run(Session& s, Options& o) {
  try {
    return RunChecked(s, o);
  } catch (const disco::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "disco-demo: %s\n", e.what());
    return 1;
  }
}

}  // namespace

Options::Options() {
  Config& c = config;
  c.hidden_size = 256;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 0;
  c.intermediate_size = 768;
  c.vocab_size = 4096;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
}

void FinishOptions(Options* o) {
  if (o->prompts.empty()) o->prompts = {{1, 5, 9}, {4, 2}, {7, 3, 11, 19, 2, 8}};
  if (!o->model.empty()) return;
  // The default checkpoint's config must be one the model accepts.
  Config& c = o->config;
  if (c.head_dim == 0) {
    DISCO_CHECK(c.hidden_size % c.num_attention_heads == 0, ValueError)
        << "--hidden " << c.hidden_size << " is not a multiple of --heads " << c.num_attention_heads
        << " (give --head-dim)";
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c = Config::FromText(c.ToJson(), "the default checkpoint's config");
}

int DemoMain(int argc, char** argv, Options o) {
  return disco::Main(argc, argv, [&](Session& s) { return Run(s, o); });
}

}  // namespace llama
