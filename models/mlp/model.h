// The tensor-parallel MLP of disco-demo-mlp and disco-bench mlp: parameters, the layer as worker
// functions, checkpoint writing and loading, and the single-process reference, on disco's public
// API only. The model is told at the top of models/mlp/driver.h.
#ifndef DISCO_MODELS_MLP_MODEL_H_
#define DISCO_MODELS_MLP_MODEL_H_

#include <disco/disco.h>
#include <disco/h5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace disco {
namespace demo {

/// Sizes and options of a run.
struct Config {
  int64_t hidden = 1024;
  int64_t ffn = 4096;
  int64_t layers = 4;
  int64_t tokens = 128;
  int64_t steps = 10;
  int64_t warmup = 2;
  uint64_t seed = 1234;
  std::string dtype = "float32";
  std::string device = "cpu";  // "cuda": weights and activations on each rank's GPU, NCCL
  std::string checkpoint;      // empty: the default path; written when missing
  double tolerance = -1;       // < 0: the default for the dtype
  bool calls = false;          // steps call by call, not by replay of a captured graph
};

/// One parameter of a layer: its dataset name, shape and how it is sharded.
struct Param {
  std::string name;
  std::vector<int64_t> shape;
  int64_t axis;  // shard axis (-1: replicated)
  float scale;   // value = offset + scale * uniform
  float offset;
};

double NowMs();
/// The six parameters of layer `l`: w1, b1, w2, b2, ln_g, ln_b under "layers/<l>/".
std::vector<Param> LayerParams(const Config& c, int64_t l);
/// Element i of a float32 or bfloat16 tensor, as float.
float ToFloat(const Tensor& t, int64_t i);
/// The input batch (tokens, hidden) of `c`'s seed, and the same values as float.
Tensor MakeInput(const Config& c, std::vector<float>* as_float);

/// $TMPDIR/disco-u<uid>/mlp-DTYPE-hH-fF-lL-sSEED.h5 (disco::PrivateTempDir)
std::string DefaultCheckpoint(const Config& c);
/// Every worker generates its shards from the seed; h5::SaveTensors writes the file.
void WriteCheckpoint(Session& s, const Config& c, const std::string& path);
/// Loads every worker's shards and checks them against the model's sizes and dtype (errors name
/// the dataset); returns dataset name -> register.
std::map<std::string, DRef> LoadModel(Session& s, const Config& c, const std::string& path);
/// The full parameters on worker 0 only, for the single-worker baseline of disco-bench mlp.
std::map<std::string, DRef> MakeFullModelOnWorker0(Session& s, const Config& c);
/// True when this build runs the model on CUDA tensors (cuBLAS and the kernels of cuda_kernels.cu).
bool HaveCudaPath();
/// Copies every register of `w` (and `x`) to each worker's device (the one InitCCL bound).
void MoveToDevice(Session& s, std::map<std::string, DRef>* w);
DRef MoveToDevice(Session& s, const DRef& x);
/// Issues the L layer commands on `x` (demo.layer, or demo.layer_local with `local`); no sync.
DRef Forward(Session& s, const Config& c, const std::map<std::string, DRef>& w, const DRef& x,
             bool local = false);
/// The whole stack in this process alone, from the checkpoint file.
std::vector<float> Reference(const Config& c, const std::string& path,
                             const std::vector<float>& input);

/// Time each worker spent in layers since the last reset, and its peak RSS.
struct WorkerTimes {
  double compute_ms = 0;
  double allreduce_ms = 0;
  int64_t calls = 0;
  int64_t peak_kib = 0;
};
void ResetWorkerTimes(Session& s);
std::vector<WorkerTimes> GetWorkerTimes(Session& s);

}  // namespace demo
}  // namespace disco

#endif  // DISCO_MODELS_MLP_MODEL_H_
