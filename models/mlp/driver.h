// disco-demo-mlp (disco-demo --mlp): tensor-parallel MLP inference from an HDF5 checkpoint,
// checked against a single-process reference. Its own program, not a part of disco-demo: its CUDA
// path links cuBLAS, whose resident data (about 140 MiB per process) the decoder should not carry.
//
// The MLP model is a stack of L Megatron-style MLP blocks over a batch of T tokens of width H:
//
//   h = gelu(x W1 + b1)         W1 (H, F) split by columns: each worker holds F/N of them
//   y = allreduce_sum(h W2)     W2 (F, H) split by rows: each worker's partial product
//   x = layernorm(x + y + b2)   b2, gamma, beta replicated
//
// The controller writes a checkpoint with a fixed seed when none is given: every worker generates
// its own shard (values from a hash of the seed, the dataset name and the global index, so any
// number of workers writes the same file) and h5::SaveTensors writes them. The workers load
// their shards with h5::LoadTensors. The input batch goes from the controller to worker 0
// and out by broadcast; each layer is one command; the output comes back to the controller, which
// recomputes the whole stack alone from the checkpoint file and compares. Matrix products use
// OpenBLAS (one thread per rank); bfloat16 runs keep weights, activations and the allreduce in
// bfloat16 and multiply in float32.
#ifndef DISCO_MODELS_MLP_DRIVER_H_
#define DISCO_MODELS_MLP_DRIVER_H_

#include <disco/session.h>

#include "mlp/model.h"

namespace disco {
namespace demo {

/// The demo on the controller (rank 0, under disco::Main): its options are `c` (the command line
/// of src/tools/disco_demo_mlp.cc fills them). Prints the run and its check against the
/// reference; returns the exit code: 0 when the check passes, 1 when it fails or the run fails (a
/// bad checkpoint, a worker that failed: the message goes to stderr).
int Run(Session& s, const Config& c);

}  // namespace demo
}  // namespace disco

#endif  // DISCO_MODELS_MLP_DRIVER_H_
