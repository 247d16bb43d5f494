// disco.h5.load (include/disco/h5.h) and io::ReadWholeDataset.
//
// Every rank first checks what it can alone (the file, the dataset, its type and shape, the axis)
// with a plain read-only open, then the ranks of the communicator agree on success; only then do
// they open the file together for collective I/O. With parallel HDF5 that is MPI-IO with each
// rank's hyperslab; without it (or with DISCO_H5_INDEPENDENT=1) each rank reads its hyperslab on
// its own, and saves write one rank after another.
#include <disco/log.h>
#include <disco/worker.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/h5_handles.h"

namespace disco {
namespace io {

#if DISCO_HAVE_HDF5

namespace {

// What rank 0 finds in the file and every rank then uses: the ranks never look at the file on
// their own before they read it together, so a file replaced meanwhile cannot give them different
// plans (dtype, shape, axis).
struct LoadPlan {
  int64_t dtype_code = 0;
  int64_t ndim = 0;
  int64_t dims[kMaxDims] = {0};
  int64_t axis = -1;
  FileIdentity identity;
  DLDataType dtype() const {
    return DLDataType{static_cast<uint8_t>(dtype_code >> 16),
                      static_cast<uint8_t>((dtype_code >> 8) & 0xFF), 1};
  }
  std::vector<int64_t> shape() const { return std::vector<int64_t>(dims, dims + ndim); }
};

// The dataset's shard_axis attribute: an integer, or a ValueError (a float 0.9 is no axis).
int64_t AxisAttribute(hid_t dset, const std::string& where) {
  int64_t axis = kReplicateAxis;
  if (H5Aexists(dset, "shard_axis") <= 0) return axis;
  Id attr(H5Aopen(dset, "shard_axis", H5P_DEFAULT), H5Aclose);
  Id type(H5Aget_type(attr.get()), H5Tclose);
  Id space(H5Aget_space(attr.get()), H5Sclose);
  DISCO_CHECK(type.valid() && H5Tget_class(type.get()) == H5T_INTEGER &&
                  H5Sget_simple_extent_npoints(space.get()) == 1,
              ValueError)
      << where << ": the dataset's shard_axis attribute is not one integer";
  DISCO_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &axis) >= 0, ValueError)
      << where << ": cannot read the dataset's shard_axis attribute: " << Hdf5Message();
  return axis;
}

// Every filter the dataset was written with (compression, checksums) must be one this HDF5 has:
// otherwise the read would fail naming only a plugin directory (B8). h5py's LZF is the usual one.
void CheckFiltersAvailable(hid_t dset, const std::string& where) {
  Id dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!dcpl.valid()) return;
  const int n = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 0;
    char name[256] = {0};
    H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvalues,
                                     nullptr, sizeof name, name, &config);
    if (id < 0 || H5Zfilter_avail(id) > 0) continue;
    H5Eclear2(H5E_DEFAULT);  // a plugin search that found nothing leaves its error stack
    DISCO_THROW(ValueError)
        << where << ": the dataset was written with the HDF5 filter "
        << (name[0] != '\0' ? "'" + std::string(name) + "' " : std::string()) << "(id " << id
        << "), which this HDF5 does not have"
        << (id == 32000 ? " (h5py's LZF is built into h5py only)" : "")
        << "; rewrite the dataset with a standard filter, e.g. h5py's compression='gzip'";
  }
}

}  // namespace

Tensor Load(const std::string& path, const std::string& name, int64_t shard_axis, bool in_group) {
  IoSpan span(trace::Kind::kH5Read, "read", name, path);
  SilenceHdf5();
  const std::string where = Where("disco.h5.load", path, name);
  CommInfo c = Info(in_group);
  LoadPlan plan;
  Agreed(c.comm, where, [&] {
    DISCO_CHECK(shard_axis >= kAxisFromFile, ValueError)
        << where << ": shard_axis " << shard_axis
        << " is not a dimension, -1 (replicate) or -2 (the dataset's attribute)";
    if (c.rank != 0) return;
    plan.identity = IdentityOf(path, where);
    Id file = OpenReadOnly(path, where);
    Id dset = OpenDataset(file.get(), name, where);
    Id type(H5Dget_type(dset.get()), H5Tclose);
    DLDataType dtype = DTypeOf(dset.get(), type.get(), where);
    plan.dtype_code = (int64_t{dtype.code} << 16) | (int64_t{dtype.bits} << 8);
    std::vector<int64_t> dims = DimsOf(dset.get(), where);
    plan.ndim = static_cast<int64_t>(dims.size());
    std::copy(dims.begin(), dims.end(), plan.dims);
    CheckFiltersAvailable(dset.get(), where);
    plan.axis = shard_axis == kAxisFromFile ? AxisAttribute(dset.get(), where) : shard_axis;
    DISCO_CHECK(plan.axis >= -1 && plan.axis < plan.ndim, ValueError)
        << where << ": shard axis " << plan.axis << " is out of range for a dataset of shape "
        << ShapeString(dims) << " (-1 replicates)";
    if (plan.axis >= 0) {
      DISCO_CHECK(dims[plan.axis] % c.size == 0, ValueError)
          << where << ": dimension " << plan.axis << " of shape " << ShapeString(dims) << " ("
          << dims[plan.axis] << ") cannot be split into " << c.size << " equal shards";
    }
    DISCO_CHECK(IdentityOf(path, where) == plan.identity, RuntimeError)
        << where << ": the file changed while it was being checked (replaced or written by "
        << "another program); load it again once it is complete";
  });
  DISCO_MPI_CALL(MPI_Bcast(&plan, sizeof plan, MPI_BYTE, 0, c.comm));

  const std::vector<int64_t> dims = plan.shape();
  int64_t part = plan.axis >= 0 ? dims[plan.axis] / c.size : 0;
  Slab slab = SlabOf(dims, plan.axis, part * c.rank, part);
  std::vector<int64_t> shape(slab.count.begin(), slab.count.end());
  Tensor out;
  // The shard is allocated inside the agreed step: a worker short of memory fails, and says so,
  // with the others, instead of leaving them in the next collective.
  Agreed(c.comm, where, [&] { out = Tensor::Empty(Shape(shape), plan.dtype()); });
  const bool nothing_to_read =
      std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d == 0; });
  // The file every rank opens must be the one rank 0 planned from: the same inode, size and
  // modification time before the open, after it, and after the read. Each step is agreed before
  // the next collective HDF5 call, and the handles outlive the steps: a rank that finds the file
  // changed must not close it (collectively) while the others read it (collectively).
  auto same = [&] { return IdentityOf(path, where) == plan.identity; };
  const char* changed =
      ": the file changed since the load began (replaced or written by another program); every "
      "worker stops, nothing is returned; load it again";
  Agreed(c.comm, where, [&] { DISCO_CHECK(same(), RuntimeError) << where << changed; });
  Id fapl = FileAccess(c.comm);
  Id file, dset, type;
  Agreed(c.comm, where, [&] {
    file = Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    DISCO_CHECK(file.valid(), ValueError) << where << ": " << OpenFailure(Hdf5Message());
    DISCO_CHECK(same(), RuntimeError) << where << changed;
    dset = OpenDataset(file.get(), name, where);
    type = Id(H5Dget_type(dset.get()), H5Tclose);
    DISCO_CHECK(
        DTypeOf(dset.get(), type.get(), where) == plan.dtype() && DimsOf(dset.get(), where) == dims,
        RuntimeError)
        << where << changed;
  });
  if (nothing_to_read) return out;  // an empty dataset: no I/O at all (MPI-IO warns of 0 bytes)
  span.bytes = static_cast<int64_t>(out.nbytes());
  Agreed(c.comm, where, [&] {
    Id mem_type = MemoryType(plan.dtype(), type.get());
    Id file_space(H5Dget_space(dset.get()), H5Sclose);
    Id mem_space = Select(file_space.get(), slab, false);
    Id dxpl = Transfer();
    DISCO_H5_CALL(H5Dread(dset.get(), mem_type.get(), mem_space.get(), file_space.get(), dxpl.get(),
                          out.data()),
                  where);
  });
  Agreed(c.comm, where, [&] { DISCO_CHECK(same(), RuntimeError) << where << changed; });
  return out;
}

#endif  // DISCO_HAVE_HDF5

Tensor ReadWholeDataset(const std::string& path, const std::string& name) {
#if DISCO_HAVE_HDF5
  SilenceHdf5();
  const std::string where = Where("io::ReadWholeDataset", path, name);
  Id file = OpenReadOnly(path, where);
  Id dset = OpenDataset(file.get(), name, where);
  Id type(H5Dget_type(dset.get()), H5Tclose);
  DLDataType dtype = DTypeOf(dset.get(), type.get(), where);
  Tensor out = Tensor::Empty(Shape(DimsOf(dset.get(), where)), dtype);
  Id mem_type = MemoryType(dtype, type.get());
  DISCO_H5_CALL(H5Dread(dset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                where);
  return out;
#else
  DISCO_THROW(ValueError) << "io::ReadWholeDataset: this build of disco has no HDF5";
  return Tensor();
#endif
}

}  // namespace io
}  // namespace disco
