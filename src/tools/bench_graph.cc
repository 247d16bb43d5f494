// disco-bench graph: a captured graph replayed against the same calls sent one by one.
//
//   noop:       a graph of N no-op calls, replayed pipelined (R replays, then a sync): per replay
//               against one pipelined CallPacked (N = 16), and recorded calls per second against
//               calls per second sent one by one (N = 1024), and N = 1024 calls of a function
//               that returns an int64, each result the next call's argument
//   allreduce:  a 16-call graph with 2 allreduces of 4 KiB on tensors a recorded function made,
//               against the same two raw MPI_Allreduces (on a communicator of their own) plus one
//               pipelined call
#include <mpi.h>

#include <cstring>

#include "mpi/mpi_util.h"
#include "tools/bench_common.h"

namespace disco {
namespace bench {
namespace {

// A function that returns a value: its argument plus one.
DISCO_REGISTER_GLOBAL("bench.graph.next").set_body_typed([](int64_t v) { return v + 1; });

// 4 KiB of float32 made (or reused) by a function, as a model's layer makes its activations.
DISCO_REGISTER_GLOBAL("bench.graph.activation").set_body_typed([](Tensor buffer) {
  return buffer;
});

// Two raw MPI_Allreduces of `bytes` per iteration, on a communicator of their own.
DISCO_REGISTER_GLOBAL("bench.graph.raw_allreduces")
    .set_body_typed([](int64_t bytes, int64_t iters) {
      // Never destroyed (as bench_ccl.cc's): a static's destructor would free it after
      // MPI_Finalize, which crashes a simulated rank under SimGrid SMPI (bench/sim/crosscheck.sh).
      static mpi::Comm* comm = new mpi::Comm(mpi::Comm::Dup(MPI_COMM_WORLD));
      std::vector<float> a(static_cast<size_t>(bytes) / 4, 1.0f), b(a.size());
      const int n = static_cast<int>(a.size());
      for (int64_t i = 0; i < 10; ++i) {
        MPI_Allreduce(a.data(), b.data(), n, MPI_FLOAT, MPI_SUM, comm->get());
      }
      DISCO_MPI_CALL(MPI_Barrier(comm->get()));
      double t0 = NowUs();
      for (int64_t i = 0; i < iters; ++i) {
        MPI_Allreduce(a.data(), b.data(), n, MPI_FLOAT, MPI_SUM, comm->get());
        MPI_Allreduce(b.data(), a.data(), n, MPI_FLOAT, MPI_SUM, comm->get());
      }
      DISCO_MPI_CALL(MPI_Barrier(comm->get()));
      return (NowUs() - t0) / iters;
    });

// Microseconds per replay of `g`, `k` replays pipelined then a sync of the last worker.
double TimeReplays(Session& s, const Graph& g, int64_t k) {
  const int last = s.num_workers() - 1;
  for (int64_t i = 0; i < k / 10 + 1; ++i) g.Replay();
  s.SyncAll();
  double t0 = NowUs();
  for (int64_t i = 0; i < k; ++i) g.Replay();
  s.SyncWorker(last);
  return (NowUs() - t0) / k;
}

// Microseconds per pipelined no-op call.
double TimeCalls(Session& s, const DRef& noop, int64_t k) {
  const int last = s.num_workers() - 1;
  for (int64_t i = 0; i < k / 10; ++i) s.CallPacked(noop);
  s.SyncAll();
  double t0 = NowUs();
  for (int64_t i = 0; i < k; ++i) s.CallPacked(noop);
  s.SyncWorker(last);
  return (NowUs() - t0) / k;
}

Graph NoopGraph(Session& s, const DRef& noop, int calls) {
  return s.Capture(0, [&](const std::vector<Any>&) {
    for (int i = 0; i < calls; ++i) s.CallPacked(noop);
  });
}

// `calls` calls of a function that returns a value, each result the next call's argument: every
// call writes a register the next one reads.
Graph ValueGraph(Session& s, const DRef& next, int calls) {
  return s.Capture(0, [&](const std::vector<Any>&) {
    DRef v = s.CallPacked(next, int64_t{0});
    for (int i = 1; i < calls; ++i) v = s.CallPacked(next, v);
  });
}

}  // namespace

int RunGraphBench(Session& s, const GraphOptions& opts) {
  const int64_t iters = opts.iters;
  const int repeats = static_cast<int>(opts.repeats);
  DRef noop = s.GetGlobalFunc("bench.noop");
  std::vector<std::string> meta = Metadata(s);
  meta.push_back("iters=" + std::to_string(iters) + " repeats=" + std::to_string(repeats));
  std::printf("# disco-bench graph");
  for (const auto& m : meta) std::printf("  %s", m.c_str());
  std::printf("\n# medians over %d interleaved repeats%s\n", repeats,
              s.num_workers() > 2 ? " (more than 2 ranks: oversubscribed)" : "");

  Graph g16 = NoopGraph(s, noop, 16);
  Graph g1024 = NoopGraph(s, noop, 1024);
  Graph v1024 = ValueGraph(s, s.GetGlobalFunc("bench.graph.next"), 1024);
  std::vector<double> call, r16, r1024, rv1024;
  for (int r = 0; r < repeats; ++r) {
    call.push_back(TimeCalls(s, noop, iters));
    r16.push_back(TimeReplays(s, g16, std::max<int64_t>(iters / 4, 1)));
    r1024.push_back(TimeReplays(s, g1024, std::max<int64_t>(iters / 256, 20)));
    rv1024.push_back(TimeReplays(s, v1024, std::max<int64_t>(iters / 256, 20)));
  }
  const double mcall = Median(call), m16 = Median(r16), m1024 = Median(r1024);
  Table noops({"what", "baseline", "baseline_value", "graph_value", "ratio"});
  noops.AddRow({"16 no-op calls: us per replay", "one pipelined CallPacked (us)", Fmt(mcall),
                Fmt(m16), Fmt(m16 / mcall, 2)});
  const double calls_per_s = 1e6 / mcall, graph_calls_per_s = 1024 * 1e6 / m1024;
  noops.AddRow({"1024 no-op calls: M calls/s", "CallPacked one by one (M calls/s)",
                Fmt(calls_per_s / 1e6), Fmt(graph_calls_per_s / 1e6),
                Fmt(graph_calls_per_s / calls_per_s, 1)});
  const double value_calls_per_s = 1024 * 1e6 / Median(rv1024);
  noops.AddRow({"1024 calls returning an int64: M calls/s", "CallPacked one by one (M calls/s)",
                Fmt(calls_per_s / 1e6), Fmt(value_calls_per_s / 1e6),
                Fmt(value_calls_per_s / calls_per_s, 1)});
  Emit(noops, opts.out, meta);

  // 16 calls: 13 no-ops, the function that returns a 4 KiB tensor, and two allreduces of it.
  s.InitCCL("mpi");
  const int64_t bytes = opts.bytes;
  DRef raw = s.GetGlobalFunc("bench.graph.raw_allreduces");
  DRef act = s.GetGlobalFunc("bench.graph.activation");
  DRef buffer = s.Empty(Shape{bytes / 4}, DataType("float32"));
  Graph step = s.Capture(0, [&](const std::vector<Any>&) {
    for (int i = 0; i < 7; ++i) s.CallPacked(noop);
    DRef a = s.CallPacked(act, buffer);
    s.AllReduce(a, "sum", false, a);
    for (int i = 0; i < 6; ++i) s.CallPacked(noop);
    s.AllReduce(a, "sum", false, a);
  });
  const int64_t k = std::max<int64_t>(iters / 20, 100);
  std::vector<double> rraw, rstep, rcall;
  for (int r = 0; r < repeats; ++r) {
    rraw.push_back(s.CallPacked(raw, bytes, k).DebugGetFromRemote(0).cast<double>());
    rcall.push_back(TimeCalls(s, noop, std::max<int64_t>(iters / 4, 1)));
    rstep.push_back(TimeReplays(s, step, k));
  }
  const double base = Median(rraw) + Median(rcall);
  Table ar({"what", "raw_2_allreduces_us", "call_us", "baseline_us", "graph_us", "ratio"});
  ar.AddRow({"16 calls, 2 allreduces of " + std::to_string(bytes) + " B", Fmt(Median(rraw)),
             Fmt(Median(rcall)), Fmt(base), Fmt(Median(rstep)), Fmt(Median(rstep) / base, 2)});
  Emit(ar, opts.out, meta);
  return 0;
}

}  // namespace bench
}  // namespace disco
