// The HDF5 tensor store's shared parts (io/h5_handles.h): the communicator, HDF5's errors and
// property lists, the dtype mapping, files and datasets, and writing a dataset.
#include "io/h5_handles.h"

#include <disco/worker.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <sstream>

#include "core/env.h"
#include "core/process_info.h"

namespace disco {
namespace io {

#if DISCO_HAVE_HDF5

namespace {

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

}  // namespace

// "disco.h5.load('file.h5', 'layers/0/w1')": how every error of one call starts.
std::string Where(const char* fn, const std::string& path, const std::string& dataset) {
  return std::string(fn) + "('" + path + "', '" + dataset + "')";
}

CommInfo Info(bool in_group) {
  CommInfo i{IoComm(in_group)};
  DISCO_MPI_CALL(MPI_Comm_rank(i.comm, &i.rank));
  DISCO_MPI_CALL(MPI_Comm_size(i.comm, &i.size));
  return i;
}

// HDF5 prints its error stack to stderr by default; disco reports errors itself.
void SilenceHdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

// The innermost message on HDF5's error stack (where the failure was found), then clears it. The
// cause the operating system or MPI gave (an errno, "No space left on device"), when one of the
// stack's entries carries it, follows in parentheses: "file write failed" alone does not say why.
std::string Hdf5Message() {
  struct Found {
    std::string innermost, cause;
  } found;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        auto* f = static_cast<Found*>(data);
        if (e->desc == nullptr) return 0;
        std::string desc = e->desc;
        if (n == 0) f->innermost = desc;
        if (f->cause.empty() && (desc.find("errno") != std::string::npos ||
                                 desc.find("MPI error string") != std::string::npos ||
                                 desc.find("error message") != std::string::npos)) {
          f->cause = desc;
        }
        return 0;
      },
      &found);
  H5Eclear2(H5E_DEFAULT);
  if (found.innermost.empty()) return "HDF5 gave no reason";
  if (found.cause.empty() || found.cause == found.innermost) return found.innermost;
  return found.innermost + " (" + found.cause + ")";
}

bool UseCollectiveIo() {
#if DISCO_HAVE_PARALLEL_HDF5
  return env::GetInt("DISCO_H5_INDEPENDENT", 0, 1) == 0;
#else
  return false;
#endif
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

// Why HDF5 could not open a file that is there and is HDF5: held by another program (HDF5's file
// lock, B9), or damaged.
std::string OpenFailure(const std::string& hdf5_message) {
  if (hdf5_message.find("unable to lock file") != std::string::npos) {
    return "the file is locked by another program that has it open (h5py or another HDF5 "
           "program writing it?): close it there first, or, if you know it is complete, set "
           "HDF5_USE_FILE_LOCKING=FALSE (" +
           hdf5_message + ")";
  }
  return "the file is damaged or truncated: " + hdf5_message;
}

// A plain read-only open with every failure named: no file, not HDF5, damaged or truncated.
Id OpenReadOnly(const std::string& path, const std::string& where) {
  DISCO_CHECK(access(path.c_str(), R_OK) == 0, ValueError)
      << where << ": cannot read the file: " << std::strerror(errno);
  // HDF5 opens by name, and a FIFO would block it: only regular files are opened.
  struct stat st;
  DISCO_CHECK(stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), ValueError)
      << where << ": not a regular file (a FIFO, a device or a directory cannot be an HDF5 file)";
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  DISCO_CHECK(is_hdf5 > 0, ValueError)
      << where << ": not an HDF5 file"
      << (is_hdf5 < 0 ? std::string(" (") + Hdf5Message() + ")" : std::string());
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  DISCO_CHECK(file.valid(), ValueError) << where << ": " << OpenFailure(Hdf5Message());
  return file;
}

// True when `name` names a dataset in `file`; every group on the way must exist first (H5Lexists
// fails, rather than answering false, on a missing intermediate group). A lookup HDF5 cannot do
// (a damaged file) is an error that says so, not "no such dataset".
bool HasDataset(hid_t file, const std::string& name, const std::string& where) {
  auto exists = [&](const std::string& link) {
    htri_t e = H5Lexists(file, link.c_str(), H5P_DEFAULT);
    DISCO_CHECK(e >= 0, ValueError)
        << where << ": the file is damaged (looking up '" << link << "': " << Hdf5Message() << ")";
    return e > 0;
  };
  for (size_t pos = name.find('/', 1); pos != std::string::npos; pos = name.find('/', pos + 1)) {
    if (!exists(name.substr(0, pos))) return false;
  }
  if (!exists(name)) return false;
  H5O_info_t info;
  DISCO_CHECK(H5Oget_info_by_name(file, name.c_str(), &info, H5P_DEFAULT) >= 0, ValueError)
      << where << ": the file is damaged (reading '" << name << "': " << Hdf5Message() << ")";
  return info.type == H5O_TYPE_DATASET;
}

Id OpenDataset(hid_t file, const std::string& name, const std::string& where) {
  DISCO_CHECK(!name.empty(), ValueError) << where << ": empty dataset name";
  DISCO_CHECK(HasDataset(file, name, where), ValueError)
      << where << ": no such dataset in the file";
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

FileIdentity IdentityOf(const std::string& path, const std::string& where) {
  struct stat st;
  DISCO_CHECK(stat(path.c_str(), &st) == 0, ValueError)
      << where << ": cannot read the file on " << GetProcessInfo().host << ": "
      << std::strerror(errno) << " (every worker reads it: it must be on a file system all nodes "
      << "share)";
  DISCO_CHECK(S_ISREG(st.st_mode), ValueError)
      << where << ": not a regular file (a FIFO, a device or a directory cannot be an HDF5 file)";
  return FileIdentity{static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino),
                      static_cast<int64_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// ---- Writing ------------------------------------------------------------------------------

Id OpenForWriting(const std::string& target, bool exists, MPI_Comm comm, const std::string& where) {
  Id fapl = comm != MPI_COMM_NULL ? FileAccess(comm) : Id(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  Id file(exists ? H5Fopen(target.c_str(), H5F_ACC_RDWR, fapl.get())
                 : H5Fcreate(target.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
          H5Fclose);
  DISCO_CHECK(file.valid(), RuntimeError)
      << where << ": cannot open '" << target << "' for writing: " << Hdf5Message();
  return file;
}

Id DatasetForWriting(const Id& file, const std::string& name, const std::vector<int64_t>& dims,
                     const Id& file_type, DLDataType dtype, const std::string& where,
                     bool* created) {
  if (created != nullptr) *created = false;
  if (HasDataset(file.get(), name, where)) {
    Id dset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    DISCO_CHECK(dset.valid(), RuntimeError)
        << where << ": cannot open the dataset: " << Hdf5Message();
    return dset;
  }
  std::vector<hsize_t> hdims(dims.begin(), dims.end());
  Id space(dims.empty() ? H5Screate(H5S_SCALAR)
                        : H5Screate_simple(static_cast<int>(hdims.size()), hdims.data(), nullptr),
           H5Sclose);
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Id dset(H5Dcreate2(file.get(), name.c_str(), file_type.get(), space.get(), lcpl.get(),
                     H5P_DEFAULT, H5P_DEFAULT),
          H5Dclose);
  DISCO_CHECK(dset.valid(), RuntimeError)
      << where << ": cannot create the dataset: " << Hdf5Message();
  if (created != nullptr) *created = true;
  if (dtype.code == kDLBfloat) {
    Id str(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(str.get(), 8);
    Id scalar(H5Screate(H5S_SCALAR), H5Sclose);
    Id attr(H5Acreate2(dset.get(), "dtype", str.get(), scalar.get(), H5P_DEFAULT, H5P_DEFAULT),
            H5Aclose);
    DISCO_H5_CALL(H5Awrite(attr.get(), str.get(), "bfloat16"), where);
  }
  return dset;
}

// Writes this rank's part of `dims` ([offset, offset + count) along `axis`; all of it for -1) from
// `shard`, or takes part selecting nothing.
void WriteSlab(const Id& dset, const std::vector<int64_t>& dims, int64_t axis, int64_t offset,
               int64_t count, DLDataType dtype, const Id& file_type, const Tensor& shard,
               bool select_mine, bool collective, const std::string& where) {
  Slab slab = SlabOf(dims, axis, offset, count);
  Id file_space(H5Dget_space(dset.get()), H5Sclose);
  Id mem_space = Select(file_space.get(), slab, !select_mine);
  Id mem_type = MemoryType(dtype, file_type.get());
  Id dxpl = collective ? Transfer() : Id(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  DISCO_H5_CALL(H5Dwrite(dset.get(), mem_type.get(), mem_space.get(), file_space.get(), dxpl.get(),
                         shard.data()),
                where);
}

// After a failed save, HDF5 may still hold the file open (a close that failed half-way); closing
// it now, while MPI is up, spares MPI_Finalize a close of a file it can no longer write.
void CloseFilesLeftOpen(const std::string& target) {
  ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE);
  if (n <= 0) return;
  std::vector<hid_t> ids(static_cast<size_t>(n));
  n = H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_FILE, ids.size(), ids.data());
  for (ssize_t i = 0; i < n; ++i) {
    char name[4096] = {0};
    if (H5Fget_name(ids[i], name, sizeof name) < 0 || target != name) continue;
    ssize_t m = H5Fget_obj_count(ids[i], H5F_OBJ_ALL & ~H5F_OBJ_FILE);
    std::vector<hid_t> objs(static_cast<size_t>(std::max<ssize_t>(m, 0)));
    if (m > 0) m = H5Fget_obj_ids(ids[i], H5F_OBJ_ALL & ~H5F_OBJ_FILE, objs.size(), objs.data());
    for (ssize_t j = 0; j < m; ++j) {
      if (H5Iget_type(objs[j]) == H5I_ATTR) {
        H5Aclose(objs[j]);
      } else {
        H5Oclose(objs[j]);
      }
    }
    H5Fclose(ids[i]);
  }
  H5Eclear2(H5E_DEFAULT);
}

#endif  // DISCO_HAVE_HDF5

}  // namespace io
}  // namespace disco
