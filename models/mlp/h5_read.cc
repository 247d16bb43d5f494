#include "mlp/h5_read.h"

#include <disco/error.h>
#include <hdf5.h>

#include <cstdint>
#include <vector>

namespace disco {
namespace demo {
namespace {

// An HDF5 handle, closed with the scope.
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

}  // namespace

Tensor ReadWholeDataset(const std::string& path, const std::string& name) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are ours to say, not printed by HDF5
  const std::string where = "the reference's read of dataset '" + name + "' of " + path;
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  DISCO_CHECK(file.get() >= 0, ValueError) << where << ": cannot open the file";
  H5Handle dset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  DISCO_CHECK(dset.get() >= 0, ValueError) << where << ": no such dataset";
  H5Handle space(H5Dget_space(dset.get()), H5Sclose);
  const int ndim = H5Sget_simple_extent_ndims(space.get());
  DISCO_CHECK(ndim >= 0, ValueError) << where << ": cannot read its shape";
  std::vector<hsize_t> dims(static_cast<size_t>(ndim));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<int64_t> shape(dims.begin(), dims.end());
  H5Handle type(H5Dget_type(dset.get()), H5Tclose);
  const bool bf16 = H5Tget_size(type.get()) == 2;
  // bfloat16 as disco writes it (uint16) or h5py does (its own 2-byte type): the bits as they
  // are; float32 in either byte order: native floats.
  H5Handle memory(H5Tcopy(!bf16                                     ? H5T_NATIVE_FLOAT
                          : H5Tget_class(type.get()) == H5T_INTEGER ? H5T_NATIVE_UINT16
                                                                    : type.get()),
                  H5Tclose);
  Tensor out = Tensor::Empty(Shape(shape), DataType(bf16 ? "bfloat16" : "float32"));
  DISCO_CHECK(H5Dread(dset.get(), memory.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0,
              ValueError)
      << where << ": the read failed";
  return out;
}

}  // namespace demo
}  // namespace disco
