// disco-bench call: the cost of a session call next to the raw MPI_Bcast of the same bytes.
//
// For each payload size, interleaved over several repeats (medians reported):
//   pipelined:  K back-to-back no-op calls then one sync, per call   vs  K raw MPI_Bcasts and a
//               barrier, of the call's wire bytes (its inline frame) and of the payload's size
//   completion: barrier, then one call until the last worker has run it (max over ranks, median
//               over iterations)                                      vs  barrier, then one
//               MPI_Bcast
//   sync:       SyncWorker(last) round trip                           vs  MPI_Bcast of a frame,
//               a reply
// Raw figures are measured by functions that run on every rank, on a communicator of their own.
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "mpi/mpi_util.h"
#include "protocol/frame.h"
#include "session/session_impl.h"
#include "tools/bench_common.h"

namespace disco {
namespace bench {
namespace {

struct BenchState {
  mpi::Comm comm;
  std::vector<uint8_t> buf;
  std::vector<double> times;
  double start = 0;
  void EnsureComm() {
    if (comm.get() == MPI_COMM_NULL) comm = mpi::Comm::Dup(MPI_COMM_WORLD);
  }
  uint8_t* Buffer(size_t n) {
    if (buf.size() < n) buf.assign(n, 1);
    return buf.data();
  }
};
BenchState& State() {
  static BenchState* s = new BenchState();
  return *s;
}

// Median over iterations of the per-iteration maximum over ranks, on rank 0.
double ReduceMaxMedian(std::vector<double>* times) {
  BenchState& st = State();
  std::vector<double> maxed(times->size());
  DISCO_MPI_CALL(MPI_Reduce(times->data(), maxed.data(), static_cast<int>(times->size()),
                            MPI_DOUBLE, MPI_MAX, 0, st.comm.get()));
  return st.comm.rank() == 0 ? Median(maxed) : 0.0;
}

DISCO_REGISTER_GLOBAL("bench.raw_pipelined").set_body_typed([](int64_t bytes, int64_t iters) {
  BenchState& st = State();
  st.EnsureComm();
  uint8_t* p = st.Buffer(bytes);
  MPI_Comm c = st.comm.get();
  for (int64_t i = 0; i < iters / 10; ++i) MPI_Bcast(p, static_cast<int>(bytes), MPI_BYTE, 0, c);
  DISCO_MPI_CALL(MPI_Barrier(c));
  double t0 = NowUs();
  for (int64_t i = 0; i < iters; ++i) MPI_Bcast(p, static_cast<int>(bytes), MPI_BYTE, 0, c);
  DISCO_MPI_CALL(MPI_Barrier(c));
  return (NowUs() - t0) / iters;
});

// Completion latency of one broadcast: from the root issuing it to the last rank holding it. On
// one node every rank reads the same monotonic clock, so the root's issue time travels in the
// message and each rank subtracts it from its arrival time. Across nodes (`same_clock` false)
// each rank times from the barrier it left, which adds the barrier's exit skew.
DISCO_REGISTER_GLOBAL("bench.raw_latency")
    .set_body_typed([](int64_t bytes, int64_t iters, bool same_clock) {
      BenchState& st = State();
      st.EnsureComm();
      uint8_t* p = st.Buffer(std::max<int64_t>(bytes, sizeof(double)));
      MPI_Comm c = st.comm.get();
      bool root = st.comm.rank() == 0;
      std::vector<double> times(iters);
      for (int64_t i = 0; i < iters; ++i) {
        MPI_Barrier(c);
        double t0 = NowUs();
        if (root) std::memcpy(p, &t0, sizeof t0);
        MPI_Bcast(p, static_cast<int>(bytes), MPI_BYTE, 0, c);
        double t1 = NowUs();
        if (same_clock) std::memcpy(&t0, p, sizeof t0);
        times[i] = t1 - t0;
      }
      return ReduceMaxMedian(&times);
    });

// The raw counterpart of SyncWorker(target): a frame broadcast, a small reply from `target`.
DISCO_REGISTER_GLOBAL("bench.raw_sync")
    .set_body_typed([](int64_t bytes, int64_t target, int64_t iters) {
      BenchState& st = State();
      st.EnsureComm();
      uint8_t* p = st.Buffer(bytes);
      MPI_Comm c = st.comm.get();
      int rank = st.comm.rank();
      uint8_t reply[9] = {0};
      std::vector<double> times(iters);
      MPI_Barrier(c);
      for (int64_t i = 0; i < iters; ++i) {
        double t0 = NowUs();
        MPI_Bcast(p, static_cast<int>(bytes), MPI_BYTE, 0, c);
        if (rank == target) MPI_Send(reply, 9, MPI_BYTE, 0, 7, c);
        if (rank == 0)
          MPI_Recv(reply, 9, MPI_BYTE, static_cast<int>(target), 7, c, MPI_STATUS_IGNORE);
        times[i] = NowUs() - t0;
      }
      MPI_Barrier(c);
      return Median(times);
    });

DISCO_REGISTER_GLOBAL("bench.mark_start").set_body_typed([]() {
  BenchState& st = State();
  st.EnsureComm();
  MPI_Barrier(st.comm.get());
  st.start = NowUs();
});

DISCO_REGISTER_GLOBAL("bench.noop").set_body_packed([](const Args&, Any*) {});

// Records when this worker ran call `i`: relative to the controller's issue time `t_issue` (one
// node: the same clock) or to the barrier this worker left (`t_issue` < 0).
DISCO_REGISTER_GLOBAL("bench.noop_record")
    .set_body_typed([](Bytes payload, int64_t i, double t_issue) {
      BenchState& st = State();
      double now = NowUs();
      if (st.times.size() <= static_cast<size_t>(i)) st.times.resize(i + 1);
      st.times[i] = now - (t_issue >= 0 ? t_issue : st.start);
    });

DISCO_REGISTER_GLOBAL("bench.collect").set_body_typed([](int64_t n) {
  BenchState& st = State();
  st.times.resize(n);
  double median = ReduceMaxMedian(&st.times);
  st.times.clear();
  return median;
});

// Bytes broadcast for CallPacked(noop, Bytes(payload)): the frame (header, kill count with the
// one pending kill that rides on each call of a loop, argument count, result register, function
// DRef, the bytes' tag and length), padded to the inline size, then the payload: inside the frame
// when small, in a broadcast of its own when out of line. The raw baseline moves as many bytes in
// one broadcast.
size_t CallWireBytes(size_t payload, size_t inline_bytes) {
  size_t frame = protocol::kHeaderBytes + 4 + 8 + 4 + 9 + 9 + 9;
  if (payload >= protocol::kOutOfLineMinBytes) return std::max(frame, inline_bytes) + payload;
  return std::max(frame + payload, inline_bytes);
}

}  // namespace

int RunCallBench(Session& s, const CallOptions& opts) {
  const int64_t iters = opts.iters;
  const int64_t lat_iters = opts.latency_iters;
  const int repeats = static_cast<int>(opts.repeats);
  const int last = s.num_workers() - 1;
  const size_t inline_bytes = static_cast<size_t>(s.impl()->config().inline_bytes);
  DRef raw_pipe = s.GetGlobalFunc("bench.raw_pipelined");
  DRef raw_lat = s.GetGlobalFunc("bench.raw_latency");
  DRef raw_sync = s.GetGlobalFunc("bench.raw_sync");
  DRef mark = s.GetGlobalFunc("bench.mark_start");
  DRef noop = s.GetGlobalFunc("bench.noop");
  DRef record = s.GetGlobalFunc("bench.noop_record");
  DRef collect = s.GetGlobalFunc("bench.collect");

  const bool same_clock = NumNodes(s) == 1;
  std::vector<std::string> meta = Metadata(s);
  meta.push_back("inline_bytes=" + std::to_string(inline_bytes));
  meta.push_back("iters=" + std::to_string(iters) + " latency_iters=" + std::to_string(lat_iters) +
                 " repeats=" + std::to_string(repeats));
  std::printf("# disco-bench call");
  for (const auto& m : meta) std::printf("  %s", m.c_str());
  std::printf(
      "\n# times in microseconds, medians over %d interleaved repeats%s\n", repeats,
      s.num_workers() > 2 ? " (more than 2 ranks: oversubscribed figures are not latency)" : "");

  Table table({"payload_B", "wire_B", "raw_pipe_us", "call_pipe_us", "pipe_ratio",
               "raw_payload_pipe_us", "payload_ratio", "raw_lat_us", "call_lat_us", "lat_ratio"});
  std::vector<size_t> sizes = {8, 64, 256, 1024, 4096, 16384, 65536};
  const size_t max = static_cast<size_t>(opts.max_bytes);
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](size_t v) { return v > max; }),
              sizes.end());
  for (size_t payload : sizes) {
    size_t wire = CallWireBytes(payload, inline_bytes);
    const int64_t k = payload > 4096 ? std::max<int64_t>(1, iters / 4) : iters;
    Bytes data(std::string(payload, 'x'));
    std::vector<double> rp, rpp, cp, rl, cl;
    for (int r = 0; r < repeats; ++r) {
      rp.push_back(s.CallPacked(raw_pipe, static_cast<int64_t>(wire), k)
                       .DebugGetFromRemote(0)
                       .cast<double>());
      rpp.push_back(s.CallPacked(raw_pipe, static_cast<int64_t>(payload), k)
                        .DebugGetFromRemote(0)
                        .cast<double>());
      // Warm up the call path as the raw path warms up its own, then time.
      for (int64_t i = 0; i < k / 10; ++i) s.CallPacked(noop, data);
      s.SyncAll();
      double t0 = NowUs();
      for (int64_t i = 0; i < k; ++i) s.CallPacked(noop, data);
      s.SyncWorker(last);
      cp.push_back((NowUs() - t0) / k);

      rl.push_back(s.CallPacked(raw_lat, static_cast<int64_t>(wire), lat_iters, same_clock)
                       .DebugGetFromRemote(0)
                       .cast<double>());
      for (int64_t i = 0; i < lat_iters; ++i) {
        s.CallPacked(mark);
        s.CallPacked(record, data, i, same_clock ? NowUs() : -1.0);
      }
      cl.push_back(s.CallPacked(collect, lat_iters).DebugGetFromRemote(0).cast<double>());
    }
    double mrp = Median(rp), mrpp = Median(rpp), mcp = Median(cp), mrl = Median(rl),
           mcl = Median(cl);
    table.AddRow({std::to_string(payload), std::to_string(wire), Fmt(mrp), Fmt(mcp),
                  Fmt(mcp / mrp, 2), Fmt(mrpp), Fmt(mcp / mrpp, 2), Fmt(mrl), Fmt(mcl),
                  Fmt(mcl / mrl, 2)});
  }
  table.Print(stdout);

  // SyncWorker round trip vs a raw broadcast of the same frame plus a 9-byte reply.
  std::vector<double> rs, cs;
  const int64_t sync_iters = std::max<int64_t>(1, iters / 4);
  for (int r = 0; r < repeats; ++r) {
    rs.push_back(s.CallPacked(raw_sync, static_cast<int64_t>(inline_bytes), last, sync_iters)
                     .DebugGetFromRemote(0)
                     .cast<double>());
    std::vector<double> one;
    one.reserve(sync_iters);
    for (int64_t i = 0; i < sync_iters; ++i) {
      double t0 = NowUs();
      s.SyncWorker(last);
      one.push_back(NowUs() - t0);
    }
    cs.push_back(Median(one));
  }
  Table sync({"what", "raw_bcast+reply_us", "sync_worker_us", "ratio"});
  sync.AddRow({"SyncWorker(" + std::to_string(last) + ")", Fmt(Median(rs)), Fmt(Median(cs)),
               Fmt(Median(cs) / Median(rs), 2)});
  sync.Print(stdout);

  if (!opts.csv.empty()) {
    table.WriteCsv(opts.csv, meta);
    sync.WriteCsv(opts.csv + ".sync.csv", meta);
  }
  return 0;
}

}  // namespace bench
}  // namespace disco
