// disco-demo's decoder: the controller side. It loads a checkpoint sharded (each worker reads only
// its slices), prefills every prompt with its own length, then decodes greedily, each decode step
// a captured graph replayed as one frame (--calls: call by call), and prints the tokens and what
// the runs measured. Only disco's public API is used; the model's worker functions are in
// model.cc.
#include "llama/driver.h"

#include <disco/disco.h>
#include <disco/h5.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"
#include "llama/config.h"
#include "llama/kernels.h"
#include "llama/model.h"
#include "llama/partial_checkpoint.h"
#include "llama/safetensors.h"
#include "llama/text.h"

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
                          rows, o.max_new_tokens, !o.dump_logits.empty(), o.kv_dtype);
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
    std::vector<double> busy_s;       // per worker: time in compute and allreduce during the steps
    std::vector<double> allreduce_s;  // per worker: of busy_s, in allreduce (its waits included)
    std::vector<int64_t> tokens;      // [batch][max_new_tokens]
  };

  // Called after each step with the tokens so far ([batch][max_new_tokens], up to the step).
  using OnStep = std::function<void(int64_t step, const std::vector<int64_t>& tokens)>;

  Run Generate(bool replay, const OnStep& on_step = nullptr) {
    Run r;
    double t0 = NowS();
    s_.CallPacked(f_["llama.begin_prefill"], state_, tokens_, lengths_);
    Forward();
    s_.SyncAll();
    r.prefill_s = NowS() - t0;
    if (on_step) on_step(0, Tokens());
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
      if (on_step) on_step(k, Tokens());
    }
    DRef stats = s_.CallPacked(f_["llama.stats"], state_);
    for (int w = 0; w < s_.num_workers(); ++w) {
      Shape st = stats.DebugGetFromRemote(w).cast<Shape>();
      r.busy_s.push_back((st[0] + st[1]) * 1e-6);
      r.allreduce_s.push_back(st[1] * 1e-6);
    }
    r.tokens = Tokens();
    return r;
  }

  // The tokens generated so far: [batch][max_new_tokens].
  std::vector<int64_t> Tokens() {
    Tensor t = s_.CallPacked(f_["llama.tokens"], state_).DebugGetFromRemote(0).cast<Tensor>();
    return std::vector<int64_t>(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
  }

  // Every worker's stats: compute us, allreduce us, calls, peak RSS KiB, weight bytes, KV bytes,
  // weight bytes in huge pages.
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

// What a load read: the storage dtypes ("BF16", or "F16+F32" when they differ) and the bytes of
// the file each rank read (its shards, in their stored dtype).
struct LoadInfo {
  std::string storage;
  int64_t bytes_per_rank = 0;
};

int64_t ShardBytes(const WeightSpec& w, int ranks, int element_size) {
  int64_t e = element_size;
  for (int64_t d : ShardShape(w, ranks)) e *= d;
  return e;
}

void AddStorage(LoadInfo* info, const std::string& dtype) {
  if (("+" + info->storage + "+").find("+" + dtype + "+") != std::string::npos) return;
  info->storage += (info->storage.empty() ? "" : "+") + dtype;
}

// Loads the model on every worker: from a Hugging Face directory (each worker reads its slices)
// or from an HDF5 file in disco-demo's layout (h5::LoadTensors, sharded).
DRef LoadModel(Session& s, const std::string& path, const std::string& dtype, Config* config,
               LoadInfo* info) {
  const int n = s.num_workers();
  if (IsDirectory(path)) {
    // Checked here first, so that a bad checkpoint is one clear message.
    Checkpoint ck = Checkpoint::Open(path);
    ck.config().CheckSplit(n);
    ck.CheckWeights();
    *config = ck.config();
    for (const WeightSpec& w : WeightSpecs(*config)) {
      const TensorInfo* t = ck.Find(w.name);
      AddStorage(info, DTypeName(t->dtype));
      info->bytes_per_rank += ShardBytes(w, n, DTypeSize(t->dtype));
    }
    return s.CallPacked(s.GetGlobalFunc("llama.open"), path, dtype);
  }
  const std::string why = StatError(path);
  DISCO_CHECK(why.empty(), ValueError) << "--model " << path << ": " << why;
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
  // disco-demo --convert writes every weight in one dtype: the final norm's says which.
  const DLDataType stored =
      shards["model.norm.weight"].DebugGetFromRemote(0).cast<Tensor>().dtype();
  info->storage = "HDF5 " + disco::DataTypeToString(stored);
  for (const WeightSpec& w : WeightSpecs(*config)) {
    info->bytes_per_rank += ShardBytes(w, n, static_cast<int>(disco::DataTypeBytes(stored)));
  }
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
  double allreduce_s = 0;  // of busy_s (the busiest worker's), in allreduce
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
    const auto busiest = std::max_element(r.busy_s.begin(), r.busy_s.end());
    t.busy_s += *busiest;
    t.allreduce_s += r.allreduce_s[busiest - r.busy_s.begin()];
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
    // Where a replayed step goes, on the busiest worker: the rest of the step is the runtime's.
    const double per = 1e3 / (reps * static_cast<double>(t - 1));
    std::printf(
        "decode step by replay: compute %.3f ms, allreduce %.3f ms (its waits included), "
        "runtime %.3f ms\n",
        (replayed.busy_s - replayed.allreduce_s) * per, replayed.allreduce_s * per,
        std::max(0.0, replayed.decode_s - replayed.busy_s) * per);
  } else {
    // --max-new-tokens 1: no decode step; the lines keep their form.
    std::printf("decode: 0.0 tokens/s\n");
    std::printf("runtime share of a decode step: 0.00%% (%s), 0.00%% (%s)\n",
                o.calls ? "call by call" : "by replay", o.calls ? "by replay" : "call by call");
  }
}

// With --text: a generation whose text is printed as its tokens come (the first prompt's as each
// step ends); its tokens.
std::vector<int64_t> GenerateText(Generator& gen, const Options& o, TextPrompts* text) {
  Generator::Run r = gen.Generate(
      !o.calls, [text](int64_t k, const std::vector<int64_t>& tokens) { text->OnStep(k, tokens); });
  text->Finish();
  return r.tokens;
}

// Warm-up, (with --text) a generation whose text is printed as it comes, the timed generations
// both ways, and what they print.
void GenerateTimed(Session& s, const DRef& model, const Config& c, const Options& o,
                   TextPrompts* text) {
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
  const std::vector<int64_t> streamed =
      text != nullptr ? GenerateText(gen, o, text) : std::vector<int64_t>{};
  // The timed runs: `repeat` generations the chosen way, then as many the other way.
  std::vector<float> logits;
  Totals main_run = Timed(gen, o, !o.calls, true, &logits);
  Totals other_run = Timed(gen, o, o.calls, false, &logits);
  DISCO_CHECK(main_run.tokens == other_run.tokens, RuntimeError)
      << "the decode steps by replay and call by call generated different tokens";

  DISCO_CHECK(text == nullptr || streamed == main_run.tokens, RuntimeError)
      << "the generation whose text was printed and the timed ones gave different tokens";
  const int64_t b = gen.batch(), t = o.max_new_tokens;
  for (int64_t i = 0; i < b && text == nullptr; ++i) {
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
  std::printf("kv cache per rank: %s MiB (%s)\n", Mib(static_cast<double>(stats[0][5])).c_str(),
              o.kv_dtype.c_str());
  std::printf("peak rss per rank (MiB): %s\n", peaks.c_str());
  std::printf("weights per rank: %s MiB\n", Mib(static_cast<double>(stats[0][4])).c_str());
  if (o.device == "cpu") {  // weight_arena.h: 0 where the kernel gives no huge pages
    std::printf("weights in 2 MiB pages per rank: %s MiB\n",
                Mib(static_cast<double>(stats[0][6])).c_str());
    std::printf("kv cache in 2 MiB pages per rank: %s MiB\n",
                Mib(static_cast<double>(stats[0][7])).c_str());
  }
}

int RunChecked(Session& s, Options& o) {
  const int n = s.num_workers();
  StartWorkers(s, o);
  const std::string path = CheckpointPath(o);
  const std::string kernels = o.device == "cpu" ? CpuKernels() : "";  // DISCO_CPU_KERNELS checked
  double t0 = NowS();
  Config c;
  LoadInfo info;
  DRef model = LoadModel(s, path, o.dtype, &c, &info);
  s.SyncAll();
  const double load_s = NowS() - t0;
  std::printf(
      "disco-demo: %s, %d workers, %s (%.1fM parameters), %s (stored %s)%s, from %s, loaded in "
      "%.0f ms\n",
      c.model_type.c_str(), n, c.Summary().c_str(), static_cast<double>(c.NumParams()) / 1e6,
      o.dtype == "int8" ? "int8 (linear weights stored int8 Q8_0, the rest float32)"
                        : o.dtype.c_str(),
      info.storage.c_str(), o.device == "cuda" ? " on each worker's GPU" : "", path.c_str(),
      load_s * 1e3);
  const double bytes = static_cast<double>(info.bytes_per_rank);
  const bool gb = bytes >= 1e9;
  std::printf("loaded: %.2f %s in %.2f s (%.0f MB/s) per rank%s\n", bytes / (gb ? 1e9 : 1e6),
              gb ? "GB" : "MB", load_s, bytes / 1e6 / std::max(load_s, 1e-6),
              o.dtype == "int8" ? ", linear weights quantized to int8 Q8_0 there" : "");
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
  std::unique_ptr<TextPrompts> text;
  if (!o.texts.empty()) {
    DISCO_CHECK(IsDirectory(path), ValueError)
        << "--text needs the tokenizer of a checkpoint directory, and --model " << path
        << " is not one";
    text = std::make_unique<TextPrompts>(path, o.texts, c.vocab_size, o.max_new_tokens);
    o.prompts = text->ids();
  }
  CheckPrompts(o, c);
  GenerateTimed(s, model, c, o, text.get());
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
  DISCO_CHECK(o->texts.empty() || o->prompts.empty(), ValueError)
      << "give prompts as --text or as --prompt, not both";
  DISCO_CHECK(o->dtype != "int8" || (o->device == "cpu" && o->convert.empty()), ValueError)
      << "--dtype int8 quantizes the linear layers at load for the CPU's kernels: it runs on the "
         "CPU only and --convert writes float32 or bfloat16 (leave out "
      << (o->device != "cpu" ? "--device " + o->device : std::string("--convert")) << ")";
  DISCO_CHECK(o->kv_dtype != "float16" || o->device == "cpu", ValueError)
      << "--kv-dtype float16 is for the CPU (leave out --device " << o->device
      << ": a GPU's kv cache is float32)";
  DISCO_CHECK(o->texts.empty() || !o->model.empty(), ValueError)
      << "--text needs --model DIR, a checkpoint with its tokenizer (tokenizer.json or "
         "tokenizer.model); the default checkpoint has none";
  if (o->prompts.empty() && o->texts.empty()) {
    o->prompts = {{1, 5, 9}, {4, 2}, {7, 3, 11, 19, 2, 8}};
  }
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
