// The HDF5 tensor store (include/disco/h5.h): the disco.h5.load / disco.h5.save builtins and the
// controller helpers.
//
// Every rank first checks what it can alone (the file, the dataset, its type and shape, the axis)
// with a plain read-only open, then the ranks of the communicator agree on success; only then do
// they open the file together for collective I/O. With parallel HDF5 that is MPI-IO with each
// rank's hyperslab; without it (or with DISCO_H5_INDEPENDENT=1) each rank reads its hyperslab on
// its own, and saves write one rank after another.
#include "io/h5.h"

#include <disco/config.h>
#include <disco/function.h>
#include <disco/h5.h>
#include <disco/session.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <sstream>

#include "core/env.h"
#include "session/mpi_util.h"

#if DISCO_HAVE_HDF5
#include <hdf5.h>
#endif

namespace disco {
namespace io {
namespace {

constexpr int kMaxDims = 8;

// "disco.h5.load('file.h5', 'layers/0/w1')": how every error of one call starts.
std::string Where(const char* fn, const std::string& path, const std::string& dataset) {
  return std::string(fn) + "('" + path + "', '" + dataset + "')";
}

// The communicator of a load or save: the world, or this worker's group (made once, by every
// worker in the same command).
MPI_Comm IoComm(bool in_group) {
  static mpi::Comm world, group;
  mpi::Comm& c = in_group ? group : world;
  if (c.get() == MPI_COMM_NULL) {
    const WorkerInfo& w = ThisWorker();
    c = mpi::Comm::Split(MPI_COMM_WORLD, in_group ? w.group_id : 0, w.worker_id);
  }
  return c.get();
}

struct CommInfo {
  MPI_Comm comm;
  int rank = 0;
  int size = 1;
};
CommInfo Info(bool in_group) {
  CommInfo i{IoComm(in_group)};
  DISCO_MPI_CALL(MPI_Comm_rank(i.comm, &i.rank));
  DISCO_MPI_CALL(MPI_Comm_size(i.comm, &i.size));
  return i;
}

// Runs `step`; then every rank learns whether all succeeded (see mpi::AgreeOnSuccess).
template <typename F>
void Agreed(MPI_Comm comm, const std::string& what, F step) {
  std::exception_ptr local;
  try {
    step();
  } catch (const Error&) {
    local = std::current_exception();
  }
  mpi::AgreeOnSuccess(comm, local, what.c_str());
}

#if DISCO_HAVE_HDF5

// ---- HDF5 handles and errors ----------------------------------------------------------------

/// Owns an HDF5 identifier and closes it with the matching H5?close.
class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() { Reset(); }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      Reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void Reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

// HDF5 prints its error stack to stderr by default; disco reports errors itself.
void SilenceHdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

// The innermost message on HDF5's error stack (where the failure was found), then clears it.
std::string Hdf5Message() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        if (n == 0 && e->desc != nullptr) *static_cast<std::string*>(data) = e->desc;
        return 0;
      },
      &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "HDF5 gave no reason" : msg;
}

#define DISCO_H5_CALL(expr, where)                                                           \
  do {                                                                                       \
    if ((expr) < 0)                                                                          \
      DISCO_THROW(RuntimeError) << (where) << ": " << #expr << " failed: " << Hdf5Message(); \
  } while (0)

bool UseCollectiveIo() {
#if DISCO_HAVE_PARALLEL_HDF5
  return env::GetInt("DISCO_H5_INDEPENDENT", 0, 1) == 0;
#else
  return false;
#endif
}

// MPI-IO hints for collective I/O: aggregators stage at most 16 MiB at a time (Open MPI's OMPIO
// defaults to 32 MiB per aggregator, which with the shard itself would break the "shard + 32 MiB"
// memory bound of a load).
MPI_Info IoHints() {
  static MPI_Info info = [] {
    MPI_Info i = MPI_INFO_NULL;
    DISCO_MPI_CALL(MPI_Info_create(&i));
    DISCO_MPI_CALL(MPI_Info_set(i, "cb_buffer_size", "16777216"));
    return i;
  }();
  return info;
}

Id FileAccess(MPI_Comm comm) {
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if DISCO_HAVE_PARALLEL_HDF5
  if (UseCollectiveIo()) H5Pset_fapl_mpio(fapl.get(), comm, IoHints());
#endif
  return fapl;
}

Id Transfer() {
  Id dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
#if DISCO_HAVE_PARALLEL_HDF5
  if (UseCollectiveIo()) H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE);
#endif
  return dxpl;
}

// ---- Types ----------------------------------------------------------------------------------

std::string StringAttribute(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return "";
  Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Id type(H5Aget_type(attr.get()), H5Tclose);
  if (!attr.valid() || !type.valid() || H5Tget_class(type.get()) != H5T_STRING) return "";
  if (H5Tis_variable_str(type.get()) > 0) {
    char* value = nullptr;
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (H5Aread(attr.get(), mem.get(), &value) < 0 || value == nullptr) return "";
    std::string out(value);
    H5free_memory(value);
    return out;
  }
  std::string out(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), out.data()) < 0) return "";
  return out.substr(0, out.find('\0'));
}

const char* ClassName(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    case H5T_STRING:
      return "string";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_COMPOUND:
      return "compound";
    case H5T_REFERENCE:
      return "reference";
    case H5T_ENUM:
      return "enum";
    case H5T_VLEN:
      return "variable-length";
    case H5T_ARRAY:
      return "array";
    default:
      return "unknown";
  }
}

// The dtype of a dataset's type, or a TypeError.
DLDataType DTypeOf(hid_t dset, hid_t type, const std::string& where) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  if (cls == H5T_INTEGER && (size == 1 || size == 2 || size == 4 || size == 8)) {
    bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size == 2 && !is_signed && StringAttribute(dset, "dtype") == "bfloat16") {
      return DLDataType{kDLBfloat, 16, 1};
    }
    return DLDataType{static_cast<uint8_t>(is_signed ? kDLInt : kDLUInt),
                      static_cast<uint8_t>(size * 8), 1};
  }
  if (cls == H5T_FLOAT) {
    if (size == 4) return DLDataType{kDLFloat, 32, 1};
    if (size == 8) return DLDataType{kDLFloat, 64, 1};
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    if (size == 2 && H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0) {
      DISCO_CHECK(H5Tget_order(type) == H5T_ORDER_LE, TypeError)
          << where << ": 16-bit floats must be little-endian";
      if (esize == 5 && msize == 10) return DLDataType{kDLFloat, 16, 1};
      if (esize == 8 && msize == 7) return DLDataType{kDLBfloat, 16, 1};
    }
  }
  if (cls == H5T_OPAQUE && size == 2) return DLDataType{kDLBfloat, 16, 1};  // h5py's bfloat16
  DISCO_THROW(TypeError)
      << where << ": the dataset's HDF5 type (" << ClassName(cls) << ", " << size
      << " bytes) is not one disco loads (integers of 1..8 bytes, float16, bfloat16, float32, "
         "float64)";
  return {};
}

bool IsHalfWidth(DLDataType t) {
  return t.bits == 16 && (t.code == kDLFloat || t.code == kDLBfloat);
}

// One family of HDF5's predefined types (native, or little-endian for files): integers of 1, 2, 4
// and 8 bytes, signed and unsigned, and the two IEEE floats. (The H5T_* names are run-time values:
// a family is built where it is used.)
struct TypeFamily {
  hid_t ints[4];
  hid_t uints[4];
  hid_t f32;
  hid_t f64;
};
hid_t Pick(DLDataType t, const TypeFamily& family) {
  const int k = t.bits == 8 ? 0 : t.bits == 16 ? 1 : t.bits == 32 ? 2 : 3;
  if (t.code == kDLInt) return family.ints[k];
  if (t.code == kDLUInt) return family.uints[k];
  return t.bits == 32 ? family.f32 : family.f64;
}

// The memory type to read a dataset of `file_type` into a tensor of `t`: a native type (HDF5
// converts byte order), or for float16/bfloat16 the file's own 2-byte type (bits copied as they
// are; uint16 data with the bfloat16 attribute reads as uint16).
Id MemoryType(DLDataType t, hid_t file_type) {
  if (IsHalfWidth(t)) {
    if (H5Tget_class(file_type) == H5T_INTEGER) return Id(H5Tcopy(H5T_NATIVE_UINT16), H5Tclose);
    return Id(H5Tcopy(file_type), H5Tclose);
  }
  const TypeFamily native = {
      {H5T_NATIVE_INT8, H5T_NATIVE_INT16, H5T_NATIVE_INT32, H5T_NATIVE_INT64},
      {H5T_NATIVE_UINT8, H5T_NATIVE_UINT16, H5T_NATIVE_UINT32, H5T_NATIVE_UINT64},
      H5T_NATIVE_FLOAT,
      H5T_NATIVE_DOUBLE};
  return Id(H5Tcopy(Pick(t, native)), H5Tclose);
}

// The file type disco writes for `t` (see the header); bfloat16 also gets its attribute.
Id FileType(DLDataType t) {
  if (t.code == kDLFloat && t.bits == 16) {
    // IEEE half, built as h5py builds it.
    Id half(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    H5Tset_fields(half.get(), 15, 10, 5, 0, 10);
    H5Tset_size(half.get(), 2);
    H5Tset_ebias(half.get(), 15);
    return half;
  }
  if (t.code == kDLBfloat) return Id(H5Tcopy(H5T_STD_U16LE), H5Tclose);
  const TypeFamily little_endian = {{H5T_STD_I8LE, H5T_STD_I16LE, H5T_STD_I32LE, H5T_STD_I64LE},
                                    {H5T_STD_U8LE, H5T_STD_U16LE, H5T_STD_U32LE, H5T_STD_U64LE},
                                    H5T_IEEE_F32LE,
                                    H5T_IEEE_F64LE};
  return Id(H5Tcopy(Pick(t, little_endian)), H5Tclose);
}

bool Saveable(DLDataType t) {
  if (t.lanes != 1) return false;
  if (t.code == kDLInt || t.code == kDLUInt) {
    return t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64;
  }
  if (t.code == kDLFloat) return t.bits == 16 || t.bits == 32 || t.bits == 64;
  return t.code == kDLBfloat && t.bits == 16;
}

// ---- Files and datasets ---------------------------------------------------------------------

// A plain read-only open with every failure named: no file, not HDF5, damaged or truncated.
Id OpenReadOnly(const std::string& path, const std::string& where) {
  DISCO_CHECK(access(path.c_str(), R_OK) == 0, ValueError)
      << where << ": cannot read the file: " << std::strerror(errno);
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  DISCO_CHECK(is_hdf5 > 0, ValueError)
      << where << ": not an HDF5 file"
      << (is_hdf5 < 0 ? std::string(" (") + Hdf5Message() + ")" : std::string());
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  DISCO_CHECK(file.valid(), ValueError)
      << where << ": the file is damaged or truncated: " << Hdf5Message();
  return file;
}

// True when `name` names a dataset in `file`; every group on the way must exist first (H5Lexists
// fails, rather than answering false, on a missing intermediate group).
bool HasDataset(hid_t file, const std::string& name) {
  for (size_t pos = name.find('/', 1); pos != std::string::npos; pos = name.find('/', pos + 1)) {
    if (H5Lexists(file, name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  }
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) return false;
  H5O_info_t info;
  if (H5Oget_info_by_name(file, name.c_str(), &info, H5P_DEFAULT) < 0) return false;
  return info.type == H5O_TYPE_DATASET;
}

Id OpenDataset(hid_t file, const std::string& name, const std::string& where) {
  DISCO_CHECK(!name.empty(), ValueError) << where << ": empty dataset name";
  DISCO_CHECK(HasDataset(file, name), ValueError) << where << ": no such dataset in the file";
  Id dset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  DISCO_CHECK(dset.valid(), ValueError) << where << ": cannot open the dataset: " << Hdf5Message();
  return dset;
}

std::vector<int64_t> DimsOf(hid_t dset, const std::string& where) {
  Id space(H5Dget_space(dset), H5Sclose);
  int nd = H5Sget_simple_extent_ndims(space.get());
  DISCO_CHECK(nd >= 0 && nd <= kMaxDims, ValueError)
      << where << ": the dataset has " << nd << " dimensions (disco handles up to " << kMaxDims
      << ")";
  hsize_t dims[kMaxDims] = {0};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  return std::vector<int64_t>(dims, dims + nd);
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << (dims.size() == 1 ? ",)" : ")");
  return os.str();
}

// A selection of `dims` that is [start, start + count) along `axis` (everything when axis < 0).
struct Slab {
  std::vector<hsize_t> start, count;
  bool empty = false;
};
Slab SlabOf(const std::vector<int64_t>& dims, int64_t axis, int64_t start, int64_t count) {
  Slab s;
  for (size_t d = 0; d < dims.size(); ++d) {
    bool split = static_cast<int64_t>(d) == axis;
    s.start.push_back(static_cast<hsize_t>(split ? start : 0));
    s.count.push_back(static_cast<hsize_t>(split ? count : dims[d]));
    if (s.count.back() == 0) s.empty = true;
  }
  return s;
}

// Selects `slab` in a file space and returns the matching memory space (none selected in both
// when the slab is empty, so the rank still takes part in collective I/O).
Id Select(hid_t file_space, const Slab& slab, bool none) {
  if (none || slab.empty) {
    H5Sselect_none(file_space);
    Id mem(H5Screate(H5S_NULL), H5Sclose);
    return mem;
  }
  if (slab.count.empty()) {  // a scalar dataset
    H5Sselect_all(file_space);
    return Id(H5Screate(H5S_SCALAR), H5Sclose);
  }
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, slab.start.data(), nullptr, slab.count.data(),
                      nullptr);
  return Id(H5Screate_simple(static_cast<int>(slab.count.size()), slab.count.data(), nullptr),
            H5Sclose);
}

// ---- disco.h5.load --------------------------------------------------------------------------

struct LoadPlan {
  DLDataType dtype{};
  std::vector<int64_t> dims;
  int64_t axis = -1;
};

Tensor Load(const std::string& path, const std::string& name, int64_t shard_axis, bool in_group) {
  SilenceHdf5();
  const std::string where = Where("disco.h5.load", path, name);
  CommInfo c = Info(in_group);
  LoadPlan plan;
  Agreed(c.comm, where, [&] {
    DISCO_CHECK(shard_axis >= h5::kAxisFromFile, ValueError)
        << where << ": shard_axis " << shard_axis
        << " is not a dimension, -1 (replicate) or -2 (the dataset's attribute)";
    Id file = OpenReadOnly(path, where);
    Id dset = OpenDataset(file.get(), name, where);
    Id type(H5Dget_type(dset.get()), H5Tclose);
    plan.dtype = DTypeOf(dset.get(), type.get(), where);
    plan.dims = DimsOf(dset.get(), where);
    plan.axis = shard_axis;
    if (shard_axis == h5::kAxisFromFile) {
      plan.axis = h5::kReplicate;
      if (H5Aexists(dset.get(), "shard_axis") > 0) {
        Id attr(H5Aopen(dset.get(), "shard_axis", H5P_DEFAULT), H5Aclose);
        DISCO_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &plan.axis) >= 0, ValueError)
            << where << ": the dataset's shard_axis attribute is not an integer";
      }
    }
    const int64_t nd = static_cast<int64_t>(plan.dims.size());
    DISCO_CHECK(plan.axis >= -1 && plan.axis < nd, ValueError)
        << where << ": shard axis " << plan.axis << " is out of range for a dataset of shape "
        << ShapeString(plan.dims) << " (-1 replicates)";
    if (plan.axis >= 0) {
      DISCO_CHECK(plan.dims[plan.axis] % c.size == 0, ValueError)
          << where << ": dimension " << plan.axis << " of shape " << ShapeString(plan.dims) << " ("
          << plan.dims[plan.axis] << ") cannot be split into " << c.size << " equal shards";
    }
  });

  int64_t part = plan.axis >= 0 ? plan.dims[plan.axis] / c.size : 0;
  Slab slab = SlabOf(plan.dims, plan.axis, part * c.rank, part);
  std::vector<int64_t> shape(slab.count.begin(), slab.count.end());
  Tensor out = Tensor::Empty(Shape(shape), plan.dtype);
  Agreed(c.comm, where, [&] {
    Id fapl = FileAccess(c.comm);
    Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    DISCO_CHECK(file.valid(), ValueError) << where << ": cannot open the file: " << Hdf5Message();
    Id dset = OpenDataset(file.get(), name, where);
    Id type(H5Dget_type(dset.get()), H5Tclose);
    Id mem_type = MemoryType(plan.dtype, type.get());
    Id file_space(H5Dget_space(dset.get()), H5Sclose);
    Id mem_space = Select(file_space.get(), slab, false);
    Id dxpl = Transfer();
    DISCO_H5_CALL(H5Dread(dset.get(), mem_type.get(), mem_space.get(), file_space.get(), dxpl.get(),
                          out.data()),
                  where);
  });
  return out;
}

// ---- disco.h5.save --------------------------------------------------------------------------

// What each rank tells the others about its shard before anything is written.
struct ShardInfo {
  int64_t ok = 0;
  int64_t dtype = 0;
  int64_t ndim = 0;
  int64_t dims[kMaxDims] = {0};
};

void Save(const std::string& path, const std::string& name, const Any& shard_arg,
          int64_t shard_axis, bool in_group) {
  SilenceHdf5();
  const std::string where = Where("disco.h5.save", path, name);
  CommInfo c = Info(in_group);
  const Tensor* shard = std::get_if<Tensor>(&shard_arg.storage());

  // Local checks, then every rank learns every shard's dtype and shape.
  ShardInfo mine;
  std::exception_ptr local;
  try {
    DISCO_CHECK(shard != nullptr && shard->defined(), TypeError)
        << where << ": 'shard' is not a tensor on worker " << ThisWorker().worker_id;
    DISCO_CHECK(shard->device().device_type == kDLCPU || shard->device().device_type == kDLCUDAHost,
                ValueError)
        << where << ": 'shard' is a " << shard->ToString() << "; save host tensors";
    DISCO_CHECK(Saveable(shard->dtype()), TypeError)
        << where << ": dtype " << DataTypeToString(shard->dtype()) << " cannot be saved";
    DISCO_CHECK(shard->ndim() <= kMaxDims, ValueError)
        << where << ": " << shard->ndim() << " dimensions (disco handles up to " << kMaxDims << ")";
    DISCO_CHECK(shard_axis >= -1 && shard_axis < shard->ndim(), ValueError)
        << where << ": shard axis " << shard_axis << " is out of range for a shard of "
        << shard->ndim() << " dimensions (-1: every worker holds the whole tensor)";
    DLDataType t = shard->dtype();
    mine.ok = 1;
    mine.dtype = (int64_t{t.code} << 16) | t.bits;
    mine.ndim = shard->ndim();
    for (int d = 0; d < shard->ndim(); ++d) mine.dims[d] = shard->shape()[d];
  } catch (const Error&) {
    local = std::current_exception();
  }
  std::vector<ShardInfo> all(c.size);
  DISCO_MPI_CALL(MPI_Allgather(&mine, sizeof(ShardInfo), MPI_BYTE, all.data(), sizeof(ShardInfo),
                               MPI_BYTE, c.comm));
  if (local) std::rethrow_exception(local);
  std::vector<int64_t> dims(mine.dims, mine.dims + mine.ndim);
  int64_t offset = 0;  // this rank's first index along the axis
  for (int r = 0; r < c.size; ++r) {
    const ShardInfo& o = all[r];
    DISCO_CHECK(o.ok, ValueError) << where << ": worker " << r
                                  << " of this save rejected its shard (its error says why)";
    DISCO_CHECK(o.dtype == mine.dtype && o.ndim == mine.ndim, TypeError)
        << where << ": the shards differ in dtype or number of dimensions (worker " << r << ")";
    for (int d = 0; d < mine.ndim; ++d) {
      DISCO_CHECK(d == shard_axis || o.dims[d] == mine.dims[d], ValueError)
          << where << ": shard of worker " << r << " has "
          << ShapeString(std::vector<int64_t>(o.dims, o.dims + o.ndim)) << ", this worker's "
          << ShapeString(dims) << "; they may differ only along axis " << shard_axis;
    }
    if (shard_axis >= 0 && r < c.rank) offset += o.dims[shard_axis];
  }
  if (shard_axis >= 0) {
    dims[shard_axis] = 0;
    for (const ShardInfo& o : all) dims[shard_axis] += o.dims[shard_axis];
  }
  // With in_group, the first group writes; the others have checked their shards and are done.
  if (in_group && ThisWorker().group_id != 0) return;

  const DLDataType dtype = shard->dtype();
  Id file_type = FileType(dtype);
  // An existing file gains (or overwrites) the dataset; a new one is written as .partial and takes
  // its name only when complete.
  bool exists = access(path.c_str(), F_OK) == 0;
  int any_exists = 0, local_exists = exists ? 1 : 0;
  DISCO_MPI_CALL(MPI_Allreduce(&local_exists, &any_exists, 1, MPI_INT, MPI_MAX, c.comm));
  exists = any_exists != 0;
  const std::string target = exists ? path : path + ".partial";
  bool had_dataset = false;
  Agreed(c.comm, where, [&] {
    if (!exists) return;
    Id file = OpenReadOnly(path, where);
    had_dataset = HasDataset(file.get(), name);
    if (!had_dataset) return;
    Id dset = OpenDataset(file.get(), name, where);
    Id type(H5Dget_type(dset.get()), H5Tclose);
    DLDataType old = DTypeOf(dset.get(), type.get(), where);
    std::vector<int64_t> old_dims = DimsOf(dset.get(), where);
    DISCO_CHECK(old == dtype && old_dims == dims, ValueError)
        << where << ": the file already holds this dataset as " << DataTypeToString(old) << " "
        << ShapeString(old_dims) << "; the tensor is " << DataTypeToString(dtype) << " "
        << ShapeString(dims);
  });

  auto write = [&](bool collective, bool select_mine) {
    Id fapl = collective ? FileAccess(c.comm) : Id(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    Id file(exists || !collective
                ? H5Fopen(target.c_str(), H5F_ACC_RDWR, fapl.get())
                : H5Fcreate(target.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
            H5Fclose);
    DISCO_CHECK(file.valid(), RuntimeError)
        << where << ": cannot open '" << target << "' for writing: " << Hdf5Message();
    std::vector<hsize_t> hdims(dims.begin(), dims.end());
    Id dset;
    if (HasDataset(file.get(), name)) {
      dset = Id(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    } else {
      Id space(dims.empty()
                   ? H5Screate(H5S_SCALAR)
                   : H5Screate_simple(static_cast<int>(hdims.size()), hdims.data(), nullptr),
               H5Sclose);
      Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
      H5Pset_create_intermediate_group(lcpl.get(), 1);
      dset = Id(H5Dcreate2(file.get(), name.c_str(), file_type.get(), space.get(), lcpl.get(),
                           H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
      if (dset.valid() && dtype.code == kDLBfloat) {
        Id str(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(str.get(), 8);
        Id scalar(H5Screate(H5S_SCALAR), H5Sclose);
        Id attr(H5Acreate2(dset.get(), "dtype", str.get(), scalar.get(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose);
        DISCO_H5_CALL(H5Awrite(attr.get(), str.get(), "bfloat16"), where);
      }
    }
    DISCO_CHECK(dset.valid(), RuntimeError)
        << where << ": cannot create the dataset: " << Hdf5Message();
    Slab slab = SlabOf(dims, shard_axis, offset, shard_axis >= 0 ? shard->shape()[shard_axis] : 0);
    Id file_space(H5Dget_space(dset.get()), H5Sclose);
    Id mem_space = Select(file_space.get(), slab, !select_mine);
    Id mem_type = MemoryType(dtype, file_type.get());
    Id dxpl = collective ? Transfer() : Id(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    DISCO_H5_CALL(H5Dwrite(dset.get(), mem_type.get(), mem_space.get(), file_space.get(),
                           dxpl.get(), shard->data()),
                  where);
    DISCO_H5_CALL(H5Fflush(file.get(), H5F_SCOPE_LOCAL), where);
  };
  // Replicated: worker 0's copy is the one written.
  const bool select_mine = shard_axis >= 0 || c.rank == 0;
  std::exception_ptr failed;
  try {
    if (UseCollectiveIo()) {
      Agreed(c.comm, where, [&] { write(true, select_mine); });
    } else {
      // One rank after another: rank 0 creates the file, the others add their hyperslabs.
      if (!exists && c.rank == 0) {
        Id file(H5Fcreate(target.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      }
      for (int r = 0; r < c.size; ++r) {
        Agreed(c.comm, where, [&] {
          if (r == c.rank && select_mine) write(false, true);
        });
      }
    }
  } catch (const Error&) {
    failed = std::current_exception();
  }
  // Undo a failed save: remove the new file, or the dataset it added to an existing one.
  if (failed) {
    if (c.rank == 0) {
      if (!exists) {
        std::remove(target.c_str());
      } else if (!had_dataset) {
        Id file(H5Fopen(target.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
        if (file.valid()) H5Ldelete(file.get(), name.c_str(), H5P_DEFAULT);
      }
    }
    DISCO_MPI_CALL(MPI_Barrier(c.comm));
    std::rethrow_exception(failed);
  }
  if (!exists) {
    Agreed(c.comm, where, [&] {
      if (c.rank == 0) {
        DISCO_CHECK(std::rename(target.c_str(), path.c_str()) == 0, RuntimeError)
            << where << ": cannot rename '" << target << "': " << std::strerror(errno);
      }
    });
  }
}

#endif  // DISCO_HAVE_HDF5

}  // namespace

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

namespace {

void RegisterAll() {
  Registry::Register("disco.h5.load", true)
      .set_body_typed(
          [](std::string path, std::string dataset, int64_t shard_axis, bool in_group) -> Tensor {
#if DISCO_HAVE_HDF5
            return Load(path, dataset, shard_axis, in_group);
#else
            DISCO_THROW(ValueError) << "disco.h5.load: this build of disco has no HDF5";
            return Tensor();
#endif
          },
          {"path", "dataset", "shard_axis", "in_group"});
  Registry::Register("disco.h5.save", true)
      .set_body_typed(
          [](std::string path, std::string dataset, Any shard, int64_t shard_axis, bool in_group) {
#if DISCO_HAVE_HDF5
            Save(path, dataset, shard, shard_axis, in_group);
#else
            DISCO_THROW(ValueError) << "disco.h5.save: this build of disco has no HDF5";
#endif
          },
          {"path", "dataset", "shard", "shard_axis", "in_group"});
  // Used by h5::SaveTensors: worker 0 renames `from` to `to`, or removes `from` when `to` is "".
  Registry::Register("disco.h5.finish", true)
      .set_body_typed(
          [](std::string from, std::string to) {
            if (ThisWorker().worker_id != 0) return;
            if (to.empty()) {
              DISCO_CHECK(std::remove(from.c_str()) == 0 || errno == ENOENT, RuntimeError)
                  << "disco.h5.finish: cannot remove '" << from << "': " << std::strerror(errno);
              return;
            }
            DISCO_CHECK(std::rename(from.c_str(), to.c_str()) == 0, RuntimeError)
                << "disco.h5.finish: cannot rename '" << from << "' to '" << to
                << "': " << std::strerror(errno);
          },
          {"from", "to"});
}

}  // namespace

void RegisterH5Builtins() {
  static std::once_flag once;
  std::call_once(once, RegisterAll);
}

}  // namespace io

namespace h5 {

std::map<std::string, DRef> LoadTensors(Session& session, const std::string& path,
                                        const std::vector<LoadEntry>& plan, bool in_group) {
  DRef load = session.GetGlobalFunc("disco.h5.load");
  std::map<std::string, DRef> out;
  for (const LoadEntry& e : plan) {
    DISCO_CHECK(out.count(e.name) == 0, ValueError)
        << "h5::LoadTensors: '" << e.name << "' appears twice in the plan";
    out[e.name] = session.CallPacked(load, path, e.name, e.shard_axis, in_group);
  }
  return out;
}

void SaveTensors(Session& session, const std::string& path, const std::vector<SaveEntry>& tensors,
                 bool in_group) {
  DRef save = session.GetGlobalFunc("disco.h5.save");
  DRef finish = session.GetGlobalFunc("disco.h5.finish");
  // A name of this save's own: two jobs saving the same path at once do not share a partial file.
  std::random_device random;
  const std::string partial =
      path + ".partial." + std::to_string(getpid()) + "." + std::to_string(random() % 1000000);
  try {
    for (const SaveEntry& e : tensors) {
      session.CallPacked(save, partial, e.name, e.shard, e.shard_axis, in_group);
    }
    session.SyncAll();
  } catch (const RemoteError&) {
    session.CallPacked(finish, partial, "");
    session.SyncAll();
    throw;
  }
  session.CallPacked(finish, partial, path);
  session.SyncAll();
}

}  // namespace h5
}  // namespace disco
