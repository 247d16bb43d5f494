// worker.cc: a rank's life (its communicators), the worker loop on ranks 1..P-1, and what a call
// or a replay runs on every rank (worker 0 included): the agreement and the backend's allreduce,
// and the bench functions of disco-bench (src/tools/bench_*.cc) the modes call.
#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rank.h"

namespace skel {

Rank::Rank() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm_dup(MPI_COMM_WORLD, &ctrl_);   // MpiTransport
  MPI_Comm_dup(MPI_COMM_WORLD, &bench_);  // disco-bench's own communicator
#ifdef SKEL_SIM
  // InitCCL's MPI_Comm_split(world, 0, rank) gives the ranks of a dup in the same order; SMPI's
  // split waits in an O(P^2) loop (longer than a whole sweep at 4096 ranks), so a dup here.
  MPI_Comm_dup(MPI_COMM_WORLD, &ccl_);
#else
  MPI_Comm_split(MPI_COMM_WORLD, 0, rank_, &ccl_);
#endif
  prepost_ = g.before ? false : g.prepost == 1 || (g.prepost == -1 && size_ > kPrepostMinRanks);
  errors_received_.assign(size_, 0);
  MPI_Barrier(MPI_COMM_WORLD);
}
Rank::~Rank() {
  if (raw_a_) BigFree(raw_a_), BigFree(raw_b_);
  if (raw_comm_ != MPI_COMM_NULL) MPI_Comm_free(&raw_comm_);
  if (slots_) BigFree(slots_);
  if (send_) BigFree(send_), BigFree(recv_);
  if (tmp_) BigFree(tmp_);
  MPI_Comm_free(&ccl_);
  MPI_Comm_free(&bench_);
  MPI_Comm_free(&ctrl_);
}

// ---- the worker loop (src/session/worker.cc RunWorkerLoop) ------------------------------------
void Rank::RunWorkerLoop() {
  Frame f;
  uint64_t expected = 1;
  uint8_t out[16] = {static_cast<uint8_t>(disco::protocol::ReplyKind::kSyncAck)};
  for (;;) {
    if (posted_) {
      WaitPostedFrame();
      std::memcpy(f.b, posted_frame_.b, g.inline_bytes);
    } else {
      RecvFrame(&f);
    }
    if (f.total_bytes() > static_cast<size_t>(g.inline_bytes)) {  // the rest of a long frame
      rest_.resize(f.total_bytes() - g.inline_bytes);
      Bcast(rest_.data(), static_cast<int>(rest_.size()), ctrl_);
    }
    if (f.frame_seq() != expected) {
      std::fprintf(stderr, "rank %d: desynchronised: expected #%" PRIu64 "\n", rank_, expected);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    ++expected;
    Cost(g.dec_us);
    if (f.flags() & kFlagNextFrameNonblocking) PostFrame();
    switch (f.action()) {
      case Action::kShutdown: {
        uint64_t mine = 0, sum = 0;
        MPI_Reduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, ctrl_);
        int64_t code = 0;
        MPI_Bcast(&code, 1, MPI_INT64_T, 0, ctrl_);  // BroadcastI64
        return;
      }
      case Action::kKillReg:
        break;
      case Action::kCallPacked:
        Run(f);
        break;
      case Action::kInstallGraph:
        graphs_[f.arg(0)] = GraphProgram(f.arg(1), f.arg(2));
        break;
      case Action::kReplayGraph:
        RunGraph(f.arg(0));
        break;
      default:  // (the skeleton sends no other action)
        break;
      case Action::kSyncWorker: {
        int64_t target = f.arg(0);
        if (target == -1) {
          uint64_t mine = 0, dummy = 0;
          if (g.p2p) {
            MPI_Send(out, kSyncAckBytes, MPI_BYTE, 0, kTagReply, ctrl_);
          } else if (g.before) {
            MPI_Gather(&mine, 1, MPI_UINT64_T, nullptr, 1, MPI_UINT64_T, 0, ctrl_);
          } else {
            MPI_Reduce(&mine, &dummy, 1, MPI_UINT64_T, MPI_SUM, 0, ctrl_);  // ReduceSumU64
          }
        } else if (target == rank_) {
          MPI_Send(out, kSyncAckBytes, MPI_BYTE, 0, kTagReply, ctrl_);  // EncodeSyncAck
        }
        break;
      }
    }
    // ProgressSends(false): no pending error reports, hence no MPI call.
  }
}

// A replay on any rank (Worker::ReplayGraph): its recorded calls in order; the CPU cost of a run
// of fast-path calls is charged at once.
void Rank::RunGraph(int64_t id) {
  for (int64_t step : graphs_.at(id)) {
    if (step > 0) {
      Cost(step * g.graph_call_ns / 1000);
      continue;
    }
    Cost(g.graph_coll_us);
    // Both allreduces of the step graph name one register (send = recv = a) that the graph
    // writes at every replay: one key, agreed at the first replay's first allreduce only.
    const int64_t key = -id;
    Ensure(g.bytes);
    if (std::find(agreed_.begin(), agreed_.end(), key) == agreed_.end()) {
      int64_t all[kAgreementValues];
      AgreementValues(g.bytes / 4, kFloat32Code, all);
      HostMax(all, kAgreementValues);
      agreed_.push_back(key);
    }
    BackendAllReduce(g.bytes, /*in_place=*/true);
  }
}

// disco.allreduce(send, "sum", false, recv): CheckAndAgree, then the backend's AllReduce.
// `key` names the (registers, versions); `uniform`: the tensors came from disco.empty.
void Rank::AllReduce(int64_t bytes, int64_t key, bool uniform) {
  Ensure(bytes);
  const int64_t n = bytes / 4;
  const bool skip = !g.before && uniform;
  if (!skip && std::find(agreed_.begin(), agreed_.end(), key) == agreed_.end()) {
    int64_t all[kAgreementValues];
    AgreementValues(n, kFloat32Code, all);
    HostMax(all, g.before ? 5 : kAgreementValues);  // the earlier design agreed on 5 values
    if (agreed_.size() >= kMaxAgreedKeys) agreed_.clear();
    agreed_.push_back(key);
  }
  BackendAllReduce(bytes);
}

// A call's body on every rank (worker 0 included): the function its frame names.
void Rank::Run(const Frame& f) {
  const int64_t fn = f.arg(1);
  switch (fn) {
    case kNoop:
      break;
    case kMark:  // bench.mark_start
      if (!g.no_barrier) MPI_Barrier(bench_);
      break;
    case kRecord:  // bench.noop_record(payload, i, t_issue)
      Record(f.arg(2), f.arg(3));
      break;
    case kCollect:  // bench.collect(n)
      Collect(f.arg(2));
      break;
    case kRawPipe:  // bench.raw_pipelined(bytes, iters)
      RawPipe(f.arg(2), f.arg(3));
      break;
    case kRawLat:  // bench.raw_latency(bytes, iters, same_clock), plus the settle time
      RawLat(f.arg(2), f.arg(3));
      break;
    case kRawSync:         // bench.raw_sync(bytes, target, iters)
    case kRawBcastReduce:  // a frame's broadcast + a reduce of one u64: SyncAll's floor
      RawSync(fn == kRawSync, f.arg(2), f.arg(3), f.arg(4));
      break;
    case kPingPong:
      PingPong(f.arg(2));
      break;
    case kAllReduce:  // arg 2 = bytes, arg 3 = the key (registers, versions), arg 4 = uniform
      AllReduce(f.arg(2), f.arg(3), f.arg(4) != 0);
      break;
    case kArRaw:  // bench.ccl_raw
      ArRaw(f.arg(2), f.arg(3));
      break;
    case kGraphRawAllReduces:  // bench.graph.raw_allreduces(bytes, iters)
      GraphRawAllReduces(f.arg(2), f.arg(3));
      break;
    case kAgree:
      Agree(f.arg(2));
      break;
  }
}

void Rank::Record(int64_t i, int64_t t_issue_bits) {
  double t_issue;
  std::memcpy(&t_issue, &t_issue_bits, 8);
  if (static_cast<int64_t>(times_.size()) <= i) times_.resize(i + 1);
  times_[i] = Now() - t_issue;
}

// Per-iteration max over ranks, median on rank 0.
void Rank::Collect(int64_t n) {
  times_.resize(n);
  std::vector<double> maxed(times_.size());
  MPI_Reduce(times_.data(), maxed.data(), static_cast<int>(times_.size()), MPI_DOUBLE, MPI_MAX, 0,
             bench_);
  result_ = rank_ == 0 ? Median(maxed) : 0;
  times_.clear();
}

void Rank::RawPipe(int64_t bytes, int64_t iters) {
  std::vector<uint8_t> p(bytes, 1);
  auto end = [&]() {
    if (!g.no_barrier) {
      MPI_Barrier(bench_);
    } else if (rank_ == size_ - 1) {
      MPI_Send(p.data(), 0, MPI_BYTE, 0, 9, bench_);
    } else if (rank_ == 0) {
      MPI_Recv(p.data(), 0, MPI_BYTE, size_ - 1, 9, bench_, MPI_STATUS_IGNORE);
    }
  };
  for (int64_t i = 0; i < iters / 10; ++i) Bcast(p.data(), bytes, bench_);
  end();
  double t0 = Now();
  for (int64_t i = 0; i < iters; ++i) Bcast(p.data(), bytes, bench_);
  end();
  result_ = (Now() - t0) / iters;
}

void Rank::RawLat(int64_t bytes, int64_t iters) {
  std::vector<uint8_t> p(std::max<int64_t>(bytes, 8), 1);
  std::vector<double> t(iters);
  for (int64_t i = 0; i < iters; ++i) {
    if (!g.no_barrier) MPI_Barrier(bench_);
    if (rank_ == 0) Cost(g.settle_us);
    double t0 = Now();
    if (rank_ == 0) std::memcpy(p.data(), &t0, 8);
    Bcast(p.data(), bytes, bench_);
    double t1 = Now();
    std::memcpy(&t0, p.data(), 8);
    t[i] = t1 - t0;
  }
  std::vector<double> maxed(iters);
  MPI_Reduce(t.data(), maxed.data(), iters, MPI_DOUBLE, MPI_MAX, 0, bench_);
  result_ = rank_ == 0 ? Median(maxed) : 0;
}

// `reply`: bench.raw_sync (a 9-byte reply from `target`), else a reduce of one u64.
void Rank::RawSync(bool reply, int64_t bytes, int64_t target, int64_t iters) {
  std::vector<uint8_t> p(bytes, 1);
  uint8_t answer[9] = {0};
  std::vector<double> t(iters);
  MPI_Barrier(bench_);
  for (int64_t i = 0; i < iters; ++i) {
    double t0 = Now();
    Bcast(p.data(), bytes, bench_);
    if (reply) {
      if (rank_ == target) MPI_Send(answer, 9, MPI_BYTE, 0, 7, bench_);
      if (rank_ == 0) MPI_Recv(answer, 9, MPI_BYTE, target, 7, bench_, MPI_STATUS_IGNORE);
    } else {
      uint64_t mine = 0, sum = 0;
      MPI_Reduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, bench_);
    }
    t[i] = Now() - t0;
  }
  MPI_Barrier(bench_);
  result_ = Median(t);
}

void Rank::PingPong(int64_t iters) {
  int peer = size_ - 1;
  uint8_t m[9] = {0};
  MPI_Barrier(bench_);
  double t0 = Now();
  for (int64_t i = 0; i < iters; ++i) {
    if (rank_ == 0) {
      MPI_Send(m, 9, MPI_BYTE, peer, 8, bench_);
      MPI_Recv(m, 9, MPI_BYTE, peer, 8, bench_, MPI_STATUS_IGNORE);
    } else if (rank_ == peer) {
      MPI_Recv(m, 9, MPI_BYTE, 0, 8, bench_, MPI_STATUS_IGNORE);
      MPI_Send(m, 9, MPI_BYTE, 0, 8, bench_);
    }
  }
  result_ = (Now() - t0) / iters / 2;
  MPI_Barrier(bench_);
}

// bench.ccl_raw: raw allreduces back to back on every rank; per call, the slope between K/2 and K
// calls (max over ranks), free of the start skew.
void Rank::ArRaw(int64_t bytes, int64_t iters) {
  Ensure(bytes);
  int64_t n = bytes / 4;
  auto one = [&]() {
    if (static_cast<size_t>(bytes) >= kRingMinBytes) {
      RabenseifnerAllReduce(send_, recv_, n, Tmp());
    } else {
      SmallAllReduce(send_, recv_, n, Tmp(), ccl_);
    }
  };
  one();
  if (!g.no_barrier) MPI_Barrier(ccl_);
  const int64_t k1 = iters / 2;
  double t0 = Now();
  for (int64_t i = 0; i < k1; ++i) one();
  double t1 = Now();
  for (int64_t i = k1; i < iters; ++i) one();
  double t2 = Now();
  double mine = k1 > 0 ? (t2 - t1) / (iters - k1) : (t2 - t0) / iters, worst = 0;
  MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, bench_);
  result_ = worst;
}

// bench.graph.raw_allreduces(bytes, iters): 10 warm-ups, then iters x 2 MPI_Allreduces between
// barriers, on its own communicator; worker 0's time per iteration.
void Rank::GraphRawAllReduces(int64_t bytes, int64_t iters) {
  const int64_t n = bytes / 4;
  if (raw_comm_ == MPI_COMM_NULL) MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm_);  // its first call
  if (raw_bytes_ != bytes) {
    if (raw_a_) BigFree(raw_a_), BigFree(raw_b_);
    raw_a_ = static_cast<float*>(BigAlloc(bytes));
    raw_b_ = static_cast<float*>(BigAlloc(bytes));
    raw_bytes_ = bytes;
  }
  Ensure(bytes);
  for (int i = 0; i < 10; ++i) SmallAllReduce(raw_a_, raw_b_, n, Tmp(), raw_comm_);
  MPI_Barrier(raw_comm_);
  double t0 = Now(), t_half = t0;
  for (int64_t i = 0; i < iters; ++i) {
    if (i == iters / 2) t_half = Now();
    SmallAllReduce(raw_a_, raw_b_, n, Tmp(), raw_comm_);
    SmallAllReduce(raw_b_, raw_a_, n, Tmp(), raw_comm_);
  }
  const double t_end = Now();
  MPI_Barrier(raw_comm_);
  result_ = (Now() - t0) / iters;  // the function's value: the last barrier included
  // Not in the real function (no MPI call): the steady state, the slope over the second
  // half of the iterations without the barrier (the predictions' figure at small K).
  raw_slope_ = (t_end - t_half) / (iters - iters / 2);
}

// One agreement round alone: from rank 0's entry to the last rank's exit.
void Rank::Agree(int64_t iters) {
  std::vector<double> entry(iters), leave(iters);
  if (!g.no_barrier) MPI_Barrier(ccl_);
  for (int64_t i = 0; i < iters; ++i) {
    if (g.no_barrier && rank_ == 0) Cost(g.settle_us);
    int64_t all[kAgreementValues];
    AgreementValues(1024, 7, all);
    entry[i] = Now();
    HostMax(all, kAgreementValues);
    leave[i] = Now();
  }
  std::vector<double> last(iters);
  MPI_Reduce(leave.data(), last.data(), iters, MPI_DOUBLE, MPI_MAX, 0, bench_);
  for (int64_t i = 0; i < iters; ++i) last[i] -= entry[i];
  result_ = rank_ == 0 ? Median(last) : 0;
}

}  // namespace skel
