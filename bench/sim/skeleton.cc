// skeleton.cc: disco's control plane and MPI collectives as a skeleton that makes exactly disco's
// MPI calls (same communicators, message sizes, tags and order) and injects the CPU costs of the
// real runtime. One source, two builds (bench/sim/README.md):
//
//   mpicxx  -O2 -o skeleton-real skeleton.cc            real MPI: calibration at 2 ranks, --rates
//   smpicxx -O2 -DSKEL_SIM -o skeleton-sim skeleton.cc  SimGrid SMPI: predictions at 2 ... 4096
//
// Rank 0 is the controller and worker 0; ranks 1..P-1 run a worker loop on real frames (disco's
// 24-byte header, padded to DISCO_INLINE_BYTES = 256, with its sequence check). What it mirrors,
// file by file (keep it true to them: bench/sim/crosscheck.sh compares it with disco itself):
//   src/session/session.cc   Broadcast (one MPI_Bcast of the frame; after a collective call's
//                            frame, MPI_Ibcast + wait), the deferred collective on worker 0 (run
//                            after the next frame is out), SyncWorker (frame, 9-byte reply without
//                            probe, MPI_Iprobe for error reports), SyncAll and shutdown (frame +
//                            MPI_Reduce of one u64 error count)
//   src/session/worker.cc    the worker loop; MPI_Ibcast of the next frame posted before a
//                            collective call runs (kFlagNextFrameNonblocking)
//   src/ccl/builtins.cc      the agreement round (MPI_Allreduce of 7 int64 MAX) unless the key
//                            was agreed before or the tensors' metadata is uniform (disco.empty)
//   src/ccl/mpi/*.cc         allreduce: MPI_Allreduce, or disco's ring for >= 256 KiB with shares
//                            of >= 64 KiB (UseRing)
//   src/session/graph.cc     Capture: one install frame (inline + the rest); Replay: one inline
//                            frame by the blocking broadcast, then worker 0 runs the program
//   src/session/worker.cc    ReplayGraph: recorded calls on the fast path (RunGraphCall), recorded
//                            collectives through CallPacked, their agreement once per graph key
//   src/tools/bench_*.cc     the disco-bench methods the modes below reproduce
// --before gives the earlier design (SyncAll by MPI_Gather + a loop over P on rank 0, an
// agreement round for every new tensor, the ring for every size >= 256 KiB, no preposted frames).
//
// Collectives: --collectives library calls MPI's (the real build, and the cross-check with disco
// under SMPI, whose own collectives are SMPI's); --collectives explicit (the default under SMPI)
// spells out with point-to-point calls what Open MPI 4.1's coll/tuned picks for these sizes
// (k-nomial radix-4 broadcast, recursive doubling, Rabenseifner) and libnbc's binomial MPI_Ibcast,
// whose forwarding happens whenever the rank is inside MPI (waits here go through WaitAll, which
// forwards the posted frame the moment it arrives). SimGrid's own k-nomial broadcast first builds
// SMP leader communicators in O(P^2), and its MPI_Ibcast is a flat send from the root, so neither
// serves beyond a few hundred ranks.
//
// Usage: skeleton [options] MODE[,MODE...]      (each mode prints one "RESULT" line on rank 0)
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
//
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
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#ifdef SKEL_SIM
#include <smpi/smpi.h>
#include <simgrid/s4u/Host.hpp>
#endif

namespace {

// ---- parameters (read-only after main parses them; the same on every rank) -------------------
struct Params {
  int64_t iters = 200;
  int64_t bytes = 4096;
  double settle_us = 0;
  bool no_barrier = false;
  double enc_us = 0.1;     // controller: encode a frame + run the call as worker 0
  double dec_us = 0.1;     // worker: parse + decode + run a no-op (watchdog Begin/End included)
  double loop_ns = 2.2;    // --before: rank 0's SyncAll loop over P workers, per worker
  double reduce_gbs = 10;  // float32 sum, GB/s of output (0: free)
  double memcpy_gbs = 10;  // out-of-place copy in Open MPI's allreduce (0: free)
  bool p2p = false;
  bool binary_ctrl = false;
  int64_t ring_cap = 0;
#ifdef SKEL_SIM
  bool explicit_coll = true;
#else
  bool explicit_coll = false;
#endif
  int prepost = -1;  // DISCO_PREPOST_FRAMES: -1 auto (above 4 ranks), 0, 1
  bool before = false;
  int inline_bytes = 256;
  int warmup = 2;
  // A replay (src/session/worker.cc ReplayGraph): per recorded call that is not a collective
  // (RunGraphCall, the fast path), and per recorded collective's ordinary call path (CallPacked,
  // the agreement's key lookup; its MPI excluded). Measured with disco-bench graph at 1 rank
  // (bench/sim/README.md, "Capture and replay").
  double graph_call_ns = 11;
  double graph_coll_us = 0.28;
};
Params g;

// Microseconds: simulated time under SMPI; CLOCK_MONOTONIC in the real build (disco's clock,
// src/mpi/clock.h).
double Now() {
#ifdef SKEL_SIM
  return MPI_Wtime() * 1e6;
#else
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
#endif
}

// CPU work the real runtime does and the skeleton does not: simulated, or spun for real.
void Cost(double us) {
  if (us <= 0) return;
#ifdef SKEL_SIM
  smpi_execute(us * 1e-6);
#else
  double t0 = Now();
  while (Now() - t0 < us) {
  }
#endif
}

void* BigAlloc(size_t n) {
#ifdef SKEL_SIM
  return SMPI_SHARED_MALLOC(n);  // one physical copy for all simulated ranks
#else
  void* p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  std::memset(p, 0, n);
  return p;
#endif
}
void BigFree(void* p) {
#ifdef SKEL_SIM
  SMPI_SHARED_FREE(p);
#else
  free(p);
#endif
}

// dst = a + b over n floats: computed for real, or charged at reduce_gbs under SMPI.
void ReduceF32(float* dst, const float* a, const float* b, int64_t n) {
#ifdef SKEL_SIM
  (void)dst, (void)a, (void)b;
  if (g.reduce_gbs > 0) Cost(n * 4.0 / (g.reduce_gbs * 1e3));
#else
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
#endif
}
void CopyBytes(void* dst, const void* src, size_t n) {
#ifdef SKEL_SIM
  (void)dst, (void)src;
  if (g.memcpy_gbs > 0) Cost(n / (g.memcpy_gbs * 1e3));
#else
  std::memcpy(dst, src, n);
#endif
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// disco's constants (src/session/mpi_transport.h, src/ccl/mpi/communicator.h, config.h).
constexpr int kTagReply = 101, kTagError = 102, kTagFrame = 100, kRingTag = 12;
constexpr size_t kRingMinBytes = 256 * 1024, kRingMinShareBytes = 64 * 1024;
constexpr size_t kSegmentBytes = 256 * 1024;
constexpr int64_t kWindow = 4;
constexpr int kPrepostMinRanks = 4;
constexpr uint16_t kFlagNextFrameNonblocking = 1;

bool UseRing(size_t bytes, int ranks) {
  if (g.before) return bytes >= kRingMinBytes;
  return bytes >= kRingMinBytes && bytes / static_cast<size_t>(ranks) >= kRingMinShareBytes;
}

// ---- frames (src/protocol/frame.h) --------------------------------------------------------------
enum Action : uint8_t {
  kShutdown = 0,
  kKillReg = 1,
  kCallPacked = 3,
  kSyncWorker = 4,
  kInstallGraph = 8,
  kReplayGraph = 9
};
enum Fn : int64_t {
  kNoop = 1,
  kMark,
  kRecord,
  kCollect,
  kRawPipe,
  kRawLat,
  kRawSync,
  kRawBcastReduce,
  kPingPong,
  kAllReduce,
  kArRaw,
  kAgree,
  kGraphRawAllReduces
};
struct Frame {
  uint8_t b[512];  // >= DISCO_INLINE_BYTES
  uint64_t seq = 0;
  // header + u32 kill count + u32 argc + args (a one-byte tag and an i64 each). `payload`, when
  // given, is the payload length the header announces (an install frame: its operands beyond the
  // inline bytes follow in a second MPI_Bcast, whose content the skeleton does not need).
  void Encode(uint8_t action, uint16_t flags, const std::vector<int64_t>& args,
              uint32_t payload = 0) {
    std::memset(b, 0, g.inline_bytes);
    uint32_t magic = 0x4F435344, zero = 0, argc = args.size();
    if (payload == 0) payload = 8 + 9 * args.size();
    std::memcpy(b, &magic, 4);
    b[4] = 1;
    b[5] = action;
    std::memcpy(b + 6, &flags, 2);
    std::memcpy(b + 8, &seq, 8);
    std::memcpy(b + 16, &payload, 4);
    std::memcpy(b + 24, &zero, 4);
    std::memcpy(b + 28, &argc, 4);
    for (size_t i = 0; i < args.size(); ++i) {
      b[32 + 9 * i] = 2;  // int
      std::memcpy(b + 33 + 9 * i, &args[i], 8);
    }
  }
  uint8_t action() const { return b[5]; }
  uint16_t flags() const {
    uint16_t f;
    std::memcpy(&f, b + 6, 2);
    return f;
  }
  int64_t arg(int i) const {
    int64_t v;
    std::memcpy(&v, b + 33 + 9 * i, 8);
    return v;
  }
  uint64_t frame_seq() const {
    uint64_t s;
    std::memcpy(&s, b + 8, 8);
    return s;
  }
  size_t total_bytes() const {  // header + payload
    uint32_t p;
    std::memcpy(&p, b + 16, 4);
    return 24 + p;
  }
};

// ---- captured graphs (src/session/graph.cc, src/protocol/graph.h) ------------------------------
// The graphs disco-bench graph captures (src/tools/bench_graph.cc).
enum GraphKind : int64_t {
  kNoopGraph = 1,  // N recorded calls of bench.noop
  kStepGraph = 2,  // 7 no-ops, bench.graph.activation(buffer), allreduce, 6 no-ops, allreduce
};
// A program as a worker runs it: > 0 = that many recorded calls on the fast path in a row
// (RunGraphCall), kGraphAllReduce = disco.allreduce(a, "sum", false, a) on the register a recorded
// call wrote (CallPacked: the agreement keyed by the graph, then the backend's in-place allreduce).
constexpr int64_t kGraphAllReduce = -1;
std::vector<int64_t> GraphProgram(int64_t kind, int64_t n) {
  if (kind == kNoopGraph) return {n};
  return {8, kGraphAllReduce, 6, kGraphAllReduce};
}
// The install frame's payload (SessionImpl::Install; src/protocol/serializer.cc: an int or a DRef
// is a 1-byte tag and 8 bytes, a bool 2 bytes, a string a tag, a u64 length and its bytes): u32
// kill count, u32 operand count, then id, input count, R, the R registers the capture reserved,
// the step count S, and the S steps. A call step: kind, result register, function, flags, mask,
// argument count, then the arguments; a lookup step: kind, register, name.
uint32_t InstallPayloadBytes(int64_t kind, int64_t n) {
  const uint32_t word = 9, call = 6 * word;
  auto str = [](uint32_t len) { return 1 + 8 + len; };
  if (kind == kNoopGraph) return 8 + word * (3 + n + 1) + n * call;
  // 13 no-ops, the activation (one DRef argument), the lookup of "disco.allreduce" (its first use
  // is inside the capture) and 2 allreduces (a, "sum", false, a): 17 registers, 17 steps.
  const uint32_t steps =
      13 * call + (call + word) + (2 * word + str(15)) + 2 * (call + word + str(3) + 2 + word);
  return 8 + word * (3 + 17 + 1) + steps;
}

int64_t DoubleBits(double d) {
  int64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// ---- one simulated (or real) rank: every piece of state lives here, none in globals ------------
// SMPI runs every rank in one process; the skeleton is not privatized, so per-rank state must not
// be global (Params is read-only and the same everywhere).
class Rank {
 public:
  Rank() {
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
  ~Rank() {
    if (raw_a_) BigFree(raw_a_), BigFree(raw_b_);
    if (raw_comm_ != MPI_COMM_NULL) MPI_Comm_free(&raw_comm_);
    if (slots_) BigFree(slots_);
    if (send_) BigFree(send_), BigFree(recv_);
    if (tmp_) BigFree(tmp_);
    MPI_Comm_free(&ccl_);
    MPI_Comm_free(&bench_);
    MPI_Comm_free(&ctrl_);
  }
  int rank() const { return rank_; }

  // ---- the worker loop on ranks 1..P-1 (src/session/worker.cc RunWorkerLoop) ------------------
  void RunWorkerLoop() {
    Frame f;
    uint64_t expected = 1;
    uint8_t out[16] = {1};
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
        case kShutdown: {
          uint64_t mine = 0, sum = 0;
          MPI_Reduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, ctrl_);
          int64_t code = 0;
          MPI_Bcast(&code, 1, MPI_INT64_T, 0, ctrl_);  // BroadcastI64
          return;
        }
        case kKillReg:
          break;
        case kCallPacked:
          Run(f);
          break;
        case kInstallGraph:
          graphs_[f.arg(0)] = GraphProgram(f.arg(1), f.arg(2));
          break;
        case kReplayGraph:
          RunGraph(f.arg(0));
          break;
        case kSyncWorker: {
          int64_t target = f.arg(0);
          if (target == -1) {
            uint64_t mine = 0, dummy = 0;
            if (g.p2p) {
              MPI_Send(out, 9, MPI_BYTE, 0, kTagReply, ctrl_);
            } else if (g.before) {
              MPI_Gather(&mine, 1, MPI_UINT64_T, nullptr, 1, MPI_UINT64_T, 0, ctrl_);
            } else {
              MPI_Reduce(&mine, &dummy, 1, MPI_UINT64_T, MPI_SUM, 0, ctrl_);  // ReduceSumU64
            }
          } else if (target == rank_) {
            MPI_Send(out, 9, MPI_BYTE, 0, kTagReply, ctrl_);  // EncodeSyncAck: 9 bytes
          }
          break;
        }
      }
      // ProgressSends(false): no pending error reports, hence no MPI call.
    }
  }

  // ---- the controller on rank 0 ---------------------------------------------------------------
  void RunModes(const std::string& modes) {
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

 private:
  int rank_ = 0, size_ = 1;
  MPI_Comm ctrl_, bench_, ccl_;
  bool prepost_ = false;
  // worker state
  std::vector<double> times_;
  double result_ = 0;         // worker 0's return value (as DebugGetFromRemote(0))
  double ring_time_ = 0;      // disco's ring: elapsed (extrapolated to P-1 steps when capped)
  double ring_measured_ = 0;  // disco's ring: elapsed as run
  std::vector<int64_t> agreed_;
  std::map<int64_t, std::vector<int64_t>> graphs_;  // installed programs, by graph id
  std::vector<uint8_t> rest_;                       // a long frame's bytes beyond the inline ones
  MPI_Comm raw_comm_ = MPI_COMM_NULL;               // bench.graph.raw_allreduces' own communicator
  float *raw_a_ = nullptr, *raw_b_ = nullptr;
  int64_t raw_bytes_ = 0;
  double raw_slope_ = 0;
  int64_t bytes_ = 0;
  float *send_ = nullptr, *recv_ = nullptr, *tmp_ = nullptr, *slots_ = nullptr;
  std::vector<MPI_Request> requests_, waiting_;
  // the next frame, posted before a collective call runs (kFlagNextFrameNonblocking)
  bool posted_ = false;
  Frame posted_frame_;
  MPI_Request frame_req_ = MPI_REQUEST_NULL;  // explicit: the receive from the parent
  bool frame_arrived_ = false;
  std::vector<MPI_Request> forwards_;
  // controller state
  Frame frame_;
  bool next_nonblocking_ = false;
  bool deferred_ = false;
  Frame deferred_frame_;
  std::vector<uint64_t> errors_received_, sent_;
  int64_t reg_ = 0;
  int64_t next_graph_ = 1;
  std::map<int64_t, int64_t> graph_of_;  // kind * 2^32 + calls -> installed graph id

  static constexpr int kBcastTag = 200, kAllreduceTag = 201, kIbcastTag = 202;

  // ---- libnbc's binomial MPI_Ibcast (Open MPI 4.1 for a 256-byte frame at more than 4 ranks;
  // at 4 or fewer ranks the root sends to each rank: "linear") ----------------------------------
  int IbcastParent() const {
    if (size_ <= 4) return 0;
    int r = 0;
    while ((2 << r) <= rank_) ++r;  // rank_ in [2^r, 2^(r+1))
    return rank_ - (1 << r);
  }
  std::vector<int> IbcastChildren() const {
    std::vector<int> c;
    if (size_ <= 4) {
      if (rank_ == 0)
        for (int i = 1; i < size_; ++i) c.push_back(i);
      return c;
    }
    for (int bit = 1; bit < size_; bit <<= 1) {
      if ((rank_ == 0 || rank_ < bit) && rank_ + bit < size_) c.push_back(rank_ + bit);
    }
    return c;
  }
  // Workers: post the receive of the next frame (MpiTransport::PostBroadcast).
  void PostFrame() {
    posted_ = true;
    frame_arrived_ = false;
    if (!g.explicit_coll) {
      MPI_Ibcast(posted_frame_.b, g.inline_bytes, MPI_BYTE, 0, ctrl_, &frame_req_);
      return;
    }
    MPI_Irecv(posted_frame_.b, g.inline_bytes, MPI_BYTE, IbcastParent(), kIbcastTag, ctrl_,
              &frame_req_);
  }
  // libnbc's sends of a frame to this rank's children; their requests are appended to `reqs`.
  void IbcastToChildren(const void* frame, std::vector<MPI_Request>* reqs) {
    for (int c : IbcastChildren()) {
      reqs->push_back(MPI_REQUEST_NULL);
      MPI_Isend(frame, g.inline_bytes, MPI_BYTE, c, kIbcastTag, ctrl_, &reqs->back());
    }
  }
  // The posted frame arrived: send it on to this rank's children (libnbc's next round).
  void ForwardFrame() {
    frame_arrived_ = true;
    IbcastToChildren(posted_frame_.b, &forwards_);
  }
  void WaitPostedFrame() {  // MpiTransport::WaitPosted
    MPI_Wait(&frame_req_, MPI_STATUS_IGNORE);
    if (g.explicit_coll && !frame_arrived_) ForwardFrame();
    MPI_Waitall(static_cast<int>(forwards_.size()), forwards_.data(), MPI_STATUSES_IGNORE);
    forwards_.clear();
    posted_ = false;
  }
  // MPI_Waitall of `reqs` that, like Open MPI's progress engine inside any wait, forwards a posted
  // frame the moment it arrives.
  void WaitAll(int n, MPI_Request* reqs) {
    if (!posted_ || frame_arrived_ || !g.explicit_coll) {
      MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
      return;
    }
    waiting_.assign(reqs, reqs + n);
    waiting_.push_back(frame_req_);
    for (;;) {
      bool left = false;
      for (int i = 0; i < n; ++i) left = left || waiting_[i] != MPI_REQUEST_NULL;
      if (!left) break;
      int index = MPI_UNDEFINED;
      MPI_Waitany(n + 1, waiting_.data(), &index, MPI_STATUS_IGNORE);
      if (index == n) ForwardFrame();
    }
    frame_req_ = waiting_[n];  // MPI_REQUEST_NULL once it completed
    for (int i = 0; i < n; ++i) reqs[i] = MPI_REQUEST_NULL;
  }
  void SendRecv(const void* out, int out_bytes, int to, void* in, int in_bytes, int from, int tag,
                MPI_Comm comm) {
    MPI_Request r[2];
    MPI_Irecv(in, in_bytes, MPI_BYTE, from, tag, comm, &r[0]);
    MPI_Isend(out, out_bytes, MPI_BYTE, to, tag, comm, &r[1]);
    WaitAll(2, r);
  }

  // ---- the control transport ------------------------------------------------------------------
  // The studied alternative for the issue rate: a binary tree (rank r forwards to 2r+1, 2r+2).
  void BinaryTreeBcast(void* buf, int n, MPI_Comm comm) {
    if (rank_ > 0) MPI_Recv(buf, n, MPI_BYTE, (rank_ - 1) / 2, kBcastTag, comm, MPI_STATUS_IGNORE);
    MPI_Request reqs[2];
    int nreq = 0;
    for (int c = 2 * rank_ + 1; c <= 2 * rank_ + 2 && c < size_; ++c)
      MPI_Isend(buf, n, MPI_BYTE, c, kBcastTag, comm, &reqs[nreq++]);
    MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
  }

  void SendFrame(Frame* f) {  // rank 0: SessionImpl::Broadcast
    if (size_ == 1) return;
    if (next_nonblocking_ && !g.p2p && !g.binary_ctrl) {
      if (!g.explicit_coll) {
        MPI_Request r;
        MPI_Ibcast(f->b, g.inline_bytes, MPI_BYTE, 0, ctrl_, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      } else {
        std::vector<MPI_Request> r;
        IbcastToChildren(f->b, &r);
        MPI_Waitall(static_cast<int>(r.size()), r.data(), MPI_STATUSES_IGNORE);
      }
    } else if (g.binary_ctrl) {
      BinaryTreeBcast(f->b, g.inline_bytes, ctrl_);
    } else if (!g.p2p) {
      Bcast(f->b, g.inline_bytes, ctrl_);
    } else {  // TVM model: the frame goes to each worker's channel in turn
      for (int w = 1; w < size_; ++w) MPI_Send(f->b, g.inline_bytes, MPI_BYTE, w, kTagFrame, ctrl_);
    }
    next_nonblocking_ = (f->flags() & kFlagNextFrameNonblocking) != 0;
  }
  void RecvFrame(Frame* f) {  // workers
    if (g.binary_ctrl) {
      BinaryTreeBcast(f->b, g.inline_bytes, ctrl_);
    } else if (!g.p2p) {
      Bcast(f->b, g.inline_bytes, ctrl_);
    } else {
      MPI_Recv(f->b, g.inline_bytes, MPI_BYTE, 0, kTagFrame, ctrl_, MPI_STATUS_IGNORE);
    }
  }

  // ---- collectives --------------------------------------------------------------------------
  // MPI_Bcast from rank 0. Open MPI 4.1 for a 256-byte frame: "pipeline" (a chain, one segment)
  // below 4 ranks, else k-nomial radix 4 (coll_tuned_bcast_knomial_radix).
  void Bcast(void* buf, int n, MPI_Comm comm) {
    if (!g.explicit_coll) {
      MPI_Bcast(buf, n, MPI_BYTE, 0, comm);
      return;
    }
    if (size_ == 1) return;
    if (size_ < 4) {
      if (rank_ > 0) MPI_Recv(buf, n, MPI_BYTE, rank_ - 1, kBcastTag, comm, MPI_STATUS_IGNORE);
      if (rank_ + 1 < size_) MPI_Send(buf, n, MPI_BYTE, rank_ + 1, kBcastTag, comm);
      return;
    }
    const int radix = 4;
    int mask = 1;
    while (mask < size_) {  // receive from the parent
      if (rank_ % (radix * mask)) {
        int parent = rank_ / (radix * mask) * (radix * mask);
        MPI_Request r;
        MPI_Irecv(buf, n, MPI_BYTE, parent, kBcastTag, comm, &r);
        WaitAll(1, &r);
        break;
      }
      mask *= radix;
    }
    mask /= radix;
    MPI_Request reqs[96];
    int nreq = 0;
    while (mask > 0) {  // send to the children, farthest subtree first
      for (int r = 1; r < radix; ++r) {
        int child = rank_ + mask * r;
        if (child < size_) MPI_Isend(buf, n, MPI_BYTE, child, kBcastTag, comm, &reqs[nreq++]);
      }
      mask /= radix;
    }
    WaitAll(nreq, reqs);
  }

  // Recursive doubling (power-of-two P): log2(P) exchanges of the whole vector.
  void RecursiveDoubling(float* recv, int64_t n, float* tmp, MPI_Comm comm) {
    for (int mask = 1; mask < size_; mask <<= 1) {
      int peer = rank_ ^ mask;
      SendRecv(recv, static_cast<int>(n * 4), peer, tmp, static_cast<int>(n * 4), peer,
               kAllreduceTag, comm);
      ReduceF32(recv, recv, tmp, n);
    }
  }

  // MPI_Allreduce below the ring's sizes. Open MPI 4.1 (4 KiB): "ring" below 4 ranks, recursive
  // doubling at 8..2047; from 2048 "segmented ring" falls back to ring and then, count < P, to
  // recursive doubling. `send == recv`: in place (MPI_IN_PLACE: no copy of send into recv first).
  void SmallAllReduce(const float* send, float* recv, int64_t n, float* tmp, MPI_Comm comm) {
    const bool in_place = send == recv;
    if (g.explicit_coll && (size_ & (size_ - 1)) == 0 && n >= size_) {
      if (size_ < 4) {
        RingAllReduce(send, recv, n, comm);  // one segment per chunk: Open MPI's ring
      } else {
        if (!in_place) CopyBytes(recv, send, n * 4);
        RecursiveDoubling(recv, n, tmp, comm);
      }
      return;
    }
    MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  comm);
  }

  // The agreement round (Communicator::HostMax): MPI_Allreduce(MPI_IN_PLACE, n x int64, MAX).
  // Open MPI 4.1 for 56 bytes: recursive doubling below 512 ranks, from 512 "nonoverlapping" =
  // MPI_Reduce (binomial) + MPI_Bcast (k-nomial).
  void HostMax(int64_t* v, int n) {
    if (g.explicit_coll && (size_ & (size_ - 1)) == 0) {
      if (size_ < 512) {
        int64_t in[8];
        for (int mask = 1; mask < size_; mask <<= 1) {
          int peer = rank_ ^ mask;
          SendRecv(v, n * 8, peer, in, n * 8, peer, kAllreduceTag, ccl_);
          for (int i = 0; i < n; ++i) v[i] = std::max(v[i], in[i]);
        }
      } else {
        int64_t out[8];
        MPI_Reduce(v, out, n, MPI_INT64_T, MPI_MAX, 0, ccl_);
        if (rank_ == 0) std::memcpy(v, out, n * 8);
        Bcast(v, n * 8, ccl_);
      }
      return;
    }
    MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, ccl_);
  }

  void Ensure(int64_t b) {
    if (bytes_ == b) return;
    if (send_) BigFree(send_), BigFree(recv_);
    if (tmp_) BigFree(tmp_);
    bytes_ = b;
    send_ = static_cast<float*>(BigAlloc(b));
    recv_ = static_cast<float*>(BigAlloc(b));
    tmp_ = nullptr;
  }
  float* Tmp() {
    if (tmp_ == nullptr) tmp_ = static_cast<float*>(BigAlloc(bytes_));
    return tmp_;
  }

  // ---- disco's ring (src/ccl/mpi/communicator.cc) --------------------------------------------
  int Mod(int x) const { return ((x % size_) + size_) % size_; }
  int64_t ChunkCount(int64_t n, int c) const { return n / size_ + (c < n % size_ ? 1 : 0); }
  int64_t ChunkOffset(int64_t n, int c) const {
    return static_cast<int64_t>(c) * (n / size_) + std::min<int64_t>(c, n % size_);
  }
  void ExchangeAndReduce(const float* out, int64_t out_count, int64_t in_count, const float* mine,
                         float* dst, int right, int left, MPI_Comm comm) {
    const int64_t seg = kSegmentBytes / 4;
    const int64_t nseg = (in_count + seg - 1) / seg;
    const int64_t nout = (out_count + seg - 1) / seg;
    if (slots_ == nullptr) slots_ = static_cast<float*>(BigAlloc(kWindow * seg * 4));
    requests_.assign(kWindow + nout, MPI_REQUEST_NULL);
    auto post = [&](int64_t k) {
      int64_t c = std::min(seg, in_count - k * seg);
      MPI_Irecv(slots_ + (k % kWindow) * seg, static_cast<int>(c * 4), MPI_BYTE, left, kRingTag,
                comm, &requests_[k % kWindow]);
    };
    for (int64_t k = 0; k < std::min<int64_t>(kWindow, nseg); ++k) post(k);
    for (int64_t k = 0; k < nout; ++k) {
      int64_t c = std::min(seg, out_count - k * seg);
      MPI_Isend(out + k * seg, static_cast<int>(c * 4), MPI_BYTE, right, kRingTag, comm,
                &requests_[kWindow + k]);
    }
    for (int64_t k = 0; k < nseg; ++k) {
      WaitAll(1, &requests_[k % kWindow]);
      int64_t c = std::min(seg, in_count - k * seg);
      ReduceF32(dst + k * seg, mine + k * seg, slots_ + (k % kWindow) * seg, c);
      if (k + kWindow < nseg) post(k + kWindow);
    }
    WaitAll(static_cast<int>(nout), requests_.data() + kWindow);
  }
  void RingAllReduce(const float* send, float* recv, int64_t n, MPI_Comm comm) {
    const int right = Mod(rank_ + 1), left = Mod(rank_ - 1);
    const int steps = size_ - 1;
    const int run = g.ring_cap > 0 ? std::min<int64_t>(steps, g.ring_cap) : steps;
    double t0 = Now();
    const float* outgoing = nullptr;
    int64_t out_count = 0;
    for (int s = 0; s < run; ++s) {
      int send_chunk = Mod(rank_ - s - 1), recv_chunk = Mod(rank_ - s - 2);
      if (s == 0) {
        outgoing = send + ChunkOffset(n, send_chunk);
        out_count = ChunkCount(n, send_chunk);
      }
      int64_t in_count = ChunkCount(n, recv_chunk);
      const float* mine = send + ChunkOffset(n, recv_chunk);
      float* dst = recv + ChunkOffset(n, recv_chunk);
      ExchangeAndReduce(outgoing, out_count, in_count, mine, dst, right, left, comm);
      outgoing = dst;
      out_count = in_count;
    }
    double t1 = Now();
    for (int s = 0; s < run; ++s) {
      int send_chunk = Mod(rank_ - s), recv_chunk = Mod(rank_ - s - 1);
      SendRecv(recv + ChunkOffset(n, send_chunk), static_cast<int>(ChunkCount(n, send_chunk) * 4),
               right, recv + ChunkOffset(n, recv_chunk),
               static_cast<int>(ChunkCount(n, recv_chunk) * 4), left, kRingTag, comm);
    }
    double t2 = Now();
    ring_measured_ = t2 - t0;
    ring_time_ = run == steps ? t2 - t0 : ((t1 - t0) + (t2 - t1)) * steps / run;
  }

  // Open MPI 4.1's large allreduce (coll/tuned "rabenseifner",
  // ompi_coll_base_allreduce_intra_redscat_allgather): copy send into recv, reduce-scatter by
  // recursive halving, allgather by recursive doubling. Power-of-two P; others call the library.
  void RabenseifnerAllReduce(const float* send, float* recv, int64_t n, float* tmp) {
    const int p = size_;
    if (!g.explicit_coll || (p & (p - 1)) != 0 || n < p) {
      MPI_Allreduce(send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM, ccl_);
      return;
    }
    CopyBytes(recv, send, n * 4);
    int nsteps = 0;
    while ((1 << nsteps) < p) ++nsteps;
    std::vector<int64_t> rindex(nsteps), sindex(nsteps), rcount(nsteps), scount(nsteps);
    int64_t wsize = n;
    int step = 0;
    sindex[0] = rindex[0] = 0;
    for (int mask = 1; mask < p; mask <<= 1) {
      int dest = rank_ ^ mask;
      if (rank_ < dest) {
        rcount[step] = wsize / 2;
        scount[step] = wsize - rcount[step];
        sindex[step] = rindex[step] + rcount[step];
      } else {
        scount[step] = wsize / 2;
        rcount[step] = wsize - scount[step];
        rindex[step] = sindex[step] + scount[step];
      }
      SendRecv(recv + sindex[step], static_cast<int>(scount[step] * 4), dest, tmp + rindex[step],
               static_cast<int>(rcount[step] * 4), dest, 13, ccl_);
      ReduceF32(recv + rindex[step], tmp + rindex[step], recv + rindex[step], rcount[step]);
      if (step + 1 < nsteps) {
        rindex[step + 1] = rindex[step];
        sindex[step + 1] = rindex[step];
        wsize = rcount[step];
        ++step;
      }
    }
    step = nsteps - 1;
    for (int mask = p >> 1; mask > 0; mask >>= 1) {
      int dest = rank_ ^ mask;
      SendRecv(recv + rindex[step], static_cast<int>(rcount[step] * 4), dest, recv + sindex[step],
               static_cast<int>(scount[step] * 4), dest, 14, ccl_);
      --step;
    }
  }

  // The MPI backend's AllReduce: MPI's below the ring's sizes, else UseRing's choice.
  void BackendAllReduce(int64_t bytes, bool in_place = false) {
    const int64_t n = bytes / 4;
    if (size_ == 1) return;
    if (static_cast<size_t>(bytes) < kRingMinBytes) {
      SmallAllReduce(in_place ? recv_ : send_, recv_, n, Tmp(), ccl_);
    } else if (UseRing(static_cast<size_t>(bytes), size_)) {
      RingAllReduce(send_, recv_, n, ccl_);
    } else {
      RabenseifnerAllReduce(send_, recv_, n, Tmp());
    }
  }

  // A replay on any rank (Worker::ReplayGraph): its recorded calls in order; the CPU cost of a run
  // of fast-path calls is charged at once.
  void RunGraph(int64_t id) {
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
        const int64_t n = g.bytes / 4, dt = int64_t{2} << 24 | int64_t{32} << 16 | 1;
        int64_t all[7] = {0, n, -n, dt, -dt, 1, -1};
        HostMax(all, 7);
        agreed_.push_back(key);
      }
      BackendAllReduce(g.bytes, /*in_place=*/true);
    }
  }

  // disco.allreduce(send, "sum", false, recv): CheckAndAgree, then the backend's AllReduce.
  // `key` names the (registers, versions); `uniform`: the tensors came from disco.empty.
  void AllReduce(int64_t bytes, int64_t key, bool uniform) {
    Ensure(bytes);
    const int64_t n = bytes / 4;
    const bool skip = !g.before && uniform;
    if (!skip && std::find(agreed_.begin(), agreed_.end(), key) == agreed_.end()) {
      const int64_t dt = int64_t{2} << 24 | int64_t{32} << 16 | 1;
      int64_t all[7] = {0, n, -n, dt, -dt, 1, -1};
      HostMax(all, g.before ? 5 : 7);
      if (agreed_.size() >= 4096) agreed_.clear();
      agreed_.push_back(key);
    }
    BackendAllReduce(bytes);
  }

  static bool Collective(int64_t fn) { return fn == kAllReduce; }

  // A call's body on every rank (worker 0 included).
  void Run(const Frame& f) {
    const int64_t fn = f.arg(1);
    switch (fn) {
      case kNoop:
        break;
      case kMark:  // bench.mark_start
        if (!g.no_barrier) MPI_Barrier(bench_);
        break;
      case kRecord: {  // bench.noop_record(payload, i, t_issue)
        int64_t i = f.arg(2), bits = f.arg(3);
        double t_issue;
        std::memcpy(&t_issue, &bits, 8);
        if (static_cast<int64_t>(times_.size()) <= i) times_.resize(i + 1);
        times_[i] = Now() - t_issue;
        break;
      }
      case kCollect: {  // bench.collect(n): per-iteration max over ranks, median on rank 0
        times_.resize(f.arg(2));
        std::vector<double> maxed(times_.size());
        MPI_Reduce(times_.data(), maxed.data(), static_cast<int>(times_.size()), MPI_DOUBLE,
                   MPI_MAX, 0, bench_);
        result_ = rank_ == 0 ? Median(maxed) : 0;
        times_.clear();
        break;
      }
      case kRawPipe: {  // bench.raw_pipelined(bytes, iters)
        int64_t bytes = f.arg(2), iters = f.arg(3);
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
        break;
      }
      case kRawLat: {  // bench.raw_latency(bytes, iters, same_clock), plus the settle time
        int64_t bytes = f.arg(2), iters = f.arg(3);
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
        break;
      }
      case kRawSync:           // bench.raw_sync(bytes, target, iters)
      case kRawBcastReduce: {  // a frame's broadcast + a reduce of one u64: SyncAll's floor
        int64_t bytes = f.arg(2), target = f.arg(3), iters = f.arg(4);
        std::vector<uint8_t> p(bytes, 1);
        uint8_t reply[9] = {0};
        std::vector<double> t(iters);
        MPI_Barrier(bench_);
        for (int64_t i = 0; i < iters; ++i) {
          double t0 = Now();
          Bcast(p.data(), bytes, bench_);
          if (fn == kRawSync) {
            if (rank_ == target) MPI_Send(reply, 9, MPI_BYTE, 0, 7, bench_);
            if (rank_ == 0) MPI_Recv(reply, 9, MPI_BYTE, target, 7, bench_, MPI_STATUS_IGNORE);
          } else {
            uint64_t mine = 0, sum = 0;
            MPI_Reduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, bench_);
          }
          t[i] = Now() - t0;
        }
        MPI_Barrier(bench_);
        result_ = Median(t);
        break;
      }
      case kPingPong: {
        int64_t iters = f.arg(2);
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
        break;
      }
      case kAllReduce:  // arg 2 = bytes, arg 3 = the key (registers, versions), arg 4 = uniform
        AllReduce(f.arg(2), f.arg(3), f.arg(4) != 0);
        break;
      case kArRaw: {  // bench.ccl_raw: raw allreduces back to back on every rank; per call, the
                      // slope between K/2 and K calls (max over ranks), free of the start skew
        int64_t bytes = f.arg(2), iters = f.arg(3);
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
        break;
      }
      case kGraphRawAllReduces: {  // bench.graph.raw_allreduces(bytes, iters): 10 warm-ups, then
                                   // iters x 2 MPI_Allreduces between barriers, on its own
                                   // communicator; worker 0's time per iteration
        int64_t bytes = f.arg(2), iters = f.arg(3), n = bytes / 4;
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
        break;
      }
      case kAgree: {  // one agreement round alone: from rank 0's entry to the last rank's exit
        int64_t iters = f.arg(2);
        std::vector<double> entry(iters), leave(iters);
        if (!g.no_barrier) MPI_Barrier(ccl_);
        for (int64_t i = 0; i < iters; ++i) {
          if (g.no_barrier && rank_ == 0) Cost(g.settle_us);
          int64_t all[7] = {0, 1024, -1024, 7, -7, 1, -1};
          entry[i] = Now();
          HostMax(all, 7);
          leave[i] = Now();
        }
        std::vector<double> last(iters);
        MPI_Reduce(leave.data(), last.data(), iters, MPI_DOUBLE, MPI_MAX, 0, bench_);
        for (int64_t i = 0; i < iters; ++i) last[i] -= entry[i];
        result_ = rank_ == 0 ? Median(last) : 0;
        break;
      }
    }
  }

  // ---- controller (src/session/session.cc) ---------------------------------------------------
  uint64_t Broadcast(uint8_t action, const std::vector<int64_t>& args, uint16_t flags = 0,
                     uint32_t payload = 0) {
    const size_t total = 24 + (payload ? payload : 8 + 9 * args.size());
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
  int64_t Install(int64_t kind, int64_t calls) {
    auto it = graph_of_.find(kind << 32 | calls);
    if (it != graph_of_.end()) return it->second;
    const int64_t id = next_graph_++;
    Broadcast(kInstallGraph, {id, kind, calls}, 0, InstallPayloadBytes(kind, calls));
    FlushWorker0();
    graphs_[id] = GraphProgram(kind, calls);
    graph_of_[kind << 32 | calls] = id;
    return id;
  }
  // Graph::Replay (SessionImpl::ReplayGraph): one inline frame [graph id] by the ordinary
  // broadcast, then worker 0 runs the program at once.
  void Replay(int64_t id) {
    Broadcast(kReplayGraph, {id});
    FlushWorker0();
    RunGraph(id);
  }
  // bench_graph.cc TimeReplays: k/10 + 1 replays, SyncAll, then k replays and SyncWorker(P-1);
  // microseconds per replay.
  double TimeReplays(int64_t id, int64_t k) {
    for (int64_t i = 0; i < k / 10 + 1; ++i) Replay(id);
    SyncAll();
    double t0 = Now();
    for (int64_t i = 0; i < k; ++i) Replay(id);
    SyncWorker(size_ - 1);
    return (Now() - t0) / k;
  }
  // bench_graph.cc TimeCalls (= disco-bench call's pipelined figure): k/10 no-op calls, SyncAll,
  // then k calls and SyncWorker(P-1); microseconds per call.
  double TimeCalls(int64_t k) {
    for (int64_t i = 0; i < k / 10; ++i) Call({Reg(), kNoop});
    SyncAll();
    double t0 = Now();
    for (int64_t i = 0; i < k; ++i) Call({Reg(), kNoop});
    SyncWorker(size_ - 1);
    return (Now() - t0) / k;
  }
  // `time(k)` for K/2 and K: the slope per unit (free of the final sync) and time(K) itself.
  template <typename F>
  void Slope(F time, double* slope, double* at_k) {
    const int64_t K = g.iters, k1 = std::max<int64_t>(1, K / 2);
    const double t1 = time(k1);
    *at_k = K == k1 ? t1 : time(K);
    *slope = K == k1 ? *at_k : (*at_k * K - t1 * k1) / (K - k1);
  }
  void FlushWorker0() {
    if (deferred_) {
      deferred_ = false;
      Run(deferred_frame_);
    }
  }
  void Call(const std::vector<int64_t>& args) {  // args[0] = result register, args[1] = function
    const bool collective = Collective(args[1]);
    Broadcast(kCallPacked, args, collective && prepost_ ? kFlagNextFrameNonblocking : 0);
    FlushWorker0();  // the previous call, now that this frame is on its way
    if (collective) {
      deferred_ = true;
      deferred_frame_ = frame_;
    } else {
      Run(frame_);
    }
  }
  void DrainErrors() {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kTagError, ctrl_, &flag, &st);
  }
  void SyncWorker(int w) {
    FlushWorker0();
    if (w != 0) {
      Broadcast(kSyncWorker, {w});
      uint8_t reply[64];
      MPI_Recv(reply, 64, MPI_BYTE, w, kTagReply, ctrl_, MPI_STATUS_IGNORE);  // ReceiveSmall
    }
    DrainErrors();
  }
  void SyncAll() {
    FlushWorker0();
    if (size_ == 1) return;
    Broadcast(kSyncWorker, {-1});
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
  void Shutdown() {
    FlushWorker0();
    Broadcast(kShutdown, {0});
    if (size_ > 1) {
      uint64_t mine = 0, total = 0;
      MPI_Reduce(&mine, &total, 1, MPI_UINT64_T, MPI_SUM, 0, ctrl_);
      int64_t code = 0;
      MPI_Bcast(&code, 1, MPI_INT64_T, 0, ctrl_);
    }
  }
  int64_t Reg() { return ++reg_; }

  void Result(const std::string& mode, double us, const std::string& extra = "") {
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

  void RunMode(const std::string& mode) {
    const int last = size_ - 1;
    const int64_t K = g.iters;
    if (mode == "call_pipe") {
      double per_call = 0, t[2] = {0, 0};
      const int64_t ks[2] = {std::max<int64_t>(1, K / 2), K};
      for (int round = 0; round < 2; ++round) {
        for (int64_t i = 0; i < ks[round] / 10; ++i) Call({Reg(), kNoop});
        SyncAll();
        double t0 = Now();
        for (int64_t i = 0; i < ks[round]; ++i) Call({Reg(), kNoop});
        SyncWorker(last);
        t[round] = Now() - t0;
        per_call = t[round] / ks[round];
      }
      char extra[96];
      std::snprintf(extra, sizeof extra, " per_call_incl_sync_us=%.4f", per_call);
      Result(mode, (t[1] - t[0]) / (ks[1] - ks[0]), extra);
    } else if (mode == "call_lat") {
      for (int64_t i = 0; i < K; ++i) {
        Call({Reg(), kMark});
        Cost(g.settle_us);
        double t_issue = Now();
        Call({Reg(), kRecord, i, DoubleBits(t_issue)});
      }
      Call({Reg(), kCollect, K});
      Result(mode, result_);
    } else if (mode == "sync_worker" || mode == "sync_all") {
      std::vector<double> t;
      for (int64_t i = 0; i < K + 2; ++i) {
        double t0 = Now();
        if (mode == "sync_worker") {
          SyncWorker(last);
        } else {
          SyncAll();
        }
        if (i >= 2) t.push_back(Now() - t0);
      }
      Result(mode, Median(t));
    } else if (mode == "raw_pipe") {
      const int64_t k1 = std::max<int64_t>(1, K / 2);
      Call({Reg(), kRawPipe, g.inline_bytes, k1});
      double t1 = result_ * k1;
      Call({Reg(), kRawPipe, g.inline_bytes, K});
      char extra[96];
      std::snprintf(extra, sizeof extra, " per_call_incl_barrier_us=%.4f", result_);
      Result(mode, (result_ * K - t1) / (K - k1), extra);
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
      // disco-bench ccl: warm-up calls, SyncAll, K calls then SyncAll, per call. Two rounds (K/2
      // and K calls): the slope is the per-call cost without the final SyncAll.
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
      const double per_call =
          k1 > 0 ? (t[1] + ring_fix[1] - t[0] - ring_fix[0]) / (K - k1) : with_sync;
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
      // disco-bench graph: replays of a captured graph, pipelined. value = per replay (the slope
      // between K/2 and K replays); per_replay_incl_sync = bench_graph.cc's TimeReplays(K).
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
    } else if (mode == "graph_ar_raw") {
      // disco-bench graph's baseline for the step graph: bench.graph.raw_allreduces(bytes, K) (two
      // raw MPI_Allreduces per iteration, worker 0's time) plus one pipelined no-op call.
      // value = the raw pair's steady state (raw_2_allreduces_slope: the second half of the
      // iterations, no barrier) + the slope per call between K/2 and K calls;
      // raw_2_allreduces = the function's own figure (its last barrier shared by the K
      // iterations), call_incl_sync = TimeCalls(K): what disco-bench graph prints.
      Call({Reg(), kGraphRawAllReduces, g.bytes, K});
      const double raw = result_, raw_slope = raw_slope_;
      double slope = 0, at_k = 0;
      Slope([&](int64_t k) { return TimeCalls(k); }, &slope, &at_k);
      char extra[240];
      std::snprintf(extra, sizeof extra,
                    " raw_2_allreduces_us=%.4f raw_2_allreduces_slope_us=%.4f call_us=%.4f"
                    " call_incl_sync_us=%.4f baseline_incl_sync_us=%.4f",
                    raw, raw_slope, slope, at_k, raw + at_k);
      Result(mode, raw_slope + slope, extra);
    } else {
      std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    }
  }
};

#ifndef SKEL_SIM
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

int main(int argc, char** argv) {
  std::string modes = "call_pipe";
  bool rates = false;
  std::string overheads;
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
      overheads = next();
    else if (a == "--rates")
      rates = true;
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "skeleton: unknown option %s\n", a.c_str());
      return 2;
    } else {
      modes = a;
    }
  }
#ifndef SKEL_SIM
  if (rates) {
    MeasureRates();
    return 0;
  }
#else
  (void)rates;
#endif
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
#ifdef SKEL_SIM
  if (!overheads.empty()) {
    static double o[4] = {0, 0, 0, 0};  // the same on every rank
    std::sscanf(overheads.c_str(), "%lf,%lf,%lf,%lf", &o[0], &o[1], &o[2], &o[3]);
    if (world_rank == 0) {
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
  }
#else
  (void)overheads;
#endif
  {
    Rank* r = new Rank();
    if (r->rank() != 0) {
      r->RunWorkerLoop();
    } else {
      r->RunModes(modes);
    }
    delete r;
  }
  MPI_Finalize();
  return 0;
}
