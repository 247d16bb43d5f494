// A controller program that fails on purpose, one way per mode; run_fault_test.sh checks that the
// job ends promptly, with the right exit code and message.
#include <disco/disco.h>
#include <disco/h5.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "core/device_memory.h"
#include "protocol/frame.h"
#include "session/session_impl.h"
#include "session/worker.h"

namespace {

// sigusr1-chained: a SIGUSR1 handler of the program's own, there before disco::Main (as MPICH's
// MPI_Init installs one), which must still see the signal and be there again after the job.
std::atomic<int> g_own_usr1{0};
void OwnUsr1Handler(int) { g_own_usr1.fetch_add(1); }

DISCO_REGISTER_GLOBAL("fault.kill_self").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id == worker) raise(SIGKILL);
});
// A rank that goes silent without exiting, as one on a node cut off the network: its launcher
// waits for it for good.
DISCO_REGISTER_GLOBAL("fault.stop_self").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id == worker) raise(SIGSTOP);
});
// A fatal error inside a command (std::terminate: the flight recorder's dump names the command
// and how long it ran).
DISCO_REGISTER_GLOBAL("fault.terminate_on").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id == worker) std::terminate();
});
DISCO_REGISTER_GLOBAL("fault.throw_on_1").set_body_typed([]() {
  if (disco::ThisWorker().worker_id == 1) throw disco::ValueError("worker 1 fails on purpose");
});
// Every worker but `odd` allreduces `t`; `odd` throws, returns at once, or dies, per `how`.
DISCO_REGISTER_GLOBAL("fault.collective_unless")
    .set_body_typed([](disco::Tensor t, int64_t odd, std::string how) {
      if (disco::ThisWorker().worker_id == odd) {
        if (how == "throw") throw disco::ValueError("worker fails inside a collective on purpose");
        if (how == "die" || how == "stop") {
          usleep(300 * 1000);  // the others are inside the collective by now
          raise(how == "die" ? SIGKILL : SIGSTOP);
        }
        if (how == "spin") {  // its own code before the collective does not return
          for (;;) usleep(10 * 1000);
        }
        return;  // "skip": this worker never joins
      }
      disco::Registry::Get("disco.allreduce")(t, std::string("sum"), false, t);
    });
// The hang matrix (tests/mpi/run_hang_matrix.sh): `worker` runs on for good, in code of its own,
// or in an MPI call of its own that no other rank joins; or receives from `peer`, which sends
// nothing.
DISCO_REGISTER_GLOBAL("fault.spin_on").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id != worker) return;
  for (;;) usleep(10 * 1000);
});
DISCO_REGISTER_GLOBAL("fault.foreign_barrier_on").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id == worker) MPI_Barrier(MPI_COMM_WORLD);
});
DISCO_REGISTER_GLOBAL("fault.recv_on")
    .set_body_typed([](disco::Tensor t, int64_t worker, int64_t peer) {
      if (disco::ThisWorker().worker_id != worker) return;
      disco::Registry::Get("disco.recv_from_worker")(t, peer);
    });
DISCO_REGISTER_GLOBAL("fault.corrupt_next_frame_on").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id == worker) disco::detail::TestCorruptNextFrame();
});
DISCO_REGISTER_GLOBAL("fault.send_on_0").set_body_typed([](disco::Tensor t) {
  if (disco::ThisWorker().worker_id == 0) disco::Registry::Get("disco.send_to_worker")(t, 1);
});
// `worker` kills itself after a random few milliseconds, from a thread: wherever its main thread
// is then (inside InitCCL, most likely).
DISCO_REGISTER_GLOBAL("fault.kill_self_later").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id != worker) return;
  std::thread([] {
    usleep(static_cast<useconds_t>(1000 + std::rand() % 20000));
    raise(SIGKILL);
  }).detach();
});
// The next host allocation of `worker` fails (as out of memory would, on that rank only).
DISCO_REGISTER_GLOBAL("fault.fail_next_alloc_on").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id == worker) disco::memory::TestFailNextHostAlloc();
});
// The allreduce builtin as a value on every worker but `odd`, which fails.
DISCO_REGISTER_GLOBAL("fault.allreduce_fn_unless").set_body_typed([](int64_t odd) {
  if (disco::ThisWorker().worker_id == odd) throw disco::ValueError("no function here");
  return disco::Registry::Get("disco.allreduce");
});
// "sum" on every worker but `odd`, which fails.
DISCO_REGISTER_GLOBAL("fault.sum_unless").set_body_typed([](int64_t odd) {
  if (disco::ThisWorker().worker_id == odd) throw disco::ValueError("no op here");
  return std::string("sum");
});
DISCO_REGISTER_GLOBAL("fault.sleep_ms").set_body_typed([](int64_t ms) {
  if (disco::ThisWorker().worker_id == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
});
// std::terminate on worker 0 (in the controller's process): disco::Main's fatal-error path.
DISCO_REGISTER_GLOBAL("fault.terminate_on_0").set_body_typed([]() {
  if (disco::ThisWorker().worker_id == 0) std::terminate();
});
DISCO_REGISTER_GLOBAL("fault.noop").set_body_packed([](const disco::Args&, disco::Any*) {});
// A fresh float32 tensor of 1024 elements; on the last worker 1024 + `extra`, and a failure
// there when `fail` (a graph's function whose tensors change, or that fails, at one replay).
DISCO_REGISTER_GLOBAL("fault.activation_on_last").set_body_typed([](int64_t extra, bool fail) {
  const disco::WorkerInfo& w = disco::ThisWorker();
  const bool last = w.worker_id == w.num_workers - 1;
  if (last && fail) throw disco::ValueError("asked to fail at this replay");
  disco::Tensor t =
      disco::Tensor::Empty(disco::Shape{1024 + (last ? extra : 0)}, disco::DataType("float32"));
  std::fill(t.data_as<float>(), t.data_as<float>() + t.numel(), 1.0f);
  return t;
});

int Run(disco::Session& s, const std::string& mode) {
  if (mode == "controller-throws") {
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    throw std::runtime_error("boom from the controller");
  }
  if (mode == "terminate-in-command") {
    s.CallPacked(s.GetGlobalFunc("fault.terminate_on"), s.num_workers() - 1);
    s.SyncAll();  // the job ends at the fatal error
    std::printf("unreachable: SyncAll returned after a worker's fatal error\n");
    return 0;
  }
  if (mode == "kill-worker") {
    // The last worker: across nodes, one on another node than the controller.
    s.CallPacked(s.GetGlobalFunc("fault.kill_self"), s.num_workers() - 1);
    s.SyncAll();  // blocks on the dead worker: the launcher must end the job
    std::printf("unreachable: SyncAll returned after a worker died\n");
    return 0;
  }
  if (mode == "stop-worker") {
    // Every rank answers liveness pings first; then the last worker stops, and the controller
    // waits in code of its own (no command runs: only the liveness pings can end the job).
    s.SyncAll();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    s.CallPacked(s.GetGlobalFunc("fault.stop_self"), s.num_workers() - 1);
    std::printf("worker %d stopped\n", s.num_workers() - 1);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(120));
    std::printf("unreachable: the job went on with a silent worker\n");
    return 0;
  }
  if (mode == "desync") {
    s.impl()->TestSkipSequence(2);
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    s.SyncAll();
    std::printf("unreachable: desync went unnoticed\n");
    return 0;
  }
  if (mode == "garbled-frame") {
    uint8_t junk[64];
    std::memset(junk, 0xAB, sizeof junk);
    s.impl()->TestBroadcastRaw(junk, sizeof junk);
    s.SyncAll();
    std::printf("unreachable: garbled frame went unnoticed\n");
    return 0;
  }
  if (mode == "throw-in-collective" || mode == "skip-collective" || mode == "die-in-collective") {
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{1024}, disco::DataType("float32"));
    const int odd = s.num_workers() - 1;
    std::string how = mode == "throw-in-collective" ? "throw"
                      : mode == "skip-collective"   ? "skip"
                                                    : "die";
    s.SyncAll();
    std::printf("hang begins\n");  // for tests/CMakeLists.txt's hang matrix
    std::fflush(stdout);
    s.CallPacked(s.GetGlobalFunc("fault.collective_unless"), t, odd, how);
    s.SyncAll();  // never returns: the watchdog (or the launcher) ends the job
    std::printf("unreachable: a collective with a missing rank completed\n");
    return 0;
  }
  // The hang matrix: each mode prints "hang begins" when the hang starts (the script times the
  // verdict from there).
  auto begins = [] {
    std::printf("hang begins\n");
    std::fflush(stdout);
  };
  if (mode == "hang-spin" || mode == "hang-spin-on-0" || mode == "hang-spin-in-collective") {
    // A function that does not return on one rank; the others wait in the next collective (or,
    // spin-in-collective, in the same command's collective).
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{1024}, disco::DataType("float32"));
    s.SyncAll();
    begins();
    const int odd = mode == "hang-spin-on-0" ? 0 : s.num_workers() - 1;
    if (mode == "hang-spin-in-collective") {
      s.CallPacked(s.GetGlobalFunc("fault.collective_unless"), t, odd, "spin");
    } else {
      s.CallPacked(s.GetGlobalFunc("fault.spin_on"), odd);
      s.AllReduce(t, "sum", false, t);
    }
    s.SyncAll();
    std::printf("unreachable: the job went on past a stuck function\n");
    return 0;
  }
  if (mode == "hang-spin-sync") {  // the last worker runs on; the controller syncs
    s.SyncAll();
    begins();
    s.CallPacked(s.GetGlobalFunc("fault.spin_on"), s.num_workers() - 1);
    s.SyncAll();
    std::printf("unreachable: the job went on past a stuck function\n");
    return 0;
  }
  if (mode == "hang-stop-early") {  // the last worker stops at the first command
    begins();
    s.CallPacked(s.GetGlobalFunc("fault.stop_self"), s.num_workers() - 1);
    s.SyncAll();
    std::printf("unreachable: the job went on with a stopped worker\n");
    return 0;
  }
  if (mode == "hang-stop-rank0") {  // worker 0 stops inside a collective
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{1024}, disco::DataType("float32"));
    s.SyncAll();
    begins();
    s.CallPacked(s.GetGlobalFunc("fault.collective_unless"), t, 0, "stop");
    s.SyncAll();
    std::printf("unreachable: a collective with a stopped rank 0 completed\n");
    return 0;
  }
  if (mode == "hang-foreign-mpi") {  // worker 1 enters MPI_Barrier of its own
    s.SyncAll();
    begins();
    s.CallPacked(s.GetGlobalFunc("fault.foreign_barrier_on"), 1);
    s.SyncAll();
    std::printf("unreachable: a worker's own MPI_Barrier completed\n");
    return 0;
  }
  if (mode == "hang-controller-mpi") {  // the controller enters MPI_Barrier of its own
    s.SyncAll();
    begins();
    MPI_Barrier(MPI_COMM_WORLD);
    std::printf("unreachable: the controller's own MPI_Barrier completed\n");
    return 0;
  }
  if (mode == "hang-stop-in-collective" || mode == "hang-die-in-collective") {
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{1024}, disco::DataType("float32"));
    s.SyncAll();
    begins();
    s.CallPacked(s.GetGlobalFunc("fault.collective_unless"), t, s.num_workers() - 1,
                 mode == "hang-stop-in-collective" ? "stop" : "die");
    s.SyncAll();
    std::printf("unreachable: a collective with a missing rank completed\n");
    return 0;
  }
  if (mode == "hang-recv" || mode == "hang-deadlock") {
    // Worker 1 receives from worker 2, which sends nothing; or workers 0 and 1 each receive from
    // the other.
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{1024}, disco::DataType("float32"));
    s.SyncAll();
    begins();
    disco::DRef recv = s.GetGlobalFunc("fault.recv_on");
    if (mode == "hang-recv") {
      s.CallPacked(recv, t, 1, 2);
    } else {
      s.CallPacked(recv, t, 1, 0);
      s.CallPacked(recv, t, 0, 1);
    }
    s.SyncAll();
    std::printf("unreachable: a receive with no sender completed\n");
    return 0;
  }
  if (mode == "hang-h5-read") {
    // Saves a checkpoint, then loads it; tests/mpi/stall_io.c (preloaded) stalls one rank's reads
    // of that file (not of the partial file the save writes).
    const char* path = std::getenv("DISCO_TEST_H5_PATH");
    if (path == nullptr) throw std::invalid_argument("hang-h5-read needs DISCO_TEST_H5_PATH");
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{4096}, disco::DataType("float32"));
    disco::h5::SaveTensors(s, path, {{"w", t, 0}});
    s.SyncAll();
    begins();
    auto loaded = disco::h5::LoadTensors(s, path, {{"w", 0}});
    s.SyncAll();
    std::printf("unreachable: a stalled HDF5 read completed\n");
    return 0;
  }
  if (mode == "skip-collective-in-replay") {  // the same, as call 1 of a replayed graph
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{1024}, disco::DataType("float32"));
    disco::DRef noop = s.GetGlobalFunc("fault.noop");
    disco::DRef unless = s.GetGlobalFunc("fault.collective_unless");
    disco::Graph g = s.Capture(0, [&](const std::vector<disco::Any>&) {
      s.CallPacked(noop);
      s.CallPacked(unless, t, s.num_workers() - 1, "skip");
      s.CallPacked(noop);
    });
    s.SyncAll();
    std::printf("hang begins\n");  // for tests/CMakeLists.txt's hang matrix
    std::fflush(stdout);
    g.Replay();
    s.SyncAll();
    std::printf("unreachable: a collective with a missing rank completed\n");
    return 0;
  }
  // A collective that one worker cannot join although the others go ahead: the job ends at once
  // with that worker's reason (never a hang until the watchdog).
  if (mode == "uniform-alloc-fails" || mode == "collective-fn-fails" || mode == "op-fails") {
    s.InitCCL("mpi");
    const int odd = s.num_workers() - 1;
    disco::DRef allreduce = s.GetGlobalFunc("disco.allreduce");
    disco::DRef op = s.CallPacked(s.GetGlobalFunc("fault.sum_unless"), -1);
    if (mode == "uniform-alloc-fails") {
      s.CallPacked(s.GetGlobalFunc("fault.fail_next_alloc_on"), odd);
    } else if (mode == "collective-fn-fails") {
      allreduce = s.CallPacked(s.GetGlobalFunc("fault.allreduce_fn_unless"), odd);
    } else {
      op = s.CallPacked(s.GetGlobalFunc("fault.sum_unless"), odd);
    }
    disco::DRef t = s.Empty(disco::Shape{1024}, disco::DataType("float32"));
    s.CallPacked(allreduce, t, op, false, t);
    s.SyncAll();
    std::printf("unreachable: a collective with a failed worker completed\n");
    return 0;
  }
  if (mode == "graph-shape-changes" || mode == "graph-fails-into-collective") {
    // The workers agree on the allreduce's tensors at the first replay and skip the round at the
    // next ones; at the third, the last worker's tensor changes (or its function fails).
    s.InitCCL("mpi");
    disco::DRef act = s.GetGlobalFunc("fault.activation_on_last");
    disco::Graph g = s.Capture(2, [&](const std::vector<disco::Any>& in) {
      disco::DRef a = s.CallPacked(act, in[0], in[1]);
      s.AllReduce(a, "sum", false, a);
    });
    g.Replay({disco::Any(int64_t{0}), disco::Any(false)});
    g.Replay({disco::Any(int64_t{0}), disco::Any(false)});
    s.SyncAll();
    std::printf("two replays done\n");
    std::fflush(stdout);
    if (mode == "graph-shape-changes") {
      g.Replay({disco::Any(int64_t{8}), disco::Any(false)});
    } else {
      g.Replay({disco::Any(int64_t{0}), disco::Any(true)});
    }
    s.SyncAll();
    std::printf("unreachable: a replay's collective with a changed worker completed\n");
    return 0;
  }
  if (mode == "ccl-allreduce") {
    s.InitCCL("mpi");
    disco::DRef t = s.Empty(disco::Shape{1 << 16}, disco::DataType("float32"));
    s.AllReduce(t, "sum", false, t);
    s.SyncAll();
    std::printf("allreduce done on %d workers\n", s.num_workers());
    return 0;
  }
  if (mode == "corrupt-one-rank") {
    s.CallPacked(s.GetGlobalFunc("fault.corrupt_next_frame_on"), s.num_workers() - 1);
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    s.SyncAll();
    std::printf("unreachable: a corrupted frame went unnoticed\n");
    return 0;
  }
  if (mode == "sigusr1" || mode == "sigusr1-chained") {
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    s.SyncAll();
    raise(SIGUSR1);  // the watchdog thread dumps the flight recorder
    usleep(300 * 1000);
    std::printf("dumped on SIGUSR1\n");
    if (mode == "sigusr1-chained") {
      std::printf("the program's own SIGUSR1 handler ran %d time(s) in the job\n",
                  g_own_usr1.load());
    }
    return 0;
  }
  if (mode == "unmatched-sends") {
    // Worker 0 sends 80 x 1 MiB to worker 1, which never receives: a warning, then the job ends
    // (the copies are dropped at shutdown).
    s.InitCCL("mpi");
    disco::DRef buf = s.Empty(disco::Shape{1 << 18}, disco::DataType("float32"));
    for (int i = 0; i < 80 && s.num_workers() > 1; ++i) {
      s.CallPacked(s.GetGlobalFunc("fault.send_on_0"), buf);
    }
    s.SyncAll();
    std::printf("80 unmatched sends\n");
    return 0;
  }
  if (mode == "initccl-loop") {
    // InitCCL again and again; the test kills a rank at a random moment of it (see below).
    for (int i = 0;; ++i) {
      s.InitCCL("mpi");
      if (i == 20) s.CallPacked(s.GetGlobalFunc("fault.kill_self_later"), s.num_workers() - 1);
    }
  }
  if (mode == "soak") {
    // Calls and syncs for DISCO_TEST_SOAK_S seconds (10 by default), printing a line each second;
    // tests/mpi/run_liveness_test.sh attacks the liveness pings meanwhile.
    const char* env = std::getenv("DISCO_TEST_SOAK_S");
    const double seconds = env != nullptr ? std::atof(env) : 10;
    disco::DRef noop = s.GetGlobalFunc("fault.noop");
    const auto t0 = std::chrono::steady_clock::now();
    int64_t calls = 0;
    for (int second = 1;; ++second) {
      while (std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(second)) {
        s.CallPacked(noop);
        s.SyncAll();
        ++calls;
        usleep(20 * 1000);
      }
      std::printf("soak: %d s, %lld calls\n", second, static_cast<long long>(calls));
      std::fflush(stdout);
      if (second >= seconds) break;
    }
    std::printf("soak done: %lld calls and syncs\n", static_cast<long long>(calls));
    return 0;
  }
  if (mode == "serve") {
    // Serves the session with a generated key (written to ~/.disco/serve-PORT.key) and the port
    // in DISCO_TEST_PORT_FILE: tests/remote/run_keyfile_test.sh ends it in the ways a job can
    // end and checks that the key file goes with it.
    disco::ServeOptions opts;
    const char* port_file = std::getenv("DISCO_TEST_PORT_FILE");
    if (port_file != nullptr) opts.port_file = port_file;
    return disco::Serve(s, opts);
  }
  if (mode == "clean") {
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    s.SyncAll();
    std::printf("clean shutdown: %d workers\n", s.num_workers());
    return 0;
  }
  if (mode == "exit-code") {
    std::printf("controller returns 3\n");
    return 3;
  }
  if (mode == "unobserved-error") {
    s.CallPacked(s.GetGlobalFunc("fault.throw_on_1"));
    return 0;  // never synced: shutdown reports it and the job fails
  }
  throw std::invalid_argument("unknown mode '" + mode + "'");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "sigusr1-chained") signal(SIGUSR1, OwnUsr1Handler);
  const int rc = disco::Main(argc, argv, [&](disco::Session& s) {
    int rc = Run(s, mode);
    std::fflush(stdout);
    return rc;
  });
  if (mode == "sigusr1-chained") {
    // disco's handler is gone (MPICH's MPI_Finalize may leave its own, which passes it on).
    raise(SIGUSR1);
    std::printf("after the job, SIGUSR1 reached the program's own handler %d time(s) in all\n",
                g_own_usr1.load());
  }
  return rc;
}
