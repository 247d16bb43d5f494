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
#include <disco/log.h>
#include <disco/worker.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <sstream>

#include "core/device_memory.h"
#include "core/env.h"
#include "core/process_info.h"
#include "core/trace.h"
#include "core/wait_record.h"
#include "io/progress.h"
#include "mpi/mpi_util.h"

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

// The directory of `path` ("." for a bare name).
std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Gives `fresh` (a new file about to replace `old`) the permission bits and, where this process
// may, the owner and group of `old`: a save replaces a file's content, not who may read it (a
// private 0600 checkpoint stays private). Nothing when `old` does not exist.
void KeepModeAndOwner(const std::string& old, const std::string& fresh, const std::string& where) {
  struct stat st;
  if (stat(old.c_str(), &st) != 0) return;
  DISCO_CHECK(chmod(fresh.c_str(), st.st_mode & 07777) == 0, RuntimeError)
      << where << ": cannot give '" << fresh << "' the mode of '" << old
      << "': " << std::strerror(errno);
  struct stat now;
  if (stat(fresh.c_str(), &now) == 0 && (now.st_uid != st.st_uid || now.st_gid != st.st_gid) &&
      chown(fresh.c_str(), st.st_uid, st.st_gid) != 0) {
    // Only root gives a file away; the group may still be kept.
    if (chown(fresh.c_str(), static_cast<uid_t>(-1), st.st_gid) != 0 || now.st_uid != st.st_uid) {
      DISCO_LOG_EVERY_N_SEC(WARN, 60)
          << where << ": '" << old << "' was owned by uid " << st.st_uid << "; the saved file "
          << "is owned by this process's user (only root can keep another owner)";
    }
  }
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
  /// Gives up ownership (the caller closes it).
  hid_t Release() {
    hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }
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

// Which file a path names, and its state: a file replaced (renamed over) or written has another.
struct FileIdentity {
  int64_t dev = 0, ino = 0, size = 0, mtime_ns = 0;
  bool operator==(const FileIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
};
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

// ---- disco.h5.load --------------------------------------------------------------------------

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

// A load or save of one dataset on this rank, in the timeline (DISCO_TRACE) and, while it runs, as
// the rank's activity (a hang verdict names it).
struct IoSpan {
  IoSpan(trace::Kind kind, const char* verb, const std::string& dataset, const std::string& path)
      : kind(kind), doing(Activity(verb, dataset, path)) {
    if (!trace::Enabled()) return;
    start = trace::NowNs();
    name = std::string(verb) + " " + dataset;
  }
  ~IoSpan() {
    if (start >= 0) trace::Record(kind, name, start, trace::NowNs(), bytes, 1);
  }
  IoSpan(const IoSpan&) = delete;
  IoSpan& operator=(const IoSpan&) = delete;
  // "HDF5 read of '.../ckpt/model.h5' dataset 'w'": the file's name first, its path cut from the
  // front to fit the activity's bytes (wait_record::kActivityBytes).
  static std::string Activity(const char* verb, const std::string& dataset,
                              const std::string& path) {
    constexpr size_t kPathBytes = 48;
    const std::string file =
        path.size() > kPathBytes ? "..." + path.substr(path.size() - (kPathBytes - 3)) : path;
    return std::string("HDF5 ") + verb + " of '" + file + "' dataset '" + dataset + "'";
  }
  trace::Kind kind;
  wait_record::Doing doing;
  std::string name;
  int64_t start = -1;
  int64_t bytes = 0;
};

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

// ---- disco.h5.save --------------------------------------------------------------------------

// The directory of `path` must be one directory that every rank sees, not one of the same name on
// each node (a node-local /tmp): rank 0 leaves a probe file named after this save's own file, and
// every rank must read it back. Otherwise each node would write a file of its own, and the
// MPI-IO writes meant for one file would never meet.
void CheckSharedDirectory(const std::string& target, const std::string& path, MPI_Comm comm,
                          int rank, const std::string& where) {
  const std::string probe = target + ".probe";
  Agreed(comm, where, [&] {
    if (rank != 0) return;
    FILE* f = std::fopen(probe.c_str(), "w");
    DISCO_CHECK(f != nullptr && std::fputs(target.c_str(), f) >= 0, RuntimeError)
        << where << ": cannot write '" << probe << "': " << std::strerror(errno);
    DISCO_CHECK(std::fclose(f) == 0, RuntimeError)
        << where << ": cannot write '" << probe << "': " << std::strerror(errno);
  });
  std::exception_ptr failed;
  try {
    Agreed(comm, where, [&] {
      std::string seen;
      if (FILE* f = std::fopen(probe.c_str(), "r")) {
        char buf[4096];
        size_t n = std::fread(buf, 1, sizeof buf, f);
        seen.assign(buf, n);
        std::fclose(f);
      }
      DISCO_CHECK(seen == target, RuntimeError)
          << where << ": the directory '" << DirectoryOf(path) << "' on " << GetProcessInfo().host
          << " (rank " << GetProcessInfo().rank
          << ") is not the one rank 0 writes to (it does not see rank 0's file there): every "
             "worker writes the file, so it must be on a file system all nodes share (a "
             "node-local /tmp is not)";
    });
  } catch (const Error&) {
    failed = std::current_exception();
  }
  if (rank == 0) std::remove(probe.c_str());
  if (failed) std::rethrow_exception(failed);
}

// `path`.partial.PID.N, named by rank 0 of `comm` and the same on every rank: no other save (of
// this job or another) writes to it.
std::string UniquePartialName(const std::string& path, MPI_Comm comm) {
  int rank = 0;
  DISCO_MPI_CALL(MPI_Comm_rank(comm, &rank));
  char name[64] = {0};
  if (rank == 0) {
    static std::mt19937_64 random{std::random_device{}()};
    std::snprintf(name, sizeof name, ".partial.%d.%06llu", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(random() % 1000000));  // NOLINT(runtime/int)
  }
  DISCO_MPI_CALL(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm));
  return path + name;
}

// Copies `from` to the new file `to` (its permission bits too); on failure `to` is removed and
// the error names the step and the cause (no space, no permission, a read-only filesystem).
void CopyFile(const std::string& from, const std::string& to, const std::string& where) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  DISCO_CHECK(in >= 0, RuntimeError)
      << where << ": cannot read '" << from << "' to copy it: " << std::strerror(errno);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } close_in{in};
  struct stat st;
  DISCO_CHECK(fstat(in, &st) == 0, RuntimeError)
      << where << ": cannot stat '" << from << "': " << std::strerror(errno);
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
  DISCO_CHECK(out >= 0, RuntimeError) << where << ": cannot create '" << to
                                      << "' (the copy a save adds to): " << std::strerror(errno);
  Closer close_out{out};
  fchmod(out, st.st_mode & 07777);  // open's mode passes through the umask
  auto fail = [&](const char* what) {
    int err = errno;
    unlink(to.c_str());
    DISCO_THROW(RuntimeError) << where << ": " << what << " '" << from << "' to '" << to
                              << "' (the copy a save adds to): " << std::strerror(err);
  };
  off_t left = st.st_size;
  bool plain = false;  // copy_file_range unsupported here: read and write
  std::vector<char> buf;
  while (left > 0) {
    ssize_t n = -1;
    if (!plain) {
      n = copy_file_range(in, nullptr, out, nullptr, static_cast<size_t>(left), 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        plain = true;
        continue;
      }
    } else {
      buf.resize(size_t{1} << 20);
      n = read(in, buf.data(), std::min<size_t>(buf.size(), static_cast<size_t>(left)));
      for (ssize_t done = 0; n > 0 && done < n;) {
        ssize_t w = write(out, buf.data() + done, static_cast<size_t>(n - done));
        if (w < 0) fail("cannot copy");
        done += w;
      }
    }
    if (n < 0) fail("cannot copy");
    if (n == 0) break;  // the file shrank meanwhile: what is there is copied
    left -= n;
  }
  if (close(out) != 0) {
    close_out.fd = -1;
    fail("cannot finish copying");
  }
  close_out.fd = -1;
}

// Why a write into `target` may have failed, from the filesystem's side (HDF5's MPI-IO driver
// reports only "file write failed"): read-only (EROFS), not writable (EACCES), or full (ENOSPC,
// fewer bytes free than the dataset needs). Empty when none of these holds.
std::string DiagnoseWriteFailure(const std::string& target, uint64_t needed) {
  const std::string dir = DirectoryOf(target);
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) != 0) return "";
  if ((fs.f_flag & ST_RDONLY) != 0) return "the filesystem is read-only (EROFS)";
  if (access(dir.c_str(), W_OK) != 0) {
    return std::string("the directory is not writable: ") + std::strerror(errno);
  }
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < needed + (uint64_t{1} << 20)) {
    return "No space left on device (ENOSPC): the filesystem has " + std::to_string(free_bytes) +
           " bytes free, the dataset needs " + std::to_string(needed);
  }
  return "";
}

// Before a collective write (rank 0; the caller agrees on the outcome): the space the new dataset's
// data take is there, so that no rank's part of the write can fail alone. ROMIO (MPICH's MPI-IO)
// returns ENOSPC only from the aggregator whose write failed while the other ranks wait inside
// the collective write, and HDF5 never reaches disco's agreement; Open MPI's OMPIO happens to
// fail on every rank, which no MPI promises. The dataset's bytes in the file are reserved
// (fallocate, the file's size unchanged), so that space others take between this check and the
// write cannot fail it either; where the filesystem cannot reserve, the free space must cover the
// data. A small margin stays for the metadata HDF5 writes when it closes the file.
void ReserveForCollectiveWrite(const std::string& target, const Id& dset, uint64_t needed,
                               const std::string& where) {
  constexpr uint64_t kMetadataMargin = uint64_t{64} << 10;
  uint64_t unreserved = needed;
  const haddr_t offset = H5Dget_offset(dset.get());
  auto full = [&](uint64_t free_bytes) {
    return where + ": cannot write '" + target + "': No space left on device (ENOSPC): the " +
           "filesystem has " + std::to_string(free_bytes) + " bytes free, the dataset needs " +
           std::to_string(needed);
  };
  struct statvfs fs;
  auto free_bytes = [&]() -> uint64_t {
    if (statvfs(DirectoryOf(target).c_str(), &fs) != 0) return UINT64_MAX;  // cannot tell
    return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  };
  if (needed > 0 && offset != HADDR_UNDEF) {
    const int fd = open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      const int rc = fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                               static_cast<off_t>(needed));
      const int err = errno;
      close(fd);
      if (rc == 0) unreserved = 0;
      if (rc != 0 && (err == ENOSPC || err == EDQUOT)) throw RuntimeError(full(free_bytes()));
    }
  }
  const uint64_t available = free_bytes();
  if (available != UINT64_MAX && available < unreserved + kMetadataMargin) {
    throw RuntimeError(full(available));
  }
}

// Runs a write step; a failure gets the filesystem's reason added when there is one.
template <typename F>
void WriteStep(const std::string& target, uint64_t needed, F step) {
  try {
    step();
  } catch (const Error& e) {
    std::string why = DiagnoseWriteFailure(target, needed);
    if (why.empty()) throw;
    throw RuntimeError(std::string(e.what()) + " (" + why + ")");
  }
}

// The file and dataset a save writes; closed on every rank in the same order.
struct WriteState {
  Id file;
  Id dset;
  // A failed close is an error like a failed write (HDF5 writes metadata when it closes).
  void Close(const std::string& where) {
    dset.Reset();
    hid_t f = file.Release();
    DISCO_H5_CALL(H5Fclose(f), where);
  }
};

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
                     bool* created = nullptr) {
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

// What each rank tells the others about its shard before anything is written.
struct ShardInfo {
  int64_t ok = 0;
  int64_t dtype = 0;
  int64_t ndim = 0;
  int64_t dims[kMaxDims] = {0};
};

void Save(const std::string& given_path, const std::string& name, const Any& shard_arg,
          int64_t shard_axis, bool in_group, bool in_place) {
  IoSpan span(trace::Kind::kH5Write, "write", name, given_path);
  SilenceHdf5();
  const std::string where = Where("disco.h5.save", given_path, name);
  const std::string path = in_place ? given_path : ResolveLinks(given_path, where);
  CommInfo c = Info(in_group);
  const Tensor* shard = std::get_if<Tensor>(&shard_arg.storage());
  if (shard != nullptr && shard->defined()) span.bytes = static_cast<int64_t>(shard->nbytes());

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
  // Every save writes a file of its own (a name no other save uses), which replaces `path` by a
  // rename only once it is complete: a new file is written from scratch, an existing one is copied
  // first and the dataset added to the copy (in_place: `path` is the caller's own partial file,
  // written directly). A failed or killed save never touches `path`.
  bool exists = access(path.c_str(), F_OK) == 0;
  int any_exists = 0, local_exists = exists ? 1 : 0;
  DISCO_MPI_CALL(MPI_Allreduce(&local_exists, &any_exists, 1, MPI_INT, MPI_MAX, c.comm));
  exists = any_exists != 0;
  const std::string target = in_place ? path : UniquePartialName(path, c.comm);
  // Every worker writes into the file (MPI-IO) or after another: the directory must be there,
  // and writable, on every node. A node without it is named, and nothing is written anywhere.
  Agreed(c.comm, where, [&] {
    const std::string dir = DirectoryOf(path);
    DISCO_CHECK(access(dir.c_str(), W_OK) == 0, RuntimeError)
        << where << ": the directory '" << dir << "' is not writable on " << GetProcessInfo().host
        << " (rank " << GetProcessInfo().rank << "): " << std::strerror(errno)
        << " (every worker writes the file: it must be on a file system all nodes share)";
  });
  if (c.size > 1) CheckSharedDirectory(target, path, c.comm, c.rank, where);
  Agreed(c.comm, where, [&] {
    if (c.rank != 0) return;
    if (exists) {
      Id file = OpenReadOnly(path, where);
      if (HasDataset(file.get(), name, where)) {
        Id dset = OpenDataset(file.get(), name, where);
        Id type(H5Dget_type(dset.get()), H5Tclose);
        DLDataType old = DTypeOf(dset.get(), type.get(), where);
        std::vector<int64_t> old_dims = DimsOf(dset.get(), where);
        DISCO_CHECK(old == dtype && old_dims == dims, ValueError)
            << where << ": the file already holds this dataset as " << DataTypeToString(old) << " "
            << ShapeString(old_dims) << "; the tensor is " << DataTypeToString(dtype) << " "
            << ShapeString(dims);
      }
      if (!in_place) CopyFile(path, target, where);
    } else if (!UseCollectiveIo() || in_place) {
      // Independent writes add their hyperslabs to a file rank 0 made.
      Id file(H5Fcreate(target.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      DISCO_CHECK(file.valid(), RuntimeError)
          << where << ": cannot create '" << target << "': " << Hdf5Message();
    }
  });
  const bool target_exists = exists || !UseCollectiveIo() || in_place;

  // Replicated: worker 0's copy is the one written.
  const bool select_mine = shard_axis >= 0 || c.rank == 0;
  uint64_t needed = DataTypeBytes(dtype);
  for (int64_t d : dims) needed *= static_cast<uint64_t>(d);
  const int64_t my_count = shard_axis >= 0 ? shard->shape()[shard_axis] : 0;
  std::exception_ptr failed;
  try {
    if (UseCollectiveIo()) {
      // Every collective HDF5 call is made by every rank in the same order, each step agreed
      // before the next: a rank whose write failed must not close the file (a collective call)
      // while the others flush it (another one).
      WriteState st;
      auto step = [&](auto fn) { Agreed(c.comm, where, [&] { WriteStep(target, needed, fn); }); };
      step([&] { st.file = OpenForWriting(target, target_exists, c.comm, where); });
      bool created = false;
      step([&] {
        st.dset = DatasetForWriting(st.file, name, dims, file_type, dtype, where, &created);
      });
      Agreed(c.comm, where, [&] {
        if (c.rank == 0) ReserveForCollectiveWrite(target, st.dset, created ? needed : 0, where);
      });
      step([&] {
        WriteSlab(st.dset, dims, shard_axis, offset, my_count, dtype, file_type, *shard,
                  select_mine, /*collective=*/true, where);
      });
      step([&] { DISCO_H5_CALL(H5Fflush(st.file.get(), H5F_SCOPE_LOCAL), where); });
      step([&] { st.Close(where); });
    } else {
      // One rank after another, each adding its hyperslab to the file on its own.
      for (int r = 0; r < c.size; ++r) {
        Agreed(c.comm, where, [&] {
          if (r != c.rank || !select_mine) return;
          WriteStep(target, needed, [&] {
            WriteState st;
            st.file = OpenForWriting(target, true, MPI_COMM_NULL, where);
            st.dset = DatasetForWriting(st.file, name, dims, file_type, dtype, where);
            WriteSlab(st.dset, dims, shard_axis, offset, my_count, dtype, file_type, *shard, true,
                      /*collective=*/false, where);
            DISCO_H5_CALL(H5Fflush(st.file.get(), H5F_SCOPE_LOCAL), where);
            st.Close(where);
          });
        });
      }
    }
    if (!in_place) {
      Agreed(c.comm, where, [&] {
        if (c.rank != 0) return;
        KeepModeAndOwner(path, target, where);
        DISCO_CHECK(std::rename(target.c_str(), path.c_str()) == 0, RuntimeError)
            << where << ": cannot rename '" << target << "' to '" << path
            << "': " << std::strerror(errno);
      });
    }
  } catch (const Error&) {
    failed = std::current_exception();
  }
  if (failed) {
    // The save's own file goes (in_place: the caller removes its partial file); `path` was never
    // written. The error is the cause's, whatever the clean-up meets.
    if (c.rank == 0 && !in_place) std::remove(target.c_str());
    CloseFilesLeftOpen(target);
    DISCO_MPI_CALL(MPI_Barrier(c.comm));
    std::rethrow_exception(failed);
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
            progress::Begin("loading", path);
            Tensor t = Load(path, dataset, shard_axis, in_group);
            progress::Done(static_cast<int64_t>(t.nbytes()));
            return t;
#else
            DISCO_THROW(ValueError) << "disco.h5.load: this build of disco has no HDF5";
            return Tensor();
#endif
          },
          {"path", "dataset", "shard_axis", "in_group"});
  for (bool in_place : {false, true}) {
    // disco.h5.save_in_place writes `path` directly: for h5::SaveTensors' own partial file.
    Registry::Register(in_place ? "disco.h5.save_in_place" : "disco.h5.save", true)
        .set_body_typed(
            [in_place](std::string path, std::string dataset, Any shard, int64_t shard_axis,
                       bool in_group) {
#if DISCO_HAVE_HDF5
              progress::Begin("saving", path);
              Save(path, dataset, shard, shard_axis, in_group, in_place);
              const Tensor* t = std::get_if<Tensor>(&shard.storage());
              progress::Done(t != nullptr ? static_cast<int64_t>(t->nbytes()) : 0);
#else
              DISCO_THROW(ValueError) << "disco.h5.save: this build of disco has no HDF5";
#endif
            },
            {"path", "dataset", "shard", "shard_axis", "in_group"});
  }
  // Used by h5::SaveTensors: worker 0 renames `from` to `to`, or removes `from` when `to` is "".
  Registry::Register("disco.h5.finish", true)
      .set_body_typed(
          [](std::string from, std::string to) {
            if (ThisWorker().worker_id != 0) return;
            if (to.empty()) {
              // A file that is not there is removed already (a read-only filesystem answers
              // EROFS, not ENOENT, for a missing one).
              if (access(from.c_str(), F_OK) != 0) return;
              DISCO_CHECK(std::remove(from.c_str()) == 0 || errno == ENOENT, RuntimeError)
                  << "disco.h5.finish: cannot remove '" << from << "': " << std::strerror(errno);
              return;
            }
            const std::string real = ResolveLinks(to, "disco.h5.finish");
            KeepModeAndOwner(real, from, "disco.h5.finish");
            DISCO_CHECK(std::rename(from.c_str(), real.c_str()) == 0, RuntimeError)
                << "disco.h5.finish: cannot rename '" << from << "' to '" << real
                << "': " << std::strerror(errno);
            progress::End(from, to);
          },
          {"from", "to"});
  // Appended by h5::LoadTensors after its loads: worker 0's closing progress line (io/progress.h).
  Registry::Register("disco.h5.load_done", true)
      .set_body_typed([](std::string path) { progress::End(path); }, {"path"});
}

}  // namespace

// The file a save replaces: `path`, or where its symbolic links lead. A save writes through a link
// (as `cp` and a shell's `>` do), so `latest.h5 -> step-100.h5` stays a link and step-100.h5 gets
// the data; a dangling link's target is created.
std::string ResolveLinks(const std::string& path, const std::string& where) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::vector<char> buf(PATH_MAX + 1);
    ssize_t n = readlink(p.c_str(), buf.data(), buf.size() - 1);
    DISCO_CHECK(n > 0, RuntimeError)
        << where << ": cannot read the symbolic link '" << p << "': " << std::strerror(errno);
    std::string target(buf.data(), static_cast<size_t>(n));
    p = target[0] == '/' ? target : DirectoryOf(p) + "/" + target;
  }
  DISCO_THROW(ValueError) << where << ": '" << path
                          << "' is a chain of more than 40 symbolic links (a loop?)";
}

void RegisterH5Builtins() {
  static std::once_flag once;
  std::call_once(once, RegisterAll);
}

}  // namespace io

}  // namespace disco
