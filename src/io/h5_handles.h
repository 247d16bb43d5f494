// The HDF5 tensor store's shared parts (src/io/h5_load.cc, h5_save.cc): the communicator and the
// agreement of a load or save, RAII handles of HDF5 identifiers and HDF5's errors, the dtype
// mapping, opening files and datasets with every failure named, and writing a dataset. The
// interface is io/h5.h.
#ifndef DISCO_IO_H5_HANDLES_H_
#define DISCO_IO_H5_HANDLES_H_

#include <disco/any.h>
#include <disco/config.h>
#include <disco/error.h>
#include <disco/tensor.h>
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/trace.h"
#include "core/wait_record.h"
#include "io/h5.h"
#include "mpi/mpi_util.h"

#if DISCO_HAVE_HDF5
#include <hdf5.h>
#endif

namespace disco {
namespace io {

// ---- Any build (io/h5.cc) -------------------------------------------------------------------

// The directory of `path` ("." for a bare name).
std::string DirectoryOf(const std::string& path);

// Gives `fresh` (a new file about to replace `old`) the permission bits and, where this process
// may, the owner and group of `old`: a save replaces a file's content, not who may read it (a
// private 0600 checkpoint stays private). Nothing when `old` does not exist.
void KeepModeAndOwner(const std::string& old, const std::string& fresh, const std::string& where);

#if DISCO_HAVE_HDF5

// ---- The communicator and the agreement -----------------------------------------------------

constexpr int kMaxDims = 8;

// "disco.h5.load('file.h5', 'layers/0/w1')": how every error of one call starts.
std::string Where(const char* fn, const std::string& path, const std::string& dataset);

// The communicator of a load or save (the world, or this worker's group), this rank's place in it
// and its size.
struct CommInfo {
  MPI_Comm comm;
  int rank = 0;
  int size = 1;
};
CommInfo Info(bool in_group);

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
void SilenceHdf5();

// The innermost message on HDF5's error stack (where the failure was found), then clears it. The
// cause the operating system or MPI gave (an errno, "No space left on device"), when one of the
// stack's entries carries it, follows in parentheses: "file write failed" alone does not say why.
std::string Hdf5Message();

#define DISCO_H5_CALL(expr, where)                                                           \
  do {                                                                                       \
    if ((expr) < 0)                                                                          \
      DISCO_THROW(RuntimeError) << (where) << ": " << #expr << " failed: " << Hdf5Message(); \
  } while (0)

// Collective I/O (MPI-IO) unless this HDF5 is serial or DISCO_H5_INDEPENDENT=1.
bool UseCollectiveIo();
// The property lists of a file access and a transfer: with collective I/O, MPI-IO over `comm`
// (with hints) and collective transfers; plain ones otherwise.
Id FileAccess(MPI_Comm comm);
Id Transfer();

// ---- Types ----------------------------------------------------------------------------------

// The dtype of a dataset's type, or a TypeError.
DLDataType DTypeOf(hid_t dset, hid_t type, const std::string& where);

// The memory type to read a dataset of `file_type` into a tensor of `t`: a native type (HDF5
// converts byte order), or for float16/bfloat16 the file's own 2-byte type (bits copied as they
// are; uint16 data with the bfloat16 attribute reads as uint16).
Id MemoryType(DLDataType t, hid_t file_type);

// The file type disco writes for `t` (see the header); bfloat16 also gets its attribute.
Id FileType(DLDataType t);

// Whether disco saves tensors of dtype `t`.
bool Saveable(DLDataType t);

// ---- Files and datasets ---------------------------------------------------------------------

// Why HDF5 could not open a file that is there and is HDF5: held by another program (HDF5's file
// lock, B9), or damaged.
std::string OpenFailure(const std::string& hdf5_message);

// A plain read-only open with every failure named: no file, not HDF5, damaged or truncated.
Id OpenReadOnly(const std::string& path, const std::string& where);

// True when `name` names a dataset in `file`; every group on the way must exist first (H5Lexists
// fails, rather than answering false, on a missing intermediate group). A lookup HDF5 cannot do
// (a damaged file) is an error that says so, not "no such dataset".
bool HasDataset(hid_t file, const std::string& name, const std::string& where);

// The dataset `name` of `file`, or a ValueError saying why not.
Id OpenDataset(hid_t file, const std::string& name, const std::string& where);
// The dataset's dimensions (at most kMaxDims).
std::vector<int64_t> DimsOf(hid_t dset, const std::string& where);
// "(2, 3)", "(4,)": a shape as numpy prints it.
std::string ShapeString(const std::vector<int64_t>& dims);

// A selection of `dims` that is [start, start + count) along `axis` (everything when axis < 0).
struct Slab {
  std::vector<hsize_t> start, count;
  bool empty = false;
};
Slab SlabOf(const std::vector<int64_t>& dims, int64_t axis, int64_t start, int64_t count);

// Selects `slab` in a file space and returns the matching memory space (none selected in both
// when the slab is empty, so the rank still takes part in collective I/O).
Id Select(hid_t file_space, const Slab& slab, bool none);

// Which file a path names, and its state: a file replaced (renamed over) or written has another.
struct FileIdentity {
  int64_t dev = 0, ino = 0, size = 0, mtime_ns = 0;
  bool operator==(const FileIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
};
// The identity of the regular file `path`, or a ValueError.
FileIdentity IdentityOf(const std::string& path, const std::string& where);

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

// ---- Writing ------------------------------------------------------------------------------

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

// `target` opened for writing: created (truncated) when `exists` is false; collective MPI-IO over
// `comm` unless it is MPI_COMM_NULL.
Id OpenForWriting(const std::string& target, bool exists, MPI_Comm comm, const std::string& where);

// The dataset `name` of `file`, created (with its groups, and bfloat16's dtype attribute) when
// missing; *created says which.
Id DatasetForWriting(const Id& file, const std::string& name, const std::vector<int64_t>& dims,
                     const Id& file_type, DLDataType dtype, const std::string& where,
                     bool* created = nullptr);

// Writes this rank's part of `dims` ([offset, offset + count) along `axis`; all of it for -1) from
// `shard`, or takes part selecting nothing.
void WriteSlab(const Id& dset, const std::vector<int64_t>& dims, int64_t axis, int64_t offset,
               int64_t count, DLDataType dtype, const Id& file_type, const Tensor& shard,
               bool select_mine, bool collective, const std::string& where);

// After a failed save, HDF5 may still hold the file open (a close that failed half-way); closing
// it now, while MPI is up, spares MPI_Finalize a close of a file it can no longer write.
void CloseFilesLeftOpen(const std::string& target);

// ---- The builtins' bodies -------------------------------------------------------------------

/// disco.h5.load (h5_load.cc): this worker's shard of `name`.
Tensor Load(const std::string& path, const std::string& name, int64_t shard_axis, bool in_group);
/// disco.h5.save and, with in_place, disco.h5.save_in_place (h5_save.cc).
void Save(const std::string& given_path, const std::string& name, const Any& shard_arg,
          int64_t shard_axis, bool in_group, bool in_place);

#endif  // DISCO_HAVE_HDF5

}  // namespace io
}  // namespace disco

#endif  // DISCO_IO_H5_HANDLES_H_
