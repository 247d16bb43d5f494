// HDF5 saves and loads under hostile conditions, for run_h5_fault_test.sh: a full or read-only
// filesystem, a rank killed half-way, a file replaced while it loads, a worker short of memory.
// Each mode prints one line; a save or load that fails prints "failed: <error>" and exits 3 after a
// clean shutdown (MPI_Finalize included), so a crash or a hang is told apart from an error.
//
//   h5_save_program save PATH NAME N          h5::SaveTensors of NAME: N float32 per worker
//   h5_save_program add PATH NAME N           disco.h5.save adds NAME (N float32 per worker)
//   h5_save_program load PATH NAME AXIS       disco.h5.load; prints each worker's shard sum
//   h5_save_program load-race PATH NAME ITER  loads ITER times while another program replaces the
//                                             file: every load must give all workers one version
//                                             of the file, or fail on all of them saying so
#include <disco/disco.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using disco::DRef;
using disco::Session;
using disco::Tensor;

// A float32 shard of `n` elements: worker w holds w * n + i at index i.
DISCO_REGISTER_GLOBAL("h5test.shard").set_body_typed([](int64_t n) {
  Tensor t = Tensor::Empty(disco::Shape{n}, disco::DataType("float32"));
  const int64_t w = disco::ThisWorker().worker_id;
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = static_cast<float>(w * n + i);
  return t;
});

// "dtype shape sum" of a loaded shard, the sum in double over every element.
DISCO_REGISTER_GLOBAL("h5test.describe").set_body_typed([](Tensor t) {
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype().code == kDLFloat) {
      sum += t.data_as<float>()[i];
    } else {
      sum += t.data_as<int32_t>()[i];
    }
  }
  char text[128];
  std::snprintf(text, sizeof text, " %.1f", sum);
  return disco::DataTypeToString(t.dtype()) + " " + t.shape().ToString() + text;
});

int Failed(const disco::Error& e) {
  std::printf("failed: %s\n", e.what());
  return 3;
}

int Run(Session& s, int argc, char** argv) {
  const std::string mode = argv[1], path = argv[2], name = argv[3];
  const int64_t n = argc > 4 ? std::atoll(argv[4]) : 0;
  s.InitCCL("mpi");
  if (mode == "save" || mode == "add") {
    DRef shard = s.CallPacked(s.GetGlobalFunc("h5test.shard"), n);
    try {
      if (mode == "save") {
        disco::h5::SaveTensors(s, path, {{name, shard, 0}});
      } else {
        s.CallPacked(s.GetGlobalFunc("disco.h5.save"), path, name, shard, int64_t{0}, false);
        s.SyncAll();
      }
    } catch (const disco::Error& e) {
      return Failed(e);
    }
    std::printf("saved %s into %s\n", name.c_str(), path.c_str());
    return 0;
  }
  DRef load = s.GetGlobalFunc("disco.h5.load"), describe = s.GetGlobalFunc("h5test.describe");
  if (mode == "load") {
    try {
      DRef t = s.CallPacked(load, path, name, n, false);
      DRef d = s.CallPacked(describe, t);
      for (int w = 0; w < s.num_workers(); ++w) {
        std::printf("worker %d: %s\n", w, d.DebugGetFromRemote(w).cast<std::string>().c_str());
      }
    } catch (const disco::Error& e) {
      return Failed(e);
    }
    return 0;
  }
  if (mode == "load-race") {
    int ok = 0, changed = 0;
    for (int64_t i = 0; i < n; ++i) {
      try {
        DRef t = s.CallPacked(load, path, name, int64_t{0}, false);
        DRef d = s.CallPacked(describe, t);
        s.SyncAll();  // every worker's report of a failure, the cause first
        // One version on every worker: the same dtype and shape, and shard sums that belong to
        // one file (the race script's versions are told apart by dtype, shape and sums).
        std::string all;
        for (int w = 0; w < s.num_workers(); ++w) {
          all += (w ? " | " : "") + d.DebugGetFromRemote(w).cast<std::string>();
        }
        std::printf("load %lld: %s\n", static_cast<long long>(i), all.c_str());
        ++ok;
      } catch (const disco::Error& e) {
        std::string msg = e.what();
        if (msg.find("the file changed") == std::string::npos) return Failed(e);
        ++changed;
      }
    }
    std::printf("loads: %d whole, %d refused because the file changed\n", ok, changed);
    return 0;
  }
  std::fprintf(stderr, "h5_save_program: unknown mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: h5_save_program MODE PATH NAME [N]\n");
    return 2;
  }
  return disco::Main(argc, argv, [&](Session& s) {
    int rc = Run(s, argc, argv);
    std::fflush(stdout);
    return rc;
  });
}
