// skeleton.h: disco's control plane and MPI collectives as a skeleton that makes exactly disco's
// MPI calls (same communicators, message sizes, tags and order) and injects the CPU costs of the
// real runtime. One program, two builds (bench/sim/README.md; common.sh builds it):
//
//   mpicxx  -O2 -I src -o skeleton-real bench/sim/*.cc            real MPI: calibration, --rates
//   smpicxx -O2 -I src -DSKEL_SIM -o skeleton-sim bench/sim/*.cc  SimGrid SMPI: 2 ... 4096 ranks
//
// Rank 0 is the controller and worker 0; ranks 1..P-1 run a worker loop on real frames (disco's
// header, padded to DISCO_INLINE_BYTES, with its sequence check). What it mirrors, file by file
// (keep it true to them: bench/sim/crosscheck.sh compares it with disco itself):
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
//   src/tools/bench_*.cc     the disco-bench methods the modes (modes.cc) reproduce
// --before gives the earlier design (SyncAll by MPI_Gather + a loop over P on rank 0, an
// agreement round for every new tensor, the ring for every size >= 256 KiB, no preposted frames).
//
// disco's constants come from its own headers (the few of src/ that include nothing else of
// disco), so the skeleton follows them; where it depends on a value beyond the code (a layout it
// spells out, figures bench/sim/README.md and crosscheck.sh give), a static_assert below makes a
// change there a compile error here.
//
// The files: skeleton.h (this: parameters, costs, disco's constants, frames, graphs), rank.h (one
// rank's state), collectives.cc (the MPI collectives, spelled out), controller.cc (rank 0's
// session), worker.cc (the worker loop and the functions calls run), modes.cc (the modes),
// main.cc (options, SMPI's overheads, --rates).
#ifndef DISCO_BENCH_SIM_SKELETON_H_
#define DISCO_BENCH_SIM_SKELETON_H_

#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef SKEL_SIM
#include <smpi/smpi.h>
#endif

#include "ccl/builtins.h"
#include "ccl/mpi/ring.h"
#include "protocol/frame_header.h"
#include "session/config.h"
#include "session/transport_tags.h"

namespace skel {

// ---- disco's constants ----------------------------------------------------------------------
namespace env_knob {
struct Knob {
  const char* name;
  const char* value;
};
// Every DISCO_* knob and its default (src/core/env_knobs.def, the table disco reads).
constexpr Knob kKnobs[] = {
#define X(name, value, help) {#name, value},
#include "core/env_knobs.def"
#undef X
};
constexpr bool Same(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}
// The default of knob `name`, as an integer (0 when it is not one).
constexpr int64_t IntDefault(const char* name) {
  for (size_t i = 0; i < sizeof kKnobs / sizeof kKnobs[0]; ++i) {
    if (!Same(kKnobs[i].name, name)) continue;
    int64_t v = 0;
    for (const char* c = kKnobs[i].value; *c != '\0'; ++c) {
      if (*c < '0' || *c > '9') return 0;
      v = v * 10 + (*c - '0');
    }
    return v;
  }
  return 0;
}
}  // namespace env_knob

using disco::protocol::Action;
using disco::protocol::FrameHeader;
using disco::protocol::kFlagNextFrameNonblocking;
using disco::protocol::kHeaderBytes;
constexpr int kTagReply = disco::kControlTagReply, kTagError = disco::kControlTagError;
constexpr int kTagFrame = 100;  // --transport p2p (the TVM model) only: not disco's
constexpr int kRingTag = disco::ccl::kRingTag;
constexpr size_t kRingMinBytes = disco::ccl::kRingMinBytes;
constexpr size_t kSegmentBytes = disco::ccl::kRingSegmentBytes;
constexpr int64_t kWindow = disco::ccl::kRingWindow;
constexpr int kPrepostMinRanks = disco::kPrepostMinRanks;
constexpr int kAgreementValues = disco::ccl::kAgreementValues;
constexpr size_t kMaxAgreedKeys = disco::ccl::kMaxAgreedKeys;
constexpr int kSyncAckBytes = static_cast<int>(disco::protocol::kSyncAckBytes);
constexpr int kDefaultInlineBytes = static_cast<int>(env_knob::IntDefault("DISCO_INLINE_BYTES"));

// What the skeleton's figures and its documentation assume of those constants: a change in disco
// fails here, for whoever changes it to look at what else follows.
static_assert(kDefaultInlineBytes == 256 && kHeaderBytes == 24,
              "bench/sim/README.md counts frames in a 256-byte inline frame with a 24-byte header "
              "(a replay frame: 41 of its 256 bytes); recount them");
static_assert(kRingMinBytes == 256 * 1024 && disco::ccl::kRingMinShareBytes == 64 * 1024,
              "crosscheck.sh's allreduces (4 KiB ... 1 MiB at 8 ranks) cover MPI's below the "
              "ring, MPI's above it with small shares and disco's ring: check they still do");
static_assert(kSyncAckBytes == 9, "the README and skeleton.h describe a 9-byte sync reply");

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
  int inline_bytes = kDefaultInlineBytes;
  int warmup = 2;
  // A replay (src/session/worker.cc ReplayGraph): per recorded call that is not a collective
  // (RunGraphCall, the fast path), and per recorded collective's ordinary call path (CallPacked,
  // the agreement's key lookup; its MPI excluded). Measured with disco-bench graph at 1 rank
  // (bench/sim/README.md, "Capture and replay").
  double graph_call_ns = 11;
  double graph_coll_us = 0.28;
};
extern Params g;  // main.cc

// Microseconds: simulated time under SMPI; CLOCK_MONOTONIC in the real build (disco's clock,
// src/mpi/clock.h).
inline double Now() {
#ifdef SKEL_SIM
  return MPI_Wtime() * 1e6;
#else
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
#endif
}

// CPU work the real runtime does and the skeleton does not: simulated, or spun for real.
inline void Cost(double us) {
  if (us <= 0) return;
#ifdef SKEL_SIM
  smpi_execute(us * 1e-6);
#else
  double t0 = Now();
  while (Now() - t0 < us) {
  }
#endif
}

inline void* BigAlloc(size_t n) {
#ifdef SKEL_SIM
  return SMPI_SHARED_MALLOC(n);  // one physical copy for all simulated ranks
#else
  void* p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  std::memset(p, 0, n);
  return p;
#endif
}
inline void BigFree(void* p) {
#ifdef SKEL_SIM
  SMPI_SHARED_FREE(p);
#else
  free(p);
#endif
}

// dst = a + b over n floats: computed for real, or charged at reduce_gbs under SMPI.
inline void ReduceF32(float* dst, const float* a, const float* b, int64_t n) {
#ifdef SKEL_SIM
  (void)dst, (void)a, (void)b;
  if (g.reduce_gbs > 0) Cost(n * 4.0 / (g.reduce_gbs * 1e3));
#else
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
#endif
}
inline void CopyBytes(void* dst, const void* src, size_t n) {
#ifdef SKEL_SIM
  (void)dst, (void)src;
  if (g.memcpy_gbs > 0) Cost(n / (g.memcpy_gbs * 1e3));
#else
  std::memcpy(dst, src, n);
#endif
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline int64_t DoubleBits(double d) {
  int64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// ---- frames (src/protocol/frame.h) --------------------------------------------------------------
// The functions a call frame names (its argument 1); the bench functions the modes call.
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
// Whether a call of `fn` is a collective (worker 0 defers it; its frame flags the next one).
inline bool Collective(int64_t fn) { return fn == kAllReduce; }
// The payload: u32 kill count, u32 argument count, then the arguments, each a one-byte TypeCode
// (disco/any.h: 2 = int) and an i64 (src/protocol/serializer.cc).
constexpr size_t kArgsAt = kHeaderBytes + 8;
constexpr uint8_t kIntTag = 2;
constexpr size_t kArgBytes = 1 + 8;
struct Frame {
  uint8_t b[512];  // >= DISCO_INLINE_BYTES
  uint64_t seq = 0;
  // header + u32 kill count + u32 argc + args (a one-byte tag and an i64 each). `payload`, when
  // given, is the payload length the header announces (an install frame: its operands beyond the
  // inline bytes follow in a second MPI_Bcast, whose content the skeleton does not need).
  void Encode(Action action, uint16_t flags, const std::vector<int64_t>& args,
              uint32_t payload = 0) {
    std::memset(b, 0, g.inline_bytes);
    uint32_t argc = args.size();
    FrameHeader h;
    h.action = static_cast<uint8_t>(action);
    h.flags = flags;
    h.seq = seq;
    h.payload_bytes = payload != 0 ? payload : 8 + kArgBytes * args.size();
    std::memcpy(b, &h, kHeaderBytes);
    std::memcpy(b + kHeaderBytes + 4, &argc, 4);  // after a kill count of 0
    for (size_t i = 0; i < args.size(); ++i) {
      b[kArgsAt + kArgBytes * i] = kIntTag;
      std::memcpy(b + kArgsAt + kArgBytes * i + 1, &args[i], 8);
    }
  }
  FrameHeader header() const {
    FrameHeader h;
    std::memcpy(&h, b, kHeaderBytes);
    return h;
  }
  Action action() const { return static_cast<Action>(header().action); }
  uint16_t flags() const { return header().flags; }
  uint64_t frame_seq() const { return header().seq; }
  size_t total_bytes() const { return kHeaderBytes + header().payload_bytes; }
  int64_t arg(int i) const {
    int64_t v;
    std::memcpy(&v, b + kArgsAt + kArgBytes * i + 1, 8);
    return v;
  }
};
static_assert(static_cast<size_t>(kDefaultInlineBytes) <= sizeof Frame::b,
              "a Frame holds the inline bytes");

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
inline std::vector<int64_t> GraphProgram(int64_t kind, int64_t n) {
  if (kind == kNoopGraph) return {n};
  return {8, kGraphAllReduce, 6, kGraphAllReduce};
}
// The install frame's payload (SessionImpl::Install; src/protocol/serializer.cc: an int or a DRef
// is a 1-byte tag and 8 bytes, a bool 2 bytes, a string a tag, a u64 length and its bytes): u32
// kill count, u32 operand count, then id, input count, R, the R registers the capture reserved,
// the step count S, and the S steps. A call step: kind, result register, function, flags, mask,
// argument count, then the arguments; a lookup step: kind, register, name.
inline uint32_t InstallPayloadBytes(int64_t kind, int64_t n) {
  const uint32_t word = kArgBytes, call = 6 * word;
  auto str = [](uint32_t len) { return 1 + 8 + len; };
  if (kind == kNoopGraph) return 8 + word * (3 + n + 1) + n * call;
  // 13 no-ops, the activation (one DRef argument), the lookup of "disco.allreduce" (its first use
  // is inside the capture) and 2 allreduces (a, "sum", false, a): 17 registers, 17 steps.
  const uint32_t steps =
      13 * call + (call + word) + (2 * word + str(15)) + 2 * (call + word + str(3) + 2 + word);
  return 8 + word * (3 + 17 + 1) + steps;
}

// The agreement round's values for tensors of `n` float32 on the host (CheckAndAgree: failed,
// count, -count, dtype, -dtype, location, -location).
inline void AgreementValues(int64_t n, int64_t dtype, int64_t out[kAgreementValues]) {
  const int64_t all[] = {0, n, -n, dtype, -dtype, 1, -1};
  static_assert(sizeof all / sizeof all[0] == kAgreementValues,
                "disco's agreement round (src/ccl/builtins.cc CheckAndAgree) changed: spell out "
                "its values here");
  std::memcpy(out, all, sizeof all);
}
// float32's code as the agreement carries it (kDLFloat = 2, 32 bits, 1 lane).
constexpr int64_t kFloat32Code = int64_t{2} << 24 | int64_t{32} << 16 | 1;

}  // namespace skel

#endif  // DISCO_BENCH_SIM_SKELETON_H_
