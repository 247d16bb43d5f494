// disco-bench load: a sharded HDF5 load through the session (disco.h5.load) next to raw H5Dread of
// the same hyperslabs by the same ranks, in the same run, with each rank's peak memory.
//
// The file is written first by disco.h5.save from per-rank shards (no rank holds the whole
// tensor), so both sides read it from the page cache. Raw: every rank opens the file with the same
// file-access settings (MPI-IO with parallel HDF5), allocates its shard, selects its hyperslab and
// calls H5Dread (collective transfer), then closes; time is the maximum over ranks. Disco: the
// controller times one disco.h5.load command and SyncAll. Sides alternate, repeats give medians.
// Peak memory: each rank resets its peak RSS (disco.reset_peak_memory) before the disco load and
// reads it after (disco.memory_kib); peak_MiB is that peak minus the RSS before, which includes the
// shard itself, and bound_MiB = shard + 32 MiB is what the HDF5 issue allows.
#include <disco/config.h>
#include <disco/h5.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "mpi/mpi_util.h"
#include "tools/bench_common.h"

#if DISCO_HAVE_HDF5
#include <hdf5.h>
#endif

namespace disco {
namespace bench {
namespace {

constexpr int64_t kCols = 1536;  // divisible by 1, 2, 3, 4, 6, 8, 12, ...

// This rank's shard along `axis` of a (rows, kCols) float32 tensor: element (i, j) = i * kCols + j
// (mod 2^24, exact in float32).
std::pair<int64_t, int64_t> ShardDims(int64_t rows, int64_t axis) {
  int n = ThisWorker().num_workers;
  return {axis == 0 ? rows / n : rows, axis == 1 ? kCols / n : kCols};
}
int64_t ShardOrigin(int64_t rows, int64_t axis, bool row) {
  auto [r, c] = ShardDims(rows, axis);
  int w = ThisWorker().worker_id;
  if (row) return axis == 0 ? w * r : 0;
  return axis == 1 ? w * c : 0;
}
float Expected(int64_t i, int64_t j) { return static_cast<float>((i * kCols + j) % (1 << 24)); }

DISCO_REGISTER_GLOBAL("bench.load_make_shard").set_body_typed([](int64_t rows, int64_t axis) {
  auto [r, c] = ShardDims(rows, axis);
  Tensor t = Tensor::Empty(Shape{r, c}, DataType("float32"));
  float* p = t.data_as<float>();
  int64_t i0 = ShardOrigin(rows, axis, true), j0 = ShardOrigin(rows, axis, false);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) p[i * c + j] = Expected(i0 + i, j0 + j);
  }
  return t;
});

// Elements of this rank's shard that differ from the formula, summed over ranks (rank 0's value).
DISCO_REGISTER_GLOBAL("bench.load_wrong").set_body_typed([](Tensor t, int64_t rows, int64_t axis) {
  auto [r, c] = ShardDims(rows, axis);
  int64_t wrong = t.numel() == r * c ? 0 : t.numel();
  const float* p = t.data_as<float>();
  int64_t i0 = ShardOrigin(rows, axis, true), j0 = ShardOrigin(rows, axis, false);
  for (int64_t i = 0; i < r && wrong == 0; ++i) {
    for (int64_t j = 0; j < c; ++j) wrong += p[i * c + j] != Expected(i0 + i, j0 + j);
  }
  int64_t total = 0;
  DISCO_MPI_CALL(MPI_Reduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
  return total;
});

#if DISCO_HAVE_HDF5
// The raw side: open, allocate, select, H5Dread, close; the max over ranks in microseconds.
DISCO_REGISTER_GLOBAL("bench.load_raw")
    .set_body_typed([](std::string path, std::string name, int64_t rows, int64_t axis) {
      auto [r, c] = ShardDims(rows, axis);
      DISCO_MPI_CALL(MPI_Barrier(MPI_COMM_WORLD));
      double t0 = NowUs();
      hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
      hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
#if DISCO_HAVE_PARALLEL_HDF5
      H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
      H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
#endif
      hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
      hid_t dset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
      hid_t fspace = H5Dget_space(dset);
      hsize_t start[2] = {static_cast<hsize_t>(ShardOrigin(rows, axis, true)),
                          static_cast<hsize_t>(ShardOrigin(rows, axis, false))};
      hsize_t count[2] = {static_cast<hsize_t>(r), static_cast<hsize_t>(c)};
      H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr);
      hid_t mspace = H5Screate_simple(2, count, nullptr);
      Tensor out = Tensor::Empty(Shape{r, c}, DataType("float32"));
      herr_t rc = H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, out.data());
      H5Sclose(mspace);
      H5Sclose(fspace);
      H5Dclose(dset);
      H5Fclose(file);
      H5Pclose(dxpl);
      H5Pclose(fapl);
      DISCO_CHECK(rc >= 0, RuntimeError) << "bench.load_raw: H5Dread failed";
      double mine = NowUs() - t0, worst = 0;
      DISCO_MPI_CALL(MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
      return worst;
    });
#endif

}  // namespace

int RunLoadBench(Session& s, const LoadOptions& opts) {
#if !DISCO_HAVE_HDF5
  std::fprintf(stderr, "disco-bench load: this build of disco has no HDF5\n");
  return 2;
#else
  const int n = s.num_workers();
  const int64_t axis = opts.axis - 1;  // --axis 1 or 2 (1-based: rows or columns)
  const int64_t want_bytes = opts.bytes;
  const int repeats = static_cast<int>(opts.repeats);
  const int64_t row_unit = 24 * n;
  const int64_t rows = std::max<int64_t>(row_unit, want_bytes / 4 / kCols / row_unit * row_unit);
  const int64_t bytes = rows * kCols * 4, shard_bytes = bytes / n;
  const std::string path = opts.dir + "/disco-bench-load-" + std::to_string(getpid()) + ".h5";

  std::vector<std::string> meta = Metadata(s);
  meta.push_back("hdf5=" + std::string(DISCO_HDF5_VERSION_STRING));
  meta.push_back("file=" + path + " repeats=" + std::to_string(repeats));
  std::printf("# disco-bench load");
  for (const auto& m : meta) std::printf("  %s", m.c_str());
  std::printf(
      "\n# a (%lld, %lld) float32 dataset sharded along axis %lld (0 = rows) over %d ranks, read "
      "from the page cache; times are medians; GB/s is the whole tensor over the time\n",
      static_cast<long long>(rows), static_cast<long long>(kCols), static_cast<long long>(axis), n);
  {
    DRef shard = s.CallPacked(s.GetGlobalFunc("bench.load_make_shard"), rows, axis);
    s.CallPacked(s.GetGlobalFunc("disco.h5.save"), path, "w", shard, axis, false);
    s.SyncAll();
  }
  DRef load = s.GetGlobalFunc("disco.h5.load");
  DRef raw = s.GetGlobalFunc("bench.load_raw");
  DRef reset = s.GetGlobalFunc("disco.reset_peak_memory");
  DRef memory = s.GetGlobalFunc("disco.memory_kib");
  std::vector<double> raw_t, disco_t;
  std::vector<int64_t> peak_kib(n, 0);
  int64_t wrong = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first round warms up
    double rt = s.CallPacked(raw, path, "w", rows, axis).DebugGetFromRemote(0).cast<double>();
    s.CallPacked(reset);
    DRef before = s.CallPacked(memory);
    s.SyncAll();
    double t0 = NowUs();
    DRef t = s.CallPacked(load, path, "w", axis, false);
    s.SyncAll();
    double dt = NowUs() - t0;
    DRef after = s.CallPacked(memory);
    for (int w = 0; w < n; ++w) {
      // The peak after the load, above the resident set before it.
      int64_t grew = after.DebugGetFromRemote(w).cast<Shape>()[1] -
                     before.DebugGetFromRemote(w).cast<Shape>()[0];
      peak_kib[w] = std::max(peak_kib[w], grew);
    }
    if (r == 0) {
      wrong = s.CallPacked(s.GetGlobalFunc("bench.load_wrong"), t, rows, axis)
                  .DebugGetFromRemote(0)
                  .cast<int64_t>();
      continue;
    }
    raw_t.push_back(rt);
    disco_t.push_back(dt);
  }
  std::remove(path.c_str());

  double rt = Median(raw_t), dt = Median(disco_t);
  Table table({"size_B", "shard_B", "raw_ms", "raw_GBps", "disco_ms", "disco_GBps", "ratio",
               "peak_MiB_max", "bound_MiB", "wrong"});
  int64_t worst = *std::max_element(peak_kib.begin(), peak_kib.end());
  table.AddRow({std::to_string(bytes), std::to_string(shard_bytes), Fmt(rt / 1e3, 2),
                Fmt(bytes / rt / 1e3, 2), Fmt(dt / 1e3, 2), Fmt(bytes / dt / 1e3, 2),
                Fmt(rt / dt, 2), Fmt(worst / 1024.0, 1), Fmt(shard_bytes / 1048576.0 + 32, 1),
                std::to_string(wrong)});
  Emit(table, opts.out, meta);
  std::printf("# peak_MiB per rank:");
  for (int w = 0; w < n; ++w) std::printf(" %s", Fmt(peak_kib[w] / 1024.0, 1).c_str());
  std::printf("\n");
  return wrong == 0 ? 0 : 1;
#endif
}

}  // namespace bench
}  // namespace disco
