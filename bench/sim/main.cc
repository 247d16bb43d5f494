// main.cc: the skeleton's options, SMPI's per-message overheads, --rates, and main: rank 0 runs
// the modes (modes.cc), the other ranks the worker loop (worker.cc).
//
// Usage: skeleton [options] MODE[,MODE...]      (each mode prints one "RESULT" line on rank 0;
//   the modes: modes.cc)
// Options: --iters K  --bytes B  --warmup W  --settle-us S  --no-barrier (latency iterations
//   separated by the settle time only; raw_pipe ends on a reply from P-1: one global clock under
//   SMPI, and barriers are the costliest thing to simulate)
//   --enc-us E --dec-us D --loop-ns L --reduce-gbs R --memcpy-gbs M   injected CPU costs (0 = free)
//   --graph-call-ns C --graph-coll-us U   a replay's CPU: per recorded call on the fast path, per
//                            recorded collective's call path (bench/sim/README.md: measured)
//   --collectives library|explicit   --prepost auto|0|1 (DISCO_PREPOST_FRAMES)   --before
//   --transport p2p          the TVM Disco model: P-1 sends per frame, P-1 replies per sync
//   --ctrl-tree binary       control frames down a binary tree (the issue-rate alternative)
//   --ring-steps-cap C       run the first C steps of each ring phase and scale (identical steps)
//   --host-overheads OS_INTER,OR_INTER,OS_INTRA,OR_INTRA   (SMPI) per-message software overheads,
//   us
//   --rates                  (real build) measure the float32 sum and memcpy rates of this machine
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#ifdef SKEL_SIM
#include <simgrid/s4u/Host.hpp>
#endif

#include "rank.h"

namespace skel {

Params g;

namespace {

// What the command line asks beyond Params.
struct Command {
  std::string modes = "call_pipe";
  bool rates = false;
  std::string overheads;
};

// Sets `g` and `cmd` from the options; false (after saying why) on an unknown one.
bool ParseArgs(int argc, char** argv, Command* cmd) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--iters")
      g.iters = std::atoll(next().c_str());
    else if (a == "--bytes")
      g.bytes = std::atoll(next().c_str());
    else if (a == "--settle-us")
      g.settle_us = std::atof(next().c_str());
    else if (a == "--no-barrier")
      g.no_barrier = true;
    else if (a == "--warmup")
      g.warmup = std::atoi(next().c_str());
    else if (a == "--ctrl-tree")
      g.binary_ctrl = next() == "binary";
    else if (a == "--enc-us")
      g.enc_us = std::atof(next().c_str());
    else if (a == "--dec-us")
      g.dec_us = std::atof(next().c_str());
    else if (a == "--graph-call-ns")
      g.graph_call_ns = std::atof(next().c_str());
    else if (a == "--graph-coll-us")
      g.graph_coll_us = std::atof(next().c_str());
    else if (a == "--loop-ns")
      g.loop_ns = std::atof(next().c_str());
    else if (a == "--reduce-gbs")
      g.reduce_gbs = std::atof(next().c_str());
    else if (a == "--memcpy-gbs")
      g.memcpy_gbs = std::atof(next().c_str());
    else if (a == "--transport")
      g.p2p = next() == "p2p";
    else if (a == "--ring-steps-cap")
      g.ring_cap = std::atoll(next().c_str());
    else if (a == "--collectives")
      g.explicit_coll = next() == "explicit";
    else if (a == "--prepost") {
      std::string v = next();
      g.prepost = v == "0" ? 0 : v == "1" ? 1 : -1;
    } else if (a == "--before")
      g.before = true;
    else if (a == "--host-overheads")
      cmd->overheads = next();
    else if (a == "--rates")
      cmd->rates = true;
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "skeleton: unknown option %s\n", a.c_str());
      return false;
    } else {
      cmd->modes = a;
    }
  }
  return true;
}

#ifdef SKEL_SIM
// --host-overheads: SMPI's per-message send and receive costs, between nodes and inside one.
void RegisterOverheads(const std::string& overheads, int world_rank) {
  if (overheads.empty()) return;
  static double o[4] = {0, 0, 0, 0};  // the same on every rank
  std::sscanf(overheads.c_str(), "%lf,%lf,%lf,%lf", &o[0], &o[1], &o[2], &o[3]);
  if (world_rank != 0) return;
  auto send = [](size_t, simgrid::s4u::Host* src, simgrid::s4u::Host* dst) {
    return (src == dst ? o[2] : o[0]) * 1e-6;
  };
  auto recv = [](size_t, simgrid::s4u::Host* src, simgrid::s4u::Host* dst) {
    return (src == dst ? o[3] : o[1]) * 1e-6;
  };
  smpi_register_op_cost_callback(SmpiOperation::SEND, send);
  smpi_register_op_cost_callback(SmpiOperation::ISEND, send);
  smpi_register_op_cost_callback(SmpiOperation::RECV, recv);
}
#else
// --rates: what the simulation injects for reductions and copies, measured on this machine (one
// core, 64 MiB buffers, the best of 5: the machine's rate, not its neighbours' load).
void MeasureRates() {
  const size_t n = size_t{16} << 20;  // floats
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.0f);
  std::vector<double> reduce, copy;
  for (int r = 0; r < 5; ++r) {
    double t0 = Now();
    ReduceF32(c.data(), a.data(), b.data(), static_cast<int64_t>(n));
    double t1 = Now();
    CopyBytes(c.data(), a.data(), n * 4);
    double t2 = Now();
    reduce.push_back(n * 4.0 / (t1 - t0) / 1e3);
    copy.push_back(n * 4.0 / (t2 - t1) / 1e3);
  }
  std::printf("RATES reduce_gbs=%.2f memcpy_gbs=%.2f check=%.1f\n",
              *std::max_element(reduce.begin(), reduce.end()),
              *std::max_element(copy.begin(), copy.end()), static_cast<double>(c[n / 2]));
}
#endif

}  // namespace
}  // namespace skel

int main(int argc, char** argv) {
  skel::Command cmd;
  if (!skel::ParseArgs(argc, argv, &cmd)) return 2;
#ifndef SKEL_SIM
  if (cmd.rates) {
    skel::MeasureRates();
    return 0;
  }
#endif
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
#ifdef SKEL_SIM
  skel::RegisterOverheads(cmd.overheads, world_rank);
#endif
  {
    auto r = std::make_unique<skel::Rank>();  // its communicators freed before MPI_Finalize
    if (r->rank() != 0) {
      r->RunWorkerLoop();
    } else {
      r->RunModes(cmd.modes);
    }
  }
  MPI_Finalize();
  return 0;
}
