// The MLP's single-process reference reads its weights whole, in this process alone: not through
// disco.h5.load, whose reads are collective over the workers.
#ifndef DISCO_MODELS_MLP_H5_READ_H_
#define DISCO_MODELS_MLP_H5_READ_H_

#include <disco/tensor.h>

#include <string>

namespace disco {
namespace demo {

/// The whole dataset `name` of the HDF5 file `path`, in host memory: float32, or bfloat16 when the
/// dataset's elements are 2 bytes (LoadModel has checked that it holds the run's dtype). Throws
/// disco::ValueError naming the file and the dataset when it cannot be read.
Tensor ReadWholeDataset(const std::string& path, const std::string& name);

}  // namespace demo
}  // namespace disco

#endif  // DISCO_MODELS_MLP_H5_READ_H_
