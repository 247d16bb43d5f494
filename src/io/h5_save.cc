// disco.h5.save (include/disco/h5.h): every rank checks its shard, then the ranks write one new
// file (collectively with MPI-IO, or one after another), which replaces the old one by a rename.
#include <disco/files.h>
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
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/process_info.h"
#include "io/h5_handles.h"

namespace disco {
namespace io {

#if DISCO_HAVE_HDF5

namespace {

// The directory of `path` must be one directory that every rank sees, not one of the same name on
// each node (a node-local /tmp): rank 0 leaves a probe file named after this save's own file, and
// every rank must read it back. Otherwise each node would write a file of its own, and the
// MPI-IO writes meant for one file would never meet.
void CheckSharedDirectory(const std::string& target, const std::string& path, MPI_Comm comm,
                          int rank, const std::string& where) {
  const std::string probe = target + ".probe";
  Agreed(comm, where, [&] {
    if (rank != 0) return;
    AtomicFileOptions options;  // a new file (O_EXCL, O_NOFOLLOW), as a plain open makes it
    options.mode = 0666;
    options.apply_umask = true;
    options.temp = probe;
    try {
      AtomicFile file(probe, options);
      file.Write(target);
      file.Release();  // removed below, once every rank has read it
    } catch (const RuntimeError& e) {
      DISCO_THROW(RuntimeError) << where << ": cannot write '" << probe << "': " << e.what();
    }
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

// Copies `from` into `to` (a new file, its permission bits too); on failure the error names the
// step and the cause (no space, no permission, a read-only filesystem), and `to`'s owner removes
// it.
void CopyFile(const std::string& from, AtomicFile& to, const std::string& where) {
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
  const int out = to.fd();
  fchmod(out, st.st_mode & 07777);  // the new file was made 0600
  auto fail = [&](const char* what) {
    DISCO_THROW(RuntimeError) << where << ": " << what << " '" << from << "' to '" << to.temp_path()
                              << "' (the copy a save adds to): " << std::strerror(errno);
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
  try {
    to.CloseFile();
  } catch (const RuntimeError& e) {
    DISCO_THROW(RuntimeError) << where << ": cannot finish copying '" << from
                              << "' (the copy a save adds to): " << e.what();
  }
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

// What each rank tells the others about its shard before anything is written.
struct ShardInfo {
  int64_t ok = 0;
  int64_t dtype = 0;
  int64_t ndim = 0;
  int64_t dims[kMaxDims] = {0};
};

// This rank's checks of its shard, alone.
ShardInfo CheckShard(const Tensor* shard, int64_t shard_axis, const std::string& where) {
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
  ShardInfo mine;
  mine.ok = 1;
  mine.dtype = (int64_t{t.code} << 16) | t.bits;
  mine.ndim = shard->ndim();
  for (int d = 0; d < shard->ndim(); ++d) mine.dims[d] = shard->shape()[d];
  return mine;
}

// The whole tensor, as every rank learns it from all the shards.
struct SaveShape {
  std::vector<int64_t> dims;
  int64_t offset = 0;  // this rank's first index along the axis
};

// Local checks, then every rank learns every shard's dtype and shape.
SaveShape AgreeOnShape(const Tensor* shard, int64_t shard_axis, const CommInfo& c,
                       const std::string& where) {
  ShardInfo mine;
  std::exception_ptr local;
  try {
    mine = CheckShard(shard, shard_axis, where);
  } catch (const Error&) {
    local = std::current_exception();
  }
  std::vector<ShardInfo> all(c.size);
  DISCO_MPI_CALL(MPI_Allgather(&mine, sizeof(ShardInfo), MPI_BYTE, all.data(), sizeof(ShardInfo),
                               MPI_BYTE, c.comm));
  if (local) std::rethrow_exception(local);
  SaveShape out{std::vector<int64_t>(mine.dims, mine.dims + mine.ndim)};
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
          << ShapeString(out.dims) << "; they may differ only along axis " << shard_axis;
    }
    if (shard_axis >= 0 && r < c.rank) out.offset += o.dims[shard_axis];
  }
  if (shard_axis >= 0) {
    out.dims[shard_axis] = 0;
    for (const ShardInfo& o : all) out.dims[shard_axis] += o.dims[shard_axis];
  }
  return out;
}

// The file a save writes. Every save writes a file of its own (a name no other save uses), which
// replaces `path` by a rename only once it is complete: a new file is written from scratch, an
// existing one is copied first and the dataset added to the copy (in_place: `path` is the caller's
// own partial file, written directly). A failed or killed save never touches `path`.
struct SaveTarget {
  std::string path;     // the file the save replaces
  std::string name;     // the file the ranks write: `path`.partial.PID.N, or `path` in place
  bool exists = false;  // `path` exists (on some rank)
  // Rank 0's hold on the partial file (not in place): removed unless committed.
  std::optional<AtomicFile> partial;
};

// Whether `path` exists on some rank; the name the ranks write.
void NameTarget(const std::string& path, bool in_place, const CommInfo& c, SaveTarget* t) {
  t->path = path;
  int any_exists = 0, local_exists = access(path.c_str(), F_OK) == 0 ? 1 : 0;
  DISCO_MPI_CALL(MPI_Allreduce(&local_exists, &any_exists, 1, MPI_INT, MPI_MAX, c.comm));
  t->exists = any_exists != 0;
  t->name = in_place ? path : UniquePartialName(path, c.comm);
}

// Every worker writes into the file (MPI-IO) or after another: the directory must be there, and
// writable, on every node. A node without it is named, and nothing is written anywhere.
void CheckDirectory(const SaveTarget& t, const CommInfo& c, const std::string& where) {
  Agreed(c.comm, where, [&] {
    const std::string dir = DirectoryOf(t.path);
    DISCO_CHECK(access(dir.c_str(), W_OK) == 0, RuntimeError)
        << where << ": the directory '" << dir << "' is not writable on " << GetProcessInfo().host
        << " (rank " << GetProcessInfo().rank << "): " << std::strerror(errno)
        << " (every worker writes the file: it must be on a file system all nodes share)";
  });
  if (c.size > 1) CheckSharedDirectory(t.name, t.path, c.comm, c.rank, where);
}

// The dataset `name` that `path` already holds, if any, must have the tensor's dtype and shape.
void CheckExistingDataset(const std::string& path, const std::string& name, DLDataType dtype,
                          const std::vector<int64_t>& dims, const std::string& where) {
  Id file = OpenReadOnly(path, where);
  if (!HasDataset(file.get(), name, where)) return;
  Id dset = OpenDataset(file.get(), name, where);
  Id type(H5Dget_type(dset.get()), H5Tclose);
  DLDataType old = DTypeOf(dset.get(), type.get(), where);
  std::vector<int64_t> old_dims = DimsOf(dset.get(), where);
  DISCO_CHECK(old == dtype && old_dims == dims, ValueError)
      << where << ": the file already holds this dataset as " << DataTypeToString(old) << " "
      << ShapeString(old_dims) << "; the tensor is " << DataTypeToString(dtype) << " "
      << ShapeString(dims);
}

// Rank 0 makes the file the ranks write, new (O_EXCL, O_NOFOLLOW: a name that exists, or a link
// planted there, is refused, never written through): a copy of `path` when it exists; otherwise
// an empty file, which rank 0 makes an HDF5 file for independent writes (they add their
// hyperslabs to it) and the ranks together truncate and create for collective ones.
void MakeTarget(const std::string& name, DLDataType dtype, const std::vector<int64_t>& dims,
                bool in_place, SaveTarget* t, const std::string& where) {
  if (t->exists) CheckExistingDataset(t->path, name, dtype, dims, where);
  if (in_place && t->exists) return;
  AtomicFileOptions options;
  options.mode = t->exists ? 0600 : 0666;  // a copy gets its original's bits (CopyFile)
  options.apply_umask = !t->exists;        // a new file, as HDF5 would make it
  options.temp = t->name;
  try {
    t->partial.emplace(t->path, options);
  } catch (const RuntimeError& e) {
    DISCO_THROW(RuntimeError) << where << ": " << e.what();
  }
  if (t->exists) {
    CopyFile(t->path, *t->partial, where);
  } else if (!UseCollectiveIo() || in_place) {
    t->partial->CloseFile();
    Id file(H5Fcreate(t->name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    DISCO_CHECK(file.valid(), RuntimeError)
        << where << ": cannot create '" << t->name << "': " << Hdf5Message();
  }
  t->partial->CloseFile();
  // In place, the file is the caller's partial file: it renames or removes it.
  if (in_place) t->partial->Release();
  if (in_place) t->partial.reset();
}

// What the ranks write: this rank's part of the tensor, into the agreed file.
struct SaveWrite {
  const std::string& name;
  const Tensor& shard;
  DLDataType dtype;
  const Id& file_type;
  const SaveShape& shape;
  int64_t shard_axis;
  uint64_t needed;  // the tensor's bytes
};

// Every collective HDF5 call is made by every rank in the same order, each step agreed before the
// next: a rank whose write failed must not close the file (a collective call) while the others
// flush it (another one).
void WriteCollectively(const SaveWrite& w, const std::string& target, bool target_exists,
                       const CommInfo& c, const std::string& where) {
  // Replicated: worker 0's copy is the one written.
  const bool select_mine = w.shard_axis >= 0 || c.rank == 0;
  const int64_t my_count = w.shard_axis >= 0 ? w.shard.shape()[w.shard_axis] : 0;
  WriteState st;
  auto step = [&](auto fn) { Agreed(c.comm, where, [&] { WriteStep(target, w.needed, fn); }); };
  step([&] { st.file = OpenForWriting(target, target_exists, c.comm, where); });
  bool created = false;
  step([&] {
    st.dset =
        DatasetForWriting(st.file, w.name, w.shape.dims, w.file_type, w.dtype, where, &created);
  });
  Agreed(c.comm, where, [&] {
    if (c.rank == 0) ReserveForCollectiveWrite(target, st.dset, created ? w.needed : 0, where);
  });
  step([&] {
    WriteSlab(st.dset, w.shape.dims, w.shard_axis, w.shape.offset, my_count, w.dtype, w.file_type,
              w.shard, select_mine, /*collective=*/true, where);
  });
  step([&] { DISCO_H5_CALL(H5Fflush(st.file.get(), H5F_SCOPE_LOCAL), where); });
  step([&] { st.Close(where); });
}

// One rank after another, each adding its hyperslab to the file on its own.
void WriteInTurn(const SaveWrite& w, const std::string& target, const CommInfo& c,
                 const std::string& where) {
  const bool select_mine = w.shard_axis >= 0 || c.rank == 0;
  const int64_t my_count = w.shard_axis >= 0 ? w.shard.shape()[w.shard_axis] : 0;
  for (int r = 0; r < c.size; ++r) {
    Agreed(c.comm, where, [&] {
      if (r != c.rank || !select_mine) return;
      WriteStep(target, w.needed, [&] {
        WriteState st;
        st.file = OpenForWriting(target, true, MPI_COMM_NULL, where);
        st.dset = DatasetForWriting(st.file, w.name, w.shape.dims, w.file_type, w.dtype, where);
        WriteSlab(st.dset, w.shape.dims, w.shard_axis, w.shape.offset, my_count, w.dtype,
                  w.file_type, w.shard, true, /*collective=*/false, where);
        DISCO_H5_CALL(H5Fflush(st.file.get(), H5F_SCOPE_LOCAL), where);
        st.Close(where);
      });
    });
  }
}

// Rank 0 gives the written file the mode and owner of the one it replaces and renames it onto it.
void CommitTarget(SaveTarget* t, const CommInfo& c, const std::string& where) {
  Agreed(c.comm, where, [&] {
    if (c.rank != 0) return;
    KeepModeAndOwner(t->path, t->name, where);
    try {
      t->partial->Commit();
    } catch (const RuntimeError& e) {
      DISCO_THROW(RuntimeError) << where << ": " << e.what();
    }
  });
}

}  // namespace

void Save(const std::string& given_path, const std::string& name, const Any& shard_arg,
          int64_t shard_axis, bool in_group, bool in_place) {
  IoSpan span(trace::Kind::kH5Write, "write", name, given_path);
  SilenceHdf5();
  const std::string where = Where("disco.h5.save", given_path, name);
  const std::string path = in_place ? given_path : ResolveLinks(given_path, where);
  CommInfo c = Info(in_group);
  const Tensor* shard = std::get_if<Tensor>(&shard_arg.storage());
  if (shard != nullptr && shard->defined()) span.bytes = static_cast<int64_t>(shard->nbytes());
  const SaveShape shape = AgreeOnShape(shard, shard_axis, c, where);
  // With in_group, the first group writes; the others have checked their shards and are done.
  if (in_group && ThisWorker().group_id != 0) return;

  const DLDataType dtype = shard->dtype();
  Id file_type = FileType(dtype);
  SaveTarget t;
  NameTarget(path, in_place, c, &t);
  CheckDirectory(t, c, where);
  Agreed(c.comm, where, [&] {
    if (c.rank == 0) MakeTarget(name, dtype, shape.dims, in_place, &t, where);
  });
  uint64_t needed = DataTypeBytes(dtype);
  for (int64_t d : shape.dims) needed *= static_cast<uint64_t>(d);
  const SaveWrite w{name, *shard, dtype, file_type, shape, shard_axis, needed};
  std::exception_ptr failed;
  try {
    if (UseCollectiveIo()) {
      WriteCollectively(w, t.name, t.exists || in_place, c, where);
    } else {
      WriteInTurn(w, t.name, c, where);
    }
    if (!in_place) CommitTarget(&t, c, where);
  } catch (const Error&) {
    failed = std::current_exception();
  }
  if (failed) {
    // The save's own file goes (in_place: the caller removes its partial file); `path` was never
    // written. The error is the cause's, whatever the clean-up meets.
    t.partial.reset();
    CloseFilesLeftOpen(t.name);
    DISCO_MPI_CALL(MPI_Barrier(c.comm));
    std::rethrow_exception(failed);
  }
}

#endif  // DISCO_HAVE_HDF5

}  // namespace io
}  // namespace disco
