// The HDF5 tensor store. Builtins (docs/design.md#builtins), run by every worker in one command:
//
//   disco.h5.load(path, dataset, shard_axis, in_group) -> Tensor   this worker's shard
//   disco.h5.save(path, dataset, shard, shard_axis, in_group)      collective; the file holds the
//                                                                   whole tensor
//
// One dataset per tensor, its path the tensor's name (groups allowed: "layers/0/w1"). Integers and
// float32/float64 use HDF5's native types; float16 is the IEEE half type h5py writes; bfloat16 is
// written as uint16 data with the string attribute dtype="bfloat16" and read from that, from
// h5py's opaque 2-byte data, or from a 16-bit float type with an 8-bit exponent. A dataset's
// integer attribute "shard_axis" gives its default axis (see kAxisFromFile).
//
// Sharding: shard_axis = d splits dimension d into equal, contiguous parts, one per worker of the
// world (or of the worker's group with in_group), in worker order; -1 gives every worker the
// whole tensor. With parallel HDF5 every worker reads and writes only its own hyperslab, through
// MPI-IO collective I/O; no worker ever holds more of a tensor than its shard.
//
// Errors (missing file, not an HDF5 file, a truncated file, a missing dataset, an unsupported
// dtype, an axis out of range, a dimension the workers cannot share, saving over a dataset of
// another shape or dtype) name the file and the dataset; the workers agree on failure before any
// collective I/O, so every worker fails and none hangs. A save that fails removes what it created:
// a new file appears under its name only once it is complete.
#ifndef DISCO_H5_H_
#define DISCO_H5_H_

#include <disco/session.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace disco {
namespace h5 {

/// shard_axis: the whole tensor on every worker.
constexpr int64_t kReplicate = -1;
/// shard_axis: the dataset's "shard_axis" attribute, or kReplicate when it has none.
constexpr int64_t kAxisFromFile = -2;

/// One tensor of a load plan: its dataset name and how to shard it.
struct LoadEntry {
  std::string name;
  int64_t shard_axis = kAxisFromFile;
};

/// Loads every entry of `plan` from `path`: one disco.h5.load command per entry, issued back to
/// back. Errors surface as RemoteError at the next sync (as for any command). The shards are in
/// host memory; with `device` (ThisWorkerGpu(): each worker's own GPU, after InitCCL) they are
/// then copied there (disco.copy_to), the host copies freed.
std::map<std::string, DRef> LoadTensors(Session& session, const std::string& path,
                                        const std::vector<LoadEntry>& plan, bool in_group = false,
                                        DLDevice device = CPU());

/// One tensor of a save: its dataset name, the register holding each worker's shard, and the axis
/// the shards are concatenated along (kReplicate: every worker holds the whole tensor; worker 0's
/// copy is written).
struct SaveEntry {
  std::string name;
  DRef shard;
  int64_t shard_axis = kReplicate;
};

/// Writes `tensors` into a new file at `path`. The set goes to a partial file next to it first
/// (`path`.partial.PID.N), which replaces `path` only once every tensor is written; on failure the
/// partial file is removed, `path` is left as it was, and the RemoteError is rethrown. With
/// in_group, the first group's shards are written.
void SaveTensors(Session& session, const std::string& path, const std::vector<SaveEntry>& tensors,
                 bool in_group = false);

}  // namespace h5
}  // namespace disco

#endif  // DISCO_H5_H_
