// modes.cc: the skeleton's modes, run by rank 0 (the controller); each prints one RESULT line.
//
//   call_pipe   K/2 and K no-op calls, each round ended by SyncWorker(P-1): value = the slope per
//               call; per_call_incl_sync = disco-bench call's figure (K calls + sync, per call)
//   call_lat    mark (barrier), [settle], a call that records when each worker ran it; max over
//               ranks, median over iterations (disco-bench call's call_lat)
//   sync_worker SyncWorker(P-1) round trip, median
//   sync_all    SyncAll, median
//   raw_pipe    K raw MPI_Bcast of the frame + barrier (bench.raw_pipelined): slope and per call
//   raw_lat     barrier, [settle], one raw MPI_Bcast: max over ranks, median (bench.raw_latency)
//   raw_sync    raw MPI_Bcast + 9-byte reply from P-1 (bench.raw_sync), median
//   raw_bcast_reduce  raw MPI_Bcast of a frame + MPI_Reduce of one u64 (SyncAll's floor), median
//   pingpong    rank 0 <-> P-1, 9-byte messages, one-way time
//   ar_session  Session::AllReduce(send, "sum", false, recv) of --bytes on the same registers, K/2
//               and K calls each ended by SyncAll: slope per call; per_call_incl_syncall is
//               disco-bench ccl's figure
//   ar_fresh    the same with new disco.empty tensors every call (uniform metadata: no round)
//   ar_made     the same with tensors a function made every call (an agreement round each)
//   ar_raw      K raw allreduces on every rank back to back: per call, max over ranks
//   agree       one agreement round alone, median
//   graph16     disco-bench graph: replays of a captured graph of 16 no-op calls, pipelined, each
//               round ended by SyncWorker(P-1): value = the slope per replay;
//               per_replay_incl_sync = bench_graph.cc's TimeReplays(K)
//   graph1024   the same with 1024 no-op calls (mcalls_per_s: recorded calls per second)
//   graph_ar    the step graph: 7 no-ops, a function's 4 KiB tensor a, AllReduce(a, a), 6 no-ops,
//               AllReduce(a, a) (16 calls); the agreement at the first replay only
//   graph_ar_raw  its baseline: bench.graph.raw_allreduces(bytes, K) (2 raw MPI_Allreduces per
//               iteration on a communicator of its own) + one pipelined no-op call
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "rank.h"

namespace skel {

void Rank::RunModes(const std::string& modes) {
  size_t at = 0;
  while (at <= modes.size()) {
    size_t comma = modes.find(',', at);
    if (comma == std::string::npos) comma = modes.size();
    std::string m = modes.substr(at, comma - at);
    if (!m.empty()) RunMode(m);
    at = comma + 1;
  }
  Shutdown();
}

void Rank::Result(const std::string& mode, double us, const std::string& extra) {
  std::printf("RESULT mode=%s P=%d value_us=%.4f transport=%s design=%s coll=%s bytes=%" PRId64
              "%s\n",
              mode.c_str(), size_, us,
              g.p2p           ? "p2p"
              : g.binary_ctrl ? "binary"
                              : "bcast",
              g.before ? "before" : "now", g.explicit_coll ? "explicit" : "library", g.bytes,
              extra.c_str());
  std::fflush(stdout);
}

void Rank::RunMode(const std::string& mode) {
  const int last = size_ - 1;
  const int64_t K = g.iters;
  if (mode == "call_pipe") {
    CallPipe(mode);
  } else if (mode == "call_lat") {
    CallLat(mode);
  } else if (mode == "sync_worker" || mode == "sync_all") {
    Syncs(mode);
  } else if (mode == "raw_pipe") {
    RawPipeMode(mode);
  } else if (mode == "raw_lat") {
    Call({Reg(), kRawLat, g.inline_bytes, K});
    Result(mode, result_);
  } else if (mode == "raw_sync") {
    Call({Reg(), kRawSync, g.inline_bytes, last, K});
    Result(mode, result_);
  } else if (mode == "raw_bcast_reduce") {
    Call({Reg(), kRawBcastReduce, g.inline_bytes, 0, K});
    Result(mode, result_);
  } else if (mode == "pingpong") {
    Call({Reg(), kPingPong, K});
    Result(mode, result_);
  } else if (mode == "ar_session" || mode == "ar_fresh" || mode == "ar_made") {
    ArSession(mode);
  } else if (mode == "ar_raw") {
    Call({Reg(), kArRaw, g.bytes, K});
    Result(mode, result_,
           static_cast<size_t>(g.bytes) >= kRingMinBytes && g.explicit_coll
               ? " large=ompi41-rabenseifner"
               : "");
  } else if (mode == "agree") {
    Call({Reg(), kAgree, K});
    Result(mode, result_);
  } else if (mode == "graph16" || mode == "graph1024" || mode == "graph_ar") {
    GraphReplays(mode);
  } else if (mode == "graph_ar_raw") {
    GraphArRaw(mode);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  }
}

void Rank::CallPipe(const std::string& mode) {
  const int64_t K = g.iters;
  double per_call = 0, t[2] = {0, 0};
  const int64_t ks[2] = {std::max<int64_t>(1, K / 2), K};
  for (int round = 0; round < 2; ++round) {
    for (int64_t i = 0; i < ks[round] / 10; ++i) Call({Reg(), kNoop});
    SyncAll();
    double t0 = Now();
    for (int64_t i = 0; i < ks[round]; ++i) Call({Reg(), kNoop});
    SyncWorker(size_ - 1);
    t[round] = Now() - t0;
    per_call = t[round] / ks[round];
  }
  char extra[96];
  std::snprintf(extra, sizeof extra, " per_call_incl_sync_us=%.4f", per_call);
  Result(mode, (t[1] - t[0]) / (ks[1] - ks[0]), extra);
}

void Rank::CallLat(const std::string& mode) {
  const int64_t K = g.iters;
  for (int64_t i = 0; i < K; ++i) {
    Call({Reg(), kMark});
    Cost(g.settle_us);
    double t_issue = Now();
    Call({Reg(), kRecord, i, DoubleBits(t_issue)});
  }
  Call({Reg(), kCollect, K});
  Result(mode, result_);
}

// sync_worker and sync_all: the median round trip (after 2 warm-ups).
void Rank::Syncs(const std::string& mode) {
  std::vector<double> t;
  for (int64_t i = 0; i < g.iters + 2; ++i) {
    double t0 = Now();
    if (mode == "sync_worker") {
      SyncWorker(size_ - 1);
    } else {
      SyncAll();
    }
    if (i >= 2) t.push_back(Now() - t0);
  }
  Result(mode, Median(t));
}

void Rank::RawPipeMode(const std::string& mode) {
  const int64_t K = g.iters, k1 = std::max<int64_t>(1, K / 2);
  Call({Reg(), kRawPipe, g.inline_bytes, k1});
  double t1 = result_ * k1;
  Call({Reg(), kRawPipe, g.inline_bytes, K});
  char extra[96];
  std::snprintf(extra, sizeof extra, " per_call_incl_barrier_us=%.4f", result_);
  Result(mode, (result_ * K - t1) / (K - k1), extra);
}

// disco-bench ccl: warm-up calls, SyncAll, K calls then SyncAll, per call. Two rounds (K/2 and K
// calls): the slope is the per-call cost without the final SyncAll.
void Rank::ArSession(const std::string& mode) {
  const int64_t K = g.iters;
  const bool fresh = mode != "ar_session", uniform = mode != "ar_made";
  int64_t key = 1000000;
  for (int w = 0; w < g.warmup; ++w)
    Call({Reg(), kAllReduce, g.bytes, fresh ? ++key : key, uniform});
  SyncAll();
  const int64_t k1 = K / 2;
  double t[2] = {0, 0}, ring_fix[2] = {0, 0};
  for (int round = 0; round < 2; ++round) {
    const int64_t k = round == 0 ? k1 : K;
    if (k == 0) continue;
    double t0 = Now();
    for (int64_t i = 0; i < k; ++i)
      Call({Reg(), kAllReduce, g.bytes, fresh ? ++key : key, uniform});
    SyncAll();
    t[round] = Now() - t0;
    ring_fix[round] = k * (ring_time_ - ring_measured_);  // capped ring -> full ring
  }
  const double with_sync = (t[1] + ring_fix[1]) / K;
  const double per_call = k1 > 0 ? (t[1] + ring_fix[1] - t[0] - ring_fix[0]) / (K - k1) : with_sync;
  char extra[200];
  std::snprintf(extra, sizeof extra, " per_call_incl_syncall_us=%.4f%s", with_sync,
                k1 > 0 ? "" : " (one round: includes the final SyncAll)");
  std::string more = extra;
  if (ring_time_ != ring_measured_) {
    std::snprintf(extra, sizeof extra, " ring_capped_us=%.3f ring_full_us=%.3f cap=%" PRId64,
                  ring_measured_, ring_time_, g.ring_cap);
    more += extra;
  }
  Result(mode, per_call, more);
}

// disco-bench graph: replays of a captured graph, pipelined. value = per replay (the slope between
// K/2 and K replays); per_replay_incl_sync = bench_graph.cc's TimeReplays(K).
void Rank::GraphReplays(const std::string& mode) {
  const int64_t calls = mode == "graph16" ? 16 : mode == "graph1024" ? 1024 : 16;
  const int64_t id = mode == "graph_ar" ? Install(kStepGraph, 16) : Install(kNoopGraph, calls);
  double slope = 0, at_k = 0;
  Slope([&](int64_t k) { return TimeReplays(id, k); }, &slope, &at_k);
  char extra[160];
  std::snprintf(extra, sizeof extra,
                " per_replay_incl_sync_us=%.4f calls=%" PRId64
                " mcalls_per_s=%.4f mcalls_per_s_incl_sync=%.4f",
                at_k, calls, calls / slope, calls / at_k);
  Result(mode, slope, extra);
}

// disco-bench graph's baseline for the step graph: bench.graph.raw_allreduces(bytes, K) (two raw
// MPI_Allreduces per iteration, worker 0's time) plus one pipelined no-op call. value = the raw
// pair's steady state (raw_2_allreduces_slope: the second half of the iterations, no barrier) +
// the slope per call between K/2 and K calls; raw_2_allreduces = the function's own figure (its
// last barrier shared by the K iterations), call_incl_sync = TimeCalls(K): what disco-bench graph
// prints.
void Rank::GraphArRaw(const std::string& mode) {
  Call({Reg(), kGraphRawAllReduces, g.bytes, g.iters});
  const double raw = result_, raw_slope = raw_slope_;
  double slope = 0, at_k = 0;
  Slope([&](int64_t k) { return TimeCalls(k); }, &slope, &at_k);
  char extra[240];
  std::snprintf(extra, sizeof extra,
                " raw_2_allreduces_us=%.4f raw_2_allreduces_slope_us=%.4f call_us=%.4f"
                " call_incl_sync_us=%.4f baseline_incl_sync_us=%.4f",
                raw, raw_slope, slope, at_k, raw + at_k);
  Result(mode, raw_slope + slope, extra);
}

}  // namespace skel
