// The HDF5 tensor store's builtins (public API: include/disco/h5.h).
#ifndef DISCO_IO_H5_H_
#define DISCO_IO_H5_H_

#include <disco/tensor.h>

#include <cstdint>
#include <string>

namespace disco {
namespace io {

/// shard_axis values with a meaning of their own (disco/h5.h's h5::kReplicate, h5::kAxisFromFile).
constexpr int64_t kReplicateAxis = -1;
constexpr int64_t kAxisFromFile = -2;

/// Reads a whole dataset into a host tensor in this process alone (no MPI; the dtype rules of
/// disco.h5.load). For single-process checks such as the demo's reference; errors name the file
/// and the dataset.
Tensor ReadWholeDataset(const std::string& path, const std::string& dataset);

/// The file a save of `path` replaces: `path`, or where its symbolic links lead (a save writes
/// through a link, as `cp` and a shell's `>` do). `where` names the caller in errors.
std::string ResolveLinks(const std::string& path, const std::string& where);

/// Registers disco.h5.load, disco.h5.save and disco.h5.finish (once; builds without HDF5 register
/// load and save as functions that raise a clear error).
void RegisterH5Builtins();

}  // namespace io
}  // namespace disco

#endif  // DISCO_IO_H5_H_
