// disco-bench ccl: collectives through the session next to the raw collective on the same buffers
// in the same run, as nccl-tests prints them (size, count, type, op, time, algbw, busbw, #wrong).
//
// Session: K calls of Session::AllReduce (etc.) then SyncAll, timed on the controller, per call.
// Raw: a function on every rank runs K raw MPI collectives (MPI_Allreduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Bcast) on the same tensors over a communicator of its own; time is
// the maximum over ranks. Both warm up first. #wrong counts elements that differ from the exact
// expected value after each side's last call, summed over ranks. For allreduce, floor_us is the
// time of a plain memcpy of send into recv on every rank at once (the least memory traffic any
// out-of-place allreduce needs) and ratio_bound = raw_time / floor_us, the highest busbw_ratio any
// implementation could reach on this host.
#include <disco/ccl.h>
#include <mpi.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "ccl/reduce.h"
#include "mpi/mpi_util.h"
#include "tools/bench_common.h"

namespace disco {
namespace bench {
namespace {

mpi::Comm& RawComm() {
  static mpi::Comm* comm = new mpi::Comm(mpi::Comm::Dup(MPI_COMM_WORLD));
  return *comm;
}

// The collectives measured, with nccl-tests' bus-bandwidth factors.
struct Kind {
  const char* name;
  double (*busbw_factor)(int n);
};
const Kind kKinds[] = {
    {"allreduce", [](int n) { return 2.0 * (n - 1) / n; }},
    {"allgather", [](int n) { return (n - 1) / static_cast<double>(n); }},
    {"reduce_scatter", [](int n) { return (n - 1) / static_cast<double>(n); }},
    {"broadcast", [](int n) { return 1.0; }},
};

// send[i] = rank + 1 + (i % 3) in float32: small integers, exact sums.
DISCO_REGISTER_GLOBAL("bench.ccl_fill").set_body_typed([](Tensor t) {
  float base = static_cast<float>(ThisWorker().worker_id + 1);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = base + static_cast<float>(i % 3);
});

// Elements of `recv` that differ from the exact result of `kind`, summed over ranks (rank 0).
DISCO_REGISTER_GLOBAL("bench.ccl_wrong").set_body_typed([](std::string kind, Tensor recv) {
  const WorkerInfo& w = ThisWorker();
  int n = w.num_workers;
  const float* p = recv.data_as<float>();
  int64_t wrong = 0;
  int64_t m = recv.numel();
  for (int64_t i = 0; i < m; ++i) {
    float want;
    if (kind == "allreduce") {
      want = static_cast<float>(n * (n + 1) / 2 + n * (i % 3));
    } else if (kind == "allgather") {
      int64_t block = m / n;
      want = static_cast<float>(i / block + 1 + (i % block) % 3);
    } else if (kind == "reduce_scatter") {
      int64_t gi = w.worker_id * m + i;
      want = static_cast<float>(n * (n + 1) / 2 + n * (gi % 3));
    } else {
      want = static_cast<float>(1 + i % 3);
    }
    wrong += p[i] != want;
  }
  int64_t total = 0;
  DISCO_MPI_CALL(MPI_Reduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, 0, RawComm().get()));
  return total;
});

// Runs `iters` raw collectives of `kind` on send/recv; returns the max over ranks of the mean time
// per call in microseconds (rank 0's value is the answer).
DISCO_REGISTER_GLOBAL("bench.ccl_raw")
    .set_body_typed([](std::string kind, Tensor send, Tensor recv, int64_t iters, int64_t warmup) {
      MPI_Comm c = RawComm().get();
      int n = 0;
      MPI_Comm_size(c, &n);
      auto once = [&] {
        if (kind == "allreduce") {
          MPI_Allreduce(send.data(), recv.data(), static_cast<int>(send.numel()), MPI_FLOAT,
                        MPI_SUM, c);
        } else if (kind == "allgather") {
          MPI_Allgather(send.data(), static_cast<int>(send.numel()), MPI_FLOAT, recv.data(),
                        static_cast<int>(send.numel()), MPI_FLOAT, c);
        } else if (kind == "reduce_scatter") {
          MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(recv.numel()),
                                   MPI_FLOAT, MPI_SUM, c);
        } else {
          MPI_Bcast(recv.data(), static_cast<int>(recv.numel()), MPI_FLOAT, 0, c);
        }
      };
      for (int64_t i = 0; i < warmup; ++i) once();
      MPI_Barrier(c);
      double t0 = NowUs();
      for (int64_t i = 0; i < iters; ++i) once();
      double mine = (NowUs() - t0) / iters, worst = 0;
      MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, c);
      return worst;
    });

// The memory floor of an out-of-place allreduce: every rank at once reads its input and writes its
// output once (a memcpy of send into recv), max over ranks in microseconds per call. No allreduce
// algorithm moves less, so raw_time / floor bounds the busbw ratio any implementation can reach.
DISCO_REGISTER_GLOBAL("bench.ccl_copy_floor")
    .set_body_typed([](Tensor send, Tensor recv, int64_t iters) {
      MPI_Comm c = RawComm().get();
      std::memcpy(recv.data(), send.data(), recv.nbytes());
      MPI_Barrier(c);
      double t0 = NowUs();
      for (int64_t i = 0; i < iters; ++i) std::memcpy(recv.data(), send.data(), recv.nbytes());
      double mine = (NowUs() - t0) / iters, worst = 0;
      MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, c);
      return worst;
    });

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Memory shared by the ranks of one node (MPI_Win_allocate_shared), freed with the window:
// `areas` areas of `bytes`, each a flag line then the payload from byte `align` (128, or 4096 for
// payloads that start a page, as the channel's slots do: the hardware prefetchers stop at pages).
class SharedAreas {
 public:
  SharedAreas(MPI_Comm node, size_t bytes, int areas = 2, size_t align = 128)
      : align_(align), stride_((bytes + 2 * align - 1) / align * align) {
    int rank = 0;
    MPI_Comm_rank(node, &rank);
    const auto size = static_cast<MPI_Aint>(rank == 0 ? areas * stride_ + align : 0);
    void* mine = nullptr;
    DISCO_MPI_CALL(MPI_Win_allocate_shared(size, 1, MPI_INFO_NULL, node, &mine, &win_));
    MPI_Aint got = 0;
    int unit = 0;
    DISCO_MPI_CALL(MPI_Win_shared_query(win_, 0, &got, &unit, &base_));
  }
  ~SharedAreas() { MPI_Win_free(&win_); }
  SharedAreas(const SharedAreas&) = delete;
  SharedAreas& operator=(const SharedAreas&) = delete;
  // Area i's flag (its first 8 bytes) and payload (from byte `align`).
  std::atomic<uint64_t>* Flag(int i) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(At(i));
  }
  char* Payload(int i) const { return At(i) + align_; }

 private:
  char* At(int i) const {
    const auto addr = (reinterpret_cast<uintptr_t>(base_) + align_ - 1) / align_ * align_;
    return reinterpret_cast<char*>(addr) + static_cast<size_t>(i) * stride_;
  }
  size_t align_, stride_;
  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
};

// The node communicator of a 2-rank job whose ranks share a node; a null one otherwise.
mpi::Comm PairOnOneNode() {
  MPI_Comm c = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split_type(RawComm().get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &c));
  mpi::Comm node(c);
  return node.size() == 2 && RawComm().size() == 2 ? std::move(node) : mpi::Comm();
}

// Spins until `flag` reaches `step`, a few microseconds (an exchange takes well under one), then
// yields too: on a loaded node, or with both ranks on one core, the peer may need this core.
void AwaitStep(const std::atomic<uint64_t>* flag, uint64_t step) {
  for (int spins = 0; flag->load(std::memory_order_acquire) < step; ++spins) {
    if (spins < 256) {
      Pause();
    } else {
      sched_yield();
    }
  }
}

// Runs `step`(i) for i = 1.. (a tenth of `iters` to warm up, then `iters` timed) on both ranks of
// `node`: the mean microseconds per step on rank 0, on every rank.
template <typename Step>
double TimeSteps(const mpi::Comm& node, int64_t iters, Step step) {
  DISCO_MPI_CALL(MPI_Barrier(node.get()));
  const auto count = static_cast<uint64_t>(iters);
  for (uint64_t i = 1; i <= count / 10; ++i) step(i);
  const double t0 = NowUs();
  for (uint64_t i = 1 + count / 10; i <= count / 10 + count; ++i) step(i);
  double took = (NowUs() - t0) / static_cast<double>(count);
  DISCO_MPI_CALL(MPI_Barrier(node.get()));
  DISCO_MPI_CALL(MPI_Bcast(&took, 1, MPI_DOUBLE, 0, RawComm().get()));
  return took;
}

// A ping-pong between the two ranks of a 2-rank job on one node: rank 0 writes `bytes` of payload
// (none: a bare cache line) and stores i in its flag; rank 1 spins until it sees i, reads the
// payload, writes its own and stores i in its flag; rank 0 waits for that and reads. The mean
// round trip in microseconds on rank 0 (-1 on a job of other than 2 ranks or across nodes): the
// least an exchange between the two cores costs, which a 2-rank allreduce is measured against.
DISCO_REGISTER_GLOBAL("bench.ccl_pingpong").set_body_typed([](int64_t iters, int64_t bytes) {
  const mpi::Comm node = PairOnOneNode();
  if (node.get() == MPI_COMM_NULL) return -1.0;
  const auto n = static_cast<size_t>(bytes);
  SharedAreas areas(node.get(), n);
  const int me = node.rank();
  areas.Flag(me)->store(0, std::memory_order_relaxed);
  std::vector<char> out(n, static_cast<char>(me + 1)), in(n);
  auto send = [&](uint64_t i) {
    std::memcpy(areas.Payload(me), out.data(), n);
    areas.Flag(me)->store(i, std::memory_order_release);
  };
  auto receive = [&](uint64_t i) {
    AwaitStep(areas.Flag(1 - me), i);
    std::memcpy(in.data(), areas.Payload(1 - me), n);
  };
  return TimeSteps(node, iters, [&](uint64_t i) {
    if (me == 0) send(i), receive(i);
    if (me == 1) receive(i), send(i);
  });
});

// A 2-rank allreduce of `bytes` of float32 on these two cores without the runtime: both ranks at
// once write their data into shared memory, publish a step number, wait for the other's, and sum
// the two in rank order (a prefetch of each of the other's lines first; the channel's own sum
// kernel), the steps of the session's channel (ccl/mpi/shm.h: two page-aligned areas per rank,
// alternate steps) and nothing else. Mean microseconds per exchange on rank 0 (-1 as
// bench.ccl_pingpong; -2 for a wrong sum).
DISCO_REGISTER_GLOBAL("bench.ccl_exchange").set_body_typed([](int64_t iters, int64_t bytes) {
  const mpi::Comm node = PairOnOneNode();
  if (node.get() == MPI_COMM_NULL) return -1.0;
  const auto n = static_cast<size_t>(bytes) / 4;
  SharedAreas areas(node.get(), n * 4, 4, 4096);  // rank r: areas 2r (its flag) and 2r + 1
  const int me = node.rank();
  areas.Flag(2 * me)->store(0, std::memory_order_relaxed);
  std::vector<float> mine(n, static_cast<float>(me + 1)), out(n);
  const double took = TimeSteps(node, iters, [&](uint64_t i) {
    auto slot = [&](int r) { return reinterpret_cast<float*>(areas.Payload(2 * r + i % 2)); };
    std::memcpy(slot(me), mine.data(), n * 4);
    areas.Flag(2 * me)->store(i, std::memory_order_release);
    AwaitStep(areas.Flag(2 * (1 - me)), i);
    const auto* peer = reinterpret_cast<const char*>(slot(1 - me));
    for (size_t b = 0; b < n * 4; b += 64) __builtin_prefetch(peer + b);
    ccl::Reduce(out.data(), slot(0), slot(1), static_cast<int64_t>(n), DataType("float32"),
                ReduceOp::kSum);  // the channel's own sum
  });
  const bool right = std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; });
  return right ? took : -2.0;
});

// `iters` allreduces of `t` by AllReduceInFunction, as a decode step's layers call it (no frame
// per call): the max over ranks of the mean time per call in microseconds.
DISCO_REGISTER_GLOBAL("bench.ccl_in_function").set_body_typed([](Tensor t, int64_t iters) {
  MPI_Comm c = RawComm().get();
  for (int64_t i = 0; i < std::max<int64_t>(2, iters / 10); ++i) {
    AllReduceInFunction(t, ReduceOp::kSum);
  }
  DISCO_MPI_CALL(MPI_Barrier(c));
  const double t0 = NowUs();
  for (int64_t i = 0; i < iters; ++i) AllReduceInFunction(t, ReduceOp::kSum);
  double mine = (NowUs() - t0) / static_cast<double>(iters), worst = 0;
  DISCO_MPI_CALL(MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, c));
  return worst;
});

// How fast this host faults in fresh pages (GB/s, median of 3 x 64 MiB): what decides how much a
// full-size temporary per call (Open MPI's own allreduce under glibc's default malloc) costs.
double FaultInGBps() {
  const size_t n = size_t{64} << 20;
  std::vector<double> rates;
  for (int r = 0; r < 3; ++r) {
    double t0 = NowUs();
    void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    auto* p = static_cast<volatile char*>(m);
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    rates.push_back(n / (NowUs() - t0) / 1e3);
    munmap(m, n);
  }
  return Median(rates);
}

DRef SessionCall(Session& s, const std::string& kind, const DRef& send, const DRef& recv) {
  if (kind == "allreduce") return s.AllReduce(send, "sum", false, recv);
  if (kind == "allgather") return s.AllGather(send, false, recv);
  if (kind == "reduce_scatter") return s.ReduceScatter(send, "sum", false, recv);
  return s.Broadcast(send, false, recv);
}

// At 2 ranks on one node: a 4 KiB allreduce inside a function (as a decode step's) against a bare
// cache-line ping-pong round trip between the two ranks, one carrying 4 KiB each way, and the
// channel's steps alone (bench.ccl_exchange: what moving 4 KiB both ways at once costs here),
// medians of `repeats` interleaved, in one line.
std::string SmallAllReduceLine(Session& s, int repeats) {
  const int64_t iters = 20000, bytes = 4096;
  DRef t = s.Empty(Shape{bytes / 4}, DataType("float32"));
  s.CallPacked(s.GetGlobalFunc("bench.ccl_fill"), t);
  DRef pingpong = s.GetGlobalFunc("bench.ccl_pingpong");
  DRef exchange = s.GetGlobalFunc("bench.ccl_exchange");
  DRef in_function = s.GetGlobalFunc("bench.ccl_in_function");
  std::vector<double> line, data, both, ar;
  for (int r = 0; r < repeats; ++r) {
    line.push_back(s.CallPacked(pingpong, iters, int64_t{0}).DebugGetFromRemote(0).cast<double>());
    data.push_back(s.CallPacked(pingpong, iters, bytes).DebugGetFromRemote(0).cast<double>());
    both.push_back(s.CallPacked(exchange, iters, bytes).DebugGetFromRemote(0).cast<double>());
    ar.push_back(s.CallPacked(in_function, t, iters).DebugGetFromRemote(0).cast<double>());
  }
  if (Median(line) < 0) return "small_allreduce: the ranks are not on one node: no ping-pong";
  DISCO_CHECK(*std::min_element(both.begin(), both.end()) > 0, RuntimeError)
      << "bench.ccl_exchange summed wrong";
  const double a = Median(ar), l = Median(line), d = Median(data), e = Median(both);
  return "small_allreduce: 4096 B allreduce in a function " + Fmt(a, 3) +
         " us; ping-pong round trip of a cache line " + Fmt(l, 3) + " us (ratio " + Fmt(a / l, 2) +
         "), of 4096 B each way " + Fmt(d, 3) + " us (ratio " + Fmt(a / d, 2) +
         "); the channel's steps alone (4096 B both ways at once, no runtime) " + Fmt(e, 3) +
         " us (ratio " + Fmt(a / e, 2) + "; itself " + Fmt(e / l, 2) + "x the line's round trip)";
}

}  // namespace

int RunCclBench(Session& s, const CclOptions& opts) {
  const int n = s.num_workers();
  const int64_t min_bytes = opts.min_bytes;
  const int64_t max_bytes = opts.max_bytes;
  const int repeats = static_cast<int>(opts.repeats);
  const std::string& only = opts.op;
  s.InitCCL(opts.ccl);

  std::vector<std::string> meta = Metadata(s);
  const char* mmap = std::getenv("MALLOC_MMAP_THRESHOLD_");
  const char* trim = std::getenv("MALLOC_TRIM_THRESHOLD_");
  meta.push_back(std::string("malloc=") + (mmap || trim ? "tuned" : "glibc-default") +
                 " MALLOC_MMAP_THRESHOLD_=" + (mmap ? mmap : "unset") +
                 " MALLOC_TRIM_THRESHOLD_=" + (trim ? trim : "unset"));
  meta.push_back("ccl=" + opts.ccl + " repeats=" + std::to_string(repeats));
  meta.push_back("fault_in_GBps=" + Fmt(FaultInGBps(), 2));
  std::printf("# disco-bench ccl");
  for (const auto& m : meta) std::printf("  %s", m.c_str());
  std::printf(
      "\n# time: mean per call in microseconds (session: on the controller, calls issued "
      "back to back then SyncAll; raw: max over ranks), median of %d repeats; sizes are "
      "the larger buffer; busbw factors as in nccl-tests\n",
      repeats);

  Table table({"collective", "size_B", "count", "type", "op", "raw_time_us", "raw_algbw",
               "raw_busbw", "raw_wrong", "disco_time_us", "disco_algbw", "disco_busbw",
               "disco_wrong", "busbw_ratio", "floor_us", "ratio_bound"});
  DRef fill = s.GetGlobalFunc("bench.ccl_fill");
  DRef wrong = s.GetGlobalFunc("bench.ccl_wrong");
  DRef raw = s.GetGlobalFunc("bench.ccl_raw");
  DRef floor = s.GetGlobalFunc("bench.ccl_copy_floor");
  for (const Kind& kind : kKinds) {
    if (!only.empty() && only != kind.name) continue;
    std::string k = kind.name;
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      int64_t total = bytes / 4 / n * n;  // float32 elements in the larger buffer
      if (total == 0) continue;
      int64_t send_count = k == "allgather" ? total / n : total;
      int64_t recv_count = k == "reduce_scatter" ? total / n : total;
      DRef send = s.Empty(Shape{send_count}, DataType("float32"));
      DRef recv = s.Empty(Shape{recv_count}, DataType("float32"));
      s.CallPacked(fill, send);
      if (k == "broadcast") s.CallPacked(fill, recv);
      int64_t iters = std::max<int64_t>(5, std::min<int64_t>(2000, (int64_t{256} << 20) / bytes));
      int64_t warmup = std::max<int64_t>(2, iters / 10);
      std::vector<double> raw_t, disco_t, floor_t;
      for (int r = 0; r < repeats; ++r) {
        raw_t.push_back(
            s.CallPacked(raw, k, send, recv, iters, warmup).DebugGetFromRemote(0).cast<double>());
        for (int64_t i = 0; i < warmup; ++i) SessionCall(s, k, send, recv);
        s.SyncAll();
        double t0 = NowUs();
        for (int64_t i = 0; i < iters; ++i) SessionCall(s, k, send, recv);
        s.SyncAll();
        disco_t.push_back((NowUs() - t0) / iters);
        if (k == "allreduce") {
          floor_t.push_back(
              s.CallPacked(floor, send, recv, iters).DebugGetFromRemote(0).cast<double>());
        }
      }
      // Correctness of each side's result (broadcast's recv is refilled before its raw check).
      if (k == "broadcast") s.CallPacked(fill, recv);
      s.CallPacked(raw, k, send, recv, 1, 0);
      int64_t raw_wrong = s.CallPacked(wrong, k, recv).DebugGetFromRemote(0).cast<int64_t>();
      if (k == "broadcast") s.CallPacked(fill, recv);
      SessionCall(s, k, send, recv);
      int64_t disco_wrong = s.CallPacked(wrong, k, recv).DebugGetFromRemote(0).cast<int64_t>();

      double size = static_cast<double>(total) * 4;
      double rt = Median(raw_t), dt = Median(disco_t);
      double ft = floor_t.empty() ? 0 : Median(floor_t);
      double raw_alg = size / rt / 1e3, disco_alg = size / dt / 1e3;  // GB/s
      double f = kind.busbw_factor(n);
      table.AddRow({k, std::to_string(static_cast<int64_t>(size)), std::to_string(total), "float32",
                    k == "allgather" || k == "broadcast" ? "none" : "sum", Fmt(rt, 3),
                    Fmt(raw_alg, 2), Fmt(raw_alg * f, 2), std::to_string(raw_wrong), Fmt(dt, 3),
                    Fmt(disco_alg, 2), Fmt(disco_alg * f, 2), std::to_string(disco_wrong),
                    Fmt(n > 1    ? (disco_alg * f) / (raw_alg * f)
                        : dt > 0 ? rt / dt
                                 : 0,
                        2),
                    ft > 0 ? Fmt(ft, 1) : "-", ft > 0 ? Fmt(rt / ft, 2) : "-"});
      if (raw_wrong != 0 || disco_wrong != 0) {
        std::fprintf(stderr, "disco-bench ccl: wrong results for %s at %lld bytes\n", k.c_str(),
                     static_cast<long long>(size));
      }
    }
  }
  if (n == 2 && (only.empty() || only == "allreduce")) {
    const std::string line = SmallAllReduceLine(s, repeats);
    std::printf("# %s\n", line.c_str());
    meta.push_back(line);
  }
  Emit(table, opts.out, meta);
  return 0;
}

}  // namespace bench
}  // namespace disco
