// The HDF5 tensor store's builtins (public API: include/disco/h5.h).
#ifndef DISCO_IO_H5_H_
#define DISCO_IO_H5_H_

namespace disco {
namespace io {

/// Registers disco.h5.load, disco.h5.save and disco.h5.finish (once; builds without HDF5 register
/// load and save as functions that raise a clear error).
void RegisterH5Builtins();

}  // namespace io
}  // namespace disco

#endif  // DISCO_IO_H5_H_
