// The HDF5 tensor store at every world size: h5py-written fixtures (tests/mpi/h5_fixtures.py)
// load on every worker as exact shards (every dtype, bfloat16 three ways, axes 0, 1, last and
// replicate, world and group sharding); disco's saves read back in h5py bit for bit; every
// bad-input case is a RemoteError naming file and dataset, and the session goes on.
#include <disco/disco.h>
#include <disco/h5.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "mpi/mpi_test_env.h"

namespace disco {
namespace {

using testing::g_session;
using testing::Load;
using testing::RemoteErrorOf;
using testing::Store;

// The fixture script; DISCO_TEST_SOURCE_DIR in the environment overrides where the tests live
// (the offline GPU bundle carries the script beside its programs).
const std::string kScript = [] {
  const char* dir = std::getenv("DISCO_TEST_SOURCE_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : DISCO_TEST_SOURCE_DIR) +
         "/mpi/h5_fixtures.py";
}();
const char* kDTypes[] = {"int8",   "int16",  "int32",   "int64",   "uint8",  "uint16",
                         "uint32", "uint64", "float16", "float32", "float64"};
const char* kBFloat16Variants[] = {"bf16/uint16_attr", "bf16/opaque", "bf16/float8exp"};
const std::vector<int64_t> kShape = {12, 24, 12};

// The interpreter of the fixture script: its shebang (Debian's python3 with python3-h5py), or
// DISCO_TEST_PYTHON (a python3 with h5py elsewhere, e.g. on a GPU node).
std::string Python() {
  const char* py = std::getenv("DISCO_TEST_PYTHON");
  return py != nullptr && *py != '\0' ? std::string(py) + " " : std::string();
}

// Element i (C order) of every fixture: see h5_fixtures.py.
double Formula(DLDataType t, int64_t i) {
  int64_t v = (7 * i + 3) % 100;
  if (t.code == kDLInt) return static_cast<double>(v - 50);
  if (t.code == kDLUInt) return static_cast<double>(v);
  return (v - 50) / 4.0;
}

// This worker's position among the workers a load or save shards over.
std::pair<int, int> RankAndSize(bool in_group) {
  const WorkerInfo& w = ThisWorker();
  if (!in_group) return {w.worker_id, w.num_workers};
  int gs = w.num_workers / w.num_groups;
  return {w.worker_id - w.group_id * gs, gs};
}

// The shape of this worker's shard of a tensor of `full` shape split along `axis` (-1: the whole
// tensor).
std::vector<int64_t> ShardDims(const Shape& full, int64_t axis, bool in_group) {
  std::vector<int64_t> dims(full.begin(), full.end());
  if (axis >= 0) dims[axis] /= RankAndSize(in_group).second;
  return dims;
}

// Calls visit(i, flat) for each element i (C order) of this worker's shard and its index `flat`
// in the whole tensor.
template <typename Visit>
void ForEachShardElement(const Shape& full, int64_t axis, bool in_group, Visit visit) {
  const int rank = RankAndSize(in_group).first;
  const std::vector<int64_t> dims = ShardDims(full, axis, in_group);
  const int nd = full.ndim();
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t flat = 0;
    for (int d = 0; d < nd; ++d) flat = flat * full[d] + idx[d] + (d == axis ? rank * dims[d] : 0);
    visit(i, flat);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

// Checks that `shard` is this worker's part of a tensor of `full` shape split along `axis` (-1:
// the whole tensor), every element equal to the formula at its global index.
DISCO_REGISTER_GLOBAL("test.h5.expect_shard")
    .set_body_typed([](Tensor shard, Shape full, int64_t axis, bool in_group, std::string dtype) {
      DISCO_CHECK(shard.dtype() == DataType(dtype), ValueError)
          << "dtype " << DataTypeToString(shard.dtype()) << ", expected " << dtype;
      std::vector<int64_t> want = ShardDims(full, axis, in_group);
      DISCO_CHECK(std::vector<int64_t>(shard.shape().begin(), shard.shape().end()) == want,
                  ValueError)
          << "worker " << ThisWorker().worker_id << ": shard shape " << shard.shape().ToString();
      ForEachShardElement(full, axis, in_group, [&](int64_t i, int64_t flat) {
        double got = Load(shard, i), expected = Formula(shard.dtype(), flat);
        DISCO_CHECK(got == expected, ValueError)
            << "worker " << ThisWorker().worker_id << ": element " << i << " (global " << flat
            << ") is " << got << ", expected " << expected;
      });
    });

// This worker's shard of a tensor of `full` shape along `axis`, filled by the formula.
DISCO_REGISTER_GLOBAL("test.h5.make_shard")
    .set_body_typed([](Shape full, int64_t axis, bool in_group, std::string dtype) {
      Tensor t = Tensor::Empty(Shape(ShardDims(full, axis, in_group)), DataType(dtype));
      ForEachShardElement(full, axis, in_group,
                          [&](int64_t i, int64_t flat) { Store(t, i, Formula(t.dtype(), flat)); });
      return t;
    });

// Switches every worker between collective and independent HDF5 I/O.
DISCO_REGISTER_GLOBAL("test.h5.set_independent").set_body_typed([](bool on) {
  setenv("DISCO_H5_INDEPENDENT", on ? "1" : "0", 1);
});

std::string ShapeArg(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

class H5Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_session->InitCCL("mpi");
    dir_ = testing::SharedTempDir("disco-h5-test");
    std::string cmd = Python() + kScript + " write " + dir_;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (needs Debian's python3-h5py)";
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  Session& s() { return *g_session; }
  DRef F(const std::string& name) { return s().GetGlobalFunc(name); }
  std::string Path(const std::string& file) { return dir_ + "/" + file; }
  std::string Fixtures() { return Path("fixtures.h5"); }
  DRef LoadOne(const std::string& path, const std::string& name, int64_t axis, bool in_group) {
    return s().CallPacked(F("disco.h5.load"), path, name, axis, in_group);
  }
  void ExpectShard(const DRef& t, const std::vector<int64_t>& full, int64_t axis, bool in_group,
                   const std::string& dtype) {
    s().CallPacked(F("test.h5.expect_shard"), t, Shape(full), axis, in_group, dtype);
  }
  // h5py reads datasets of `path` back and compares them with the formula: one python process
  // for all of them (each spec is DATASET:DTYPE:D0xD1x...).
  void CheckWithH5py(const std::string& path, const std::vector<std::string>& specs) {
    std::string cmd = Python() + kScript + " check " + path;
    for (const std::string& spec : specs) cmd += " " + spec;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static std::string Spec(const std::string& dataset, const std::string& dtype,
                          const std::vector<int64_t>& shape) {
    return dataset + ":" + dtype + ":" + ShapeArg(shape);
  }
  void Check(const std::string& what) { testing::ExpectNoRemoteError(s(), what); }
  // No partial file of a save is left in the test directory.
  void ExpectNoPartialFiles() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().string().find(".partial"), std::string::npos) << entry.path();
    }
  }
  std::string ErrorOf(const std::string& what) {
    std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
    EXPECT_FALSE(msg.empty()) << what;
    return msg;
  }

  static std::string dir_;
};
std::string H5Test::dir_;

TEST_F(H5Test, EveryDTypeLoadsOnEveryAxisAndReplicated) {
  for (bool in_group : {false, true}) {
    for (int64_t axis : {-1, 0, 1, 2}) {
      for (const char* dtype : kDTypes) {
        DRef t = LoadOne(Fixtures(), std::string("plain/") + dtype, axis, in_group);
        ExpectShard(t, kShape, axis, in_group, dtype);
      }
      for (const char* variant : kBFloat16Variants) {
        DRef t = LoadOne(Fixtures(), variant, axis, in_group);
        ExpectShard(t, kShape, axis, in_group, "bfloat16");
      }
      Check("axis " + std::to_string(axis) + (in_group ? " in group" : ""));
    }
  }
}

TEST_F(H5Test, ChunkedCompressedAndBigEndianDatasetsLoad) {
  for (bool in_group : {false, true}) {
    for (int64_t axis : {-1, 0, 2}) {
      ExpectShard(LoadOne(Fixtures(), "layout/gzip_float32", axis, in_group), kShape, axis,
                  in_group, "float32");
      ExpectShard(LoadOne(Fixtures(), "layout/be_int32", axis, in_group), kShape, axis, in_group,
                  "int32");
      ExpectShard(LoadOne(Fixtures(), "layout/be_float64", axis, in_group), kShape, axis, in_group,
                  "float64");
    }
  }
  Check("layouts");
}

TEST_F(H5Test, PlansNestedNamesDefaultAxesAndScalars) {
  auto loaded = h5::LoadTensors(s(), Fixtures(),
                                {{"layers/0/w1", 0},
                                 {"with_axis", h5::kAxisFromFile},
                                 {"plain/float32", h5::kAxisFromFile},
                                 {"scalar", h5::kReplicate}});
  ExpectShard(loaded.at("layers/0/w1"), {12, 4}, 0, false, "float32");
  ExpectShard(loaded.at("with_axis"), kShape, 1, false, "float32");       // attribute: axis 1
  ExpectShard(loaded.at("plain/float32"), kShape, -1, false, "float32");  // none: replicated
  ExpectShard(loaded.at("scalar"), {}, -1, false, "float64");
  Check("plan");
  EXPECT_THROW(h5::LoadTensors(s(), Fixtures(), {{"scalar", -1}, {"scalar", -1}}), ValueError);
}

TEST_F(H5Test, SavesReadBackInH5pyAndInDisco) {
  for (bool independent : {false, true}) {
    s().CallPacked(F("test.h5.set_independent"), independent);
    std::string file = Path(independent ? "saved_independent.h5" : "saved.h5");
    std::vector<std::string> specs;
    for (int64_t axis : {0, 1, -1}) {
      for (const char* dtype : {"int8", "uint64", "float16", "bfloat16", "float32", "float64"}) {
        std::string name = "axis" + std::to_string(axis) + "/" + dtype;
        DRef shard = s().CallPacked(F("test.h5.make_shard"), Shape(kShape), axis, false, dtype);
        s().CallPacked(F("disco.h5.save"), file, name, shard, axis, false);
        Check("save " + name);
        specs.push_back(Spec(name, dtype, kShape));
        ExpectShard(LoadOne(file, name, 2, false), kShape, 2, false, dtype);  // another sharding
        Check("reload " + name);
      }
    }
    CheckWithH5py(file, specs);
    // Saving again over the same dataset, same shape and dtype, overwrites it.
    DRef again = s().CallPacked(F("test.h5.make_shard"), Shape(kShape), 0, false, "float32");
    s().CallPacked(F("disco.h5.save"), file, "axis0/float32", again, 0, false);
    Check("overwrite");
  }
  s().CallPacked(F("test.h5.set_independent"), false);
  // A set, atomically, sharded within groups.
  std::string set_file = Path("set.h5");
  DRef a = s().CallPacked(F("test.h5.make_shard"), Shape(kShape), 1, true, "bfloat16");
  DRef b = s().CallPacked(F("test.h5.make_shard"), Shape{8, 4}, -1, true, "int32");
  h5::SaveTensors(s(), set_file, {{"layers/0/a", a, 1}, {"b", b, h5::kReplicate}}, true);
  CheckWithH5py(set_file, {Spec("layers/0/a", "bfloat16", kShape), Spec("b", "int32", {8, 4})});
  ExpectNoPartialFiles();
}

// A save replaces a file's content, not who may read it: the replaced file keeps its permission
// bits (and, for root, its owner), and a symbolic link is written through (R8).
TEST_F(H5Test, SavesKeepModeAndOwnerAndWriteThroughLinks) {
  namespace fs = std::filesystem;
  const std::string file = Path("private.h5");
  DRef shard = s().CallPacked(F("test.h5.make_shard"), Shape(kShape), 0, false, "float32");
  h5::SaveTensors(s(), file, {{"w", shard, 0}});
  auto mode = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
  };
  chmod(file.c_str(), 0600);
  h5::SaveTensors(s(), file, {{"w", shard, 0}});
  EXPECT_EQ(mode(file), 0600u) << "save_tensors over a 0600 file";
  chmod(file.c_str(), 0664);  // group-writable: more than the usual umask lets a new file have
  s().CallPacked(F("disco.h5.save"), file, "more", shard, 0, false);
  Check("save a dataset into it");
  EXPECT_EQ(mode(file), 0664u) << "disco.h5.save adding a dataset";
  if (geteuid() == 0) {
    ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0);
    h5::SaveTensors(s(), file, {{"w", shard, 0}});
    s().CallPacked(F("disco.h5.save"), file, "more", shard, 0, false);
    Check("save as root over a file of nobody's");
    struct stat st;
    ASSERT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(st.st_gid, 65534u);
  }
  // latest.h5 -> step-100.h5: both ways of saving write step-100.h5 and leave the link.
  const std::string step = Path("step-100.h5"), latest = Path("latest.h5");
  h5::SaveTensors(s(), step, {{"old", shard, 0}});
  fs::remove(latest);
  fs::create_symlink("step-100.h5", latest);
  h5::SaveTensors(s(), latest, {{"w", shard, 0}});
  EXPECT_TRUE(fs::is_symlink(latest));
  ExpectShard(LoadOne(step, "w", 0, false), kShape, 0, false, "float32");
  Check("the link's target has the new dataset");
  s().CallPacked(F("disco.h5.save"), latest, "more", shard, 0, false);
  Check("disco.h5.save through the link");
  EXPECT_TRUE(fs::is_symlink(latest));
  ExpectShard(LoadOne(step, "more", 0, false), kShape, 0, false, "float32");
  Check("the link's target has the added dataset");
  ExpectNoPartialFiles();
}

// A filter this HDF5 lacks is named (B8); a file another program holds locked is not called
// damaged (B9).
TEST_F(H5Test, UnavailableFiltersAndLockedFilesAreNamed) {
  LoadOne(Path("lzf.h5"), "x", 0, false);
  std::string msg = ErrorOf("lzf");
  EXPECT_NE(msg.find("filter 'lzf' (id 32000), which this HDF5 does not have"), std::string::npos)
      << msg;
  // HDF5 locks a file with flock(2); a lock held on another open file description conflicts, as
  // h5py's would from another process.
  int fd = open(Fixtures().c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  LoadOne(Fixtures(), "plain/float32", 0, false);
  msg = ErrorOf("locked");
  close(fd);
  if (msg.find("unable to lock") == std::string::npos && std::getenv("HDF5_USE_FILE_LOCKING")) {
    GTEST_SKIP() << "HDF5_USE_FILE_LOCKING is set";
  }
  EXPECT_NE(msg.find("the file is locked by another program"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("damaged"), std::string::npos) << msg;
  ExpectShard(LoadOne(Fixtures(), "plain/float32", 0, false), kShape, 0, false, "float32");
  Check("after the lock is gone");
}

// A load never materializes the whole tensor: each worker's peak RSS rises by at most its shard
// plus 32 MiB (MPI-IO's collective buffers included).
TEST_F(H5Test, PeakMemoryOfALoadStaysWithinTheShardPlus32MiB) {
  const int n = s().num_workers();
  const std::vector<int64_t> shape = {96 * 12, 24 * 1024};  // 96 MiB of float32
  std::string file = Path("big.h5");
  {
    DRef shard = s().CallPacked(F("test.h5.make_shard"), Shape(shape), 0, false, "float32");
    s().CallPacked(F("disco.h5.save"), file, "w", shard, 0, false);
    Check("save big");
  }  // the shards are freed
  for (int64_t axis : {0, 1}) {
    DRef supported = s().CallPacked(F("disco.reset_peak_memory"));
    if (!supported.DebugGetFromRemote(0).cast<bool>()) GTEST_SKIP() << "no /proc/self/clear_refs";
    DRef before = s().CallPacked(F("disco.memory_kib"));
    DRef t = LoadOne(file, "w", axis, false);
    DRef after = s().CallPacked(F("disco.memory_kib"));
    const double shard_mib = 96.0 / n;
    for (int w = 0; w < n; ++w) {
      double grew = (after.DebugGetFromRemote(w).cast<Shape>()[1] -
                     before.DebugGetFromRemote(w).cast<Shape>()[0]) /
                    1024.0;
      EXPECT_LE(grew, shard_mib + 32) << "worker " << w << ", axis " << axis;
    }
    ExpectShard(t, shape, axis, false, "float32");
    Check("big load");
  }
  std::filesystem::remove(file);
}

TEST_F(H5Test, BadInputIsARemoteErrorNamingFileAndDataset) {
  auto expect = [&](const std::string& what, const std::string& needle) {
    std::string msg = ErrorOf(what);
    EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
  };
  const std::string fx = Fixtures();
  LoadOne(Path("missing.h5"), "x", 0, false);
  expect("missing file", "disco.h5.load('" + Path("missing.h5") + "', 'x'): cannot read the file");
  LoadOne(Path("not_hdf5.h5"), "x", 0, false);
  expect("not hdf5", "not an HDF5 file");
  LoadOne(Path("truncated.h5"), "plain/int8", 0, false);
  expect("truncated", "damaged or truncated");
  // A FIFO is refused at once: HDF5 opens by name and would wait for a writer forever.
  const std::string fifo = Path("fifo.h5");
  ASSERT_TRUE(mkfifo(fifo.c_str(), 0600) == 0 || errno == EEXIST) << std::strerror(errno);
  LoadOne(fifo, "x", 0, false);
  expect("a FIFO", "not a regular file (a FIFO, a device or a directory cannot be an HDF5 file)");
  LoadOne(fx, "plain/nope", 0, false);
  expect("missing dataset", "disco.h5.load('" + fx + "', 'plain/nope'): no such dataset");
  LoadOne(fx, "no/such/group", 0, false);
  expect("missing group", "'no/such/group'): no such dataset");
  LoadOne(fx, "a_group", 0, false);
  expect("a group, not a dataset", "'a_group'): no such dataset");
  LoadOne(fx, "complex", 0, false);
  expect("complex", "(compound, 8 bytes) is not one disco loads");
  LoadOne(fx, "strings", 0, false);
  expect("strings", "(string, 2 bytes) is not one disco loads");
  LoadOne(fx, "plain/int8", 3, false);
  expect("axis too large", "shard axis 3 is out of range for a dataset of shape (12, 24, 12)");
  LoadOne(fx, "plain/int8", -3, false);
  expect("axis too small", "shard_axis -3 is not a dimension");
  if (s().num_workers() > 1) {
    LoadOne(fx, "not_divisible", 1, false);
    expect("not divisible", "dimension 1 of shape (7, 5) (5) cannot be split into");
  }
  // Saves: over a dataset of another shape or dtype; shards the workers disagree on.
  std::string file = Path("bad_saves.h5");
  DRef shard = s().CallPacked(F("test.h5.make_shard"), Shape(kShape), 0, false, "float32");
  s().CallPacked(F("disco.h5.save"), file, "t", shard, 0, false);
  Check("first save");
  DRef other = s().CallPacked(F("test.h5.make_shard"), Shape{12, 24, 6}, 0, false, "float32");
  s().CallPacked(F("disco.h5.save"), file, "t", other, 0, false);
  expect("other shape", "the file already holds this dataset as float32 (12, 24, 12)");
  DRef ints = s().CallPacked(F("test.h5.make_shard"), Shape(kShape), 0, false, "int32");
  s().CallPacked(F("disco.h5.save"), file, "t", ints, 0, false);
  expect("other dtype", "the tensor is int32");
  s().CallPacked(F("disco.h5.save"), file, "t", shard, 5, false);
  expect("save axis", "shard axis 5 is out of range for a shard of 3 dimensions");
  Any none;  // None on every worker
  s().CallPacked(F("disco.h5.save"), file, "u", none, 0, false);
  expect("not a tensor", "'shard' is not a tensor on worker 0");
  CheckWithH5py(file, {Spec("t", "float32", kShape)});  // untouched by the failures
  // A failed save into a new file leaves neither the file nor a partial one.
  std::string fresh = Path("never.h5");
  s().CallPacked(F("disco.h5.save"), fresh, "t", none, 0, false);
  ErrorOf("save of None");
  EXPECT_FALSE(std::filesystem::exists(fresh));
  EXPECT_FALSE(std::filesystem::exists(fresh + ".partial"));
  // A failed set leaves the old file as it was.
  std::string set_file = Path("kept.h5");
  h5::SaveTensors(s(), set_file, {{"t", shard, 0}});
  EXPECT_THROW(h5::SaveTensors(s(), set_file, {{"x", shard, 0}, {"y", shard, 7}}), RemoteError);
  CheckWithH5py(set_file, {Spec("t", "float32", kShape)});
  ExpectNoPartialFiles();
  // The session and the store still work.
  ExpectShard(LoadOne(fx, "plain/int16", 0, false), kShape, 0, false, "int16");
  Check("after bad input");
}

}  // namespace
}  // namespace disco
