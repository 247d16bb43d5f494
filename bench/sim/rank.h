// rank.h: one simulated (or real) rank of the skeleton: every piece of state lives here, none in
// globals. SMPI runs every rank in one process; the skeleton is not privatized, so per-rank state
// must not be global (Params is read-only and the same everywhere).
#ifndef DISCO_BENCH_SIM_RANK_H_
#define DISCO_BENCH_SIM_RANK_H_

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "skeleton.h"

namespace skel {

class Rank {
 public:
  // The communicators as disco makes them: MpiTransport's, disco-bench's, InitCCL's (worker.cc).
  Rank();
  ~Rank();
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;
  int rank() const { return rank_; }

  // The worker loop on ranks 1..P-1 (src/session/worker.cc RunWorkerLoop), in worker.cc.
  void RunWorkerLoop();
  // The controller on rank 0: the comma-separated modes in turn, then shutdown (modes.cc).
  void RunModes(const std::string& modes);

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

  // ---- collectives.cc: the frame's broadcasts and MPI's collectives, spelled out ---------------
  int IbcastParent() const;
  std::vector<int> IbcastChildren() const;
  void PostFrame();
  void IbcastToChildren(const void* frame, std::vector<MPI_Request>* reqs);
  void ForwardFrame();
  void WaitPostedFrame();
  void WaitAll(int n, MPI_Request* reqs);
  void SendRecv(const void* out, int out_bytes, int to, void* in, int in_bytes, int from, int tag,
                MPI_Comm comm);
  void BinaryTreeBcast(void* buf, int n, MPI_Comm comm);
  void SendFrame(Frame* f);
  void RecvFrame(Frame* f);
  void Bcast(void* buf, int n, MPI_Comm comm);
  void RecursiveDoubling(float* recv, int64_t n, float* tmp, MPI_Comm comm);
  void SmallAllReduce(const float* send, float* recv, int64_t n, float* tmp, MPI_Comm comm);
  void HostMax(int64_t* v, int n);
  void Ensure(int64_t b);
  float* Tmp();
  int Mod(int x) const { return ((x % size_) + size_) % size_; }
  int64_t ChunkCount(int64_t n, int c) const { return n / size_ + (c < n % size_ ? 1 : 0); }
  int64_t ChunkOffset(int64_t n, int c) const {
    return static_cast<int64_t>(c) * (n / size_) + std::min<int64_t>(c, n % size_);
  }
  void ExchangeAndReduce(const float* out, int64_t out_count, int64_t in_count, const float* mine,
                         float* dst, int right, int left, MPI_Comm comm);
  void RingAllReduce(const float* send, float* recv, int64_t n, MPI_Comm comm);
  void RabenseifnerAllReduce(const float* send, float* recv, int64_t n, float* tmp);
  void BackendAllReduce(int64_t bytes, bool in_place = false);

  // ---- worker.cc: what a call or a replay runs, on every rank (worker 0 included) -------------
  void RunGraph(int64_t id);
  void AllReduce(int64_t bytes, int64_t key, bool uniform);
  void Run(const Frame& f);
  void Record(int64_t i, int64_t t_issue_bits);
  void Collect(int64_t n);
  void RawPipe(int64_t bytes, int64_t iters);
  void RawLat(int64_t bytes, int64_t iters);
  void RawSync(bool reply, int64_t bytes, int64_t target, int64_t iters);
  void PingPong(int64_t iters);
  void ArRaw(int64_t bytes, int64_t iters);
  void GraphRawAllReduces(int64_t bytes, int64_t iters);
  void Agree(int64_t iters);

  // ---- controller.cc: rank 0's session (src/session/session.cc) --------------------------------
  uint64_t Broadcast(Action action, const std::vector<int64_t>& args, uint16_t flags = 0,
                     uint32_t payload = 0);
  int64_t Install(int64_t kind, int64_t calls);
  void Replay(int64_t id);
  double TimeReplays(int64_t id, int64_t k);
  double TimeCalls(int64_t k);
  // `time(k)` for K/2 and K: the slope per unit (free of the final sync) and time(K) itself.
  template <typename F>
  void Slope(F time, double* slope, double* at_k) {
    const int64_t K = g.iters, k1 = std::max<int64_t>(1, K / 2);
    const double t1 = time(k1);
    *at_k = K == k1 ? t1 : time(K);
    *slope = K == k1 ? *at_k : (*at_k * K - t1 * k1) / (K - k1);
  }
  void FlushWorker0();
  void Call(const std::vector<int64_t>& args);
  void DrainErrors();
  void SyncWorker(int w);
  void SyncAll();
  void Shutdown();
  int64_t Reg() { return ++reg_; }

  // ---- modes.cc: the modes, each printing one RESULT line -------------------------------------
  void Result(const std::string& mode, double us, const std::string& extra = "");
  void RunMode(const std::string& mode);
  void CallPipe(const std::string& mode);
  void CallLat(const std::string& mode);
  void Syncs(const std::string& mode);
  void RawPipeMode(const std::string& mode);
  void ArSession(const std::string& mode);
  void GraphReplays(const std::string& mode);
  void GraphArRaw(const std::string& mode);
};

}  // namespace skel

#endif  // DISCO_BENCH_SIM_RANK_H_
