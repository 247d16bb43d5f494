// controller.cc: rank 0's side of the session (src/session/session.cc): frames, the deferred
// collective on worker 0, graphs' install and replay, SyncWorker, SyncAll and shutdown.
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "rank.h"

namespace skel {

uint64_t Rank::Broadcast(Action action, const std::vector<int64_t>& args, uint16_t flags,
                         uint32_t payload) {
  const size_t total = kHeaderBytes + (payload ? payload : 8 + kArgBytes * args.size());
  if (total > static_cast<size_t>(g.inline_bytes)) FlushWorker0();  // a long frame waits for it
  ++frame_.seq;
  Cost(g.enc_us);  // EncodeCommand (+ running the call as worker 0, measured together)
  frame_.Encode(action, flags, args, payload);
  SendFrame(&frame_);
  if (total > static_cast<size_t>(g.inline_bytes) && size_ > 1) {
    rest_.assign(total - g.inline_bytes, 0);
    Bcast(rest_.data(), static_cast<int>(rest_.size()), ctrl_);
  }
  return frame_.seq;
}
// Session::Capture of one of disco-bench graph's graphs: its install frame, once (the lookup of
// disco.allreduce inside the step graph's capture travels in it, as a lookup step).
int64_t Rank::Install(int64_t kind, int64_t calls) {
  auto it = graph_of_.find(kind << 32 | calls);
  if (it != graph_of_.end()) return it->second;
  const int64_t id = next_graph_++;
  Broadcast(Action::kInstallGraph, {id, kind, calls}, 0, InstallPayloadBytes(kind, calls));
  FlushWorker0();
  graphs_[id] = GraphProgram(kind, calls);
  graph_of_[kind << 32 | calls] = id;
  return id;
}
// Graph::Replay (SessionImpl::ReplayGraph): one inline frame [graph id] by the ordinary
// broadcast, then worker 0 runs the program at once.
void Rank::Replay(int64_t id) {
  Broadcast(Action::kReplayGraph, {id});
  FlushWorker0();
  RunGraph(id);
}
// bench_graph.cc TimeReplays: k/10 + 1 replays, SyncAll, then k replays and SyncWorker(P-1);
// microseconds per replay.
double Rank::TimeReplays(int64_t id, int64_t k) {
  for (int64_t i = 0; i < k / 10 + 1; ++i) Replay(id);
  SyncAll();
  double t0 = Now();
  for (int64_t i = 0; i < k; ++i) Replay(id);
  SyncWorker(size_ - 1);
  return (Now() - t0) / k;
}
// bench_graph.cc TimeCalls (= disco-bench call's pipelined figure): k/10 no-op calls, SyncAll,
// then k calls and SyncWorker(P-1); microseconds per call.
double Rank::TimeCalls(int64_t k) {
  for (int64_t i = 0; i < k / 10; ++i) Call({Reg(), kNoop});
  SyncAll();
  double t0 = Now();
  for (int64_t i = 0; i < k; ++i) Call({Reg(), kNoop});
  SyncWorker(size_ - 1);
  return (Now() - t0) / k;
}
void Rank::FlushWorker0() {
  if (deferred_) {
    deferred_ = false;
    Run(deferred_frame_);
  }
}
void Rank::Call(
    const std::vector<int64_t>& args) {  // args[0] = result register, args[1] = function
  const bool collective = Collective(args[1]);
  Broadcast(Action::kCallPacked, args, collective && prepost_ ? kFlagNextFrameNonblocking : 0);
  FlushWorker0();  // the previous call, now that this frame is on its way
  if (collective) {
    deferred_ = true;
    deferred_frame_ = frame_;
  } else {
    Run(frame_);
  }
}
void Rank::DrainErrors() {
  int flag = 0;
  MPI_Status st;
  MPI_Iprobe(MPI_ANY_SOURCE, kTagError, ctrl_, &flag, &st);
}
void Rank::SyncWorker(int w) {
  FlushWorker0();
  if (w != 0) {
    Broadcast(Action::kSyncWorker, {w});
    uint8_t reply[64];
    MPI_Recv(reply, 64, MPI_BYTE, w, kTagReply, ctrl_, MPI_STATUS_IGNORE);  // ReceiveSmall
  }
  DrainErrors();
}
void Rank::SyncAll() {
  FlushWorker0();
  if (size_ == 1) return;
  Broadcast(Action::kSyncWorker, {-1});
  if (g.p2p) {  // TVM model: every worker answers; rank 0 reads them one by one
    uint8_t reply[64];
    for (int w = 1; w < size_; ++w)
      MPI_Recv(reply, 64, MPI_BYTE, w, kTagReply, ctrl_, MPI_STATUS_IGNORE);
    return;
  }
  uint64_t mine = 0;
  if (g.before) {  // GatherU64, then CollectErrors for every worker
    sent_.assign(size_, 0);
    MPI_Gather(&mine, 1, MPI_UINT64_T, sent_.data(), 1, MPI_UINT64_T, 0, ctrl_);
    Cost(size_ * g.loop_ns / 1000);
  } else {  // CollectAllErrors: one reduced count, nothing per worker
    uint64_t total = 0;
    MPI_Reduce(&mine, &total, 1, MPI_UINT64_T, MPI_SUM, 0, ctrl_);
  }
}
void Rank::Shutdown() {
  FlushWorker0();
  Broadcast(Action::kShutdown, {0});
  if (size_ > 1) {
    uint64_t mine = 0, total = 0;
    MPI_Reduce(&mine, &total, 1, MPI_UINT64_T, MPI_SUM, 0, ctrl_);
    int64_t code = 0;
    MPI_Bcast(&code, 1, MPI_INT64_T, 0, ctrl_);
  }
}

}  // namespace skel
