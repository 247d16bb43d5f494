#include "ccl/mpi/shm.h"

#include <dirent.h>
#include <disco/error.h>
#include <disco/log.h>
#include <disco/types.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ccl/reduce.h"
#include "core/wait_record.h"
#include "mpi/mpi_util.h"

namespace disco {
namespace ccl {
namespace {

// Each rank's flag sits on a line of its own (two cache lines: adjacent-line prefetch).
constexpr size_t kFlagStride = 128;
constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t HeaderBytes(int size) { return RoundUp(static_cast<size_t>(size) * kFlagStride, kPage); }
size_t SegmentBytes(int size) {
  return HeaderBytes(size) + static_cast<size_t>(size) * 2 * ShmChannel::kSlotBytes;
}

// memcpy with non-temporal stores, for results far larger than the caches: the destination's
// lines are not read for ownership first, which saves a third of the memory traffic.
void StreamCopy(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (n < head + 64) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// More ranks on this node than the CPUs they may run on (the union of their affinity masks:
// taskset, a cpuset of Slurm or a container, binding; at most the online CPUs): waiting ranks must
// give their core away at once, or two ranks on one core spin out each other's time slices.
bool NodeOversubscribed() {
  static const bool oversubscribed = [] {
    MPI_Comm node = MPI_COMM_NULL;
    DISCO_MPI_CALL(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    mpi::Comm owned(node);
    cpu_set_t mine, all;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) CPU_SET(0, &mine);  // unknown: one CPU
    DISCO_MPI_CALL(
        MPI_Allreduce(&mine, &all, static_cast<int>(sizeof mine), MPI_BYTE, MPI_BOR, owned.get()));
    long cpus = CPU_COUNT(&all);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0) cpus = std::min(cpus, online);
    const bool over = owned.size() > cpus;
    if (over) {
      DISCO_LOG(INFO) << "collectives: " << owned.size() << " ranks on this node may run on "
                      << cpus << " CPU" << (cpus == 1 ? "" : "s")
                      << "; their waits yield at once instead of spinning";
    }
    return over;
  }();
  return oversubscribed;
}

bool AllTrue(bool mine, MPI_Comm comm) {
  int in = mine ? 1 : 0, all = 0;
  DISCO_MPI_CALL(MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_MIN, comm));
  return all != 0;
}

// Sizes a new segment: posix_fallocate, not ftruncate alone: memory too small for the segment
// must fail here, not with SIGBUS at the first touch of a page.
bool SizeSegment(int fd, size_t bytes, std::string* why) {
  int rc = ftruncate(fd, static_cast<off_t>(bytes));
  if (rc == 0) rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    *why = std::string("cannot size ") + std::to_string(bytes) +
           " bytes of shared memory: " + std::strerror(rc > 0 ? rc : errno);
    return false;
  }
  return true;
}

char* MapFd(int fd, size_t bytes, std::string* why) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *why = std::string("mmap of shared memory: ") + std::strerror(errno);
    return nullptr;
  }
  return static_cast<char*>(base);
}

// The nonce rank 0 writes into the last page, which the others check: what they opened is this
// segment, not some other file of that number.
uint64_t* NonceOf(char* base, size_t bytes) {
  return reinterpret_cast<uint64_t*>(base + bytes - kPage);
}

// The nameless segment: a memfd of rank 0, opened by the others through /proc. nullptr (with
// `why`) where this rank could not; collective over `comm`.
char* MapAnonymous(MPI_Comm comm, int rank, size_t bytes, std::string* why) {
  struct {
    int64_t pid = -1, fd = -1;
    uint64_t nonce = 0;
  } info;
  char* base = nullptr;
  int fd = -1;
  if (rank == 0) {
    fd = memfd_create("disco-ccl", MFD_CLOEXEC);
    if (fd < 0) {
      *why = std::string("memfd_create: ") + std::strerror(errno);
    } else if (SizeSegment(fd, bytes, why) && (base = MapFd(fd, bytes, why)) != nullptr) {
      info.pid = getpid();
      info.fd = fd;
      info.nonce =
          (static_cast<uint64_t>(getpid()) << 32) ^ reinterpret_cast<uintptr_t>(base) ^
          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
      *NonceOf(base, bytes) = info.nonce;
    }
  }
  DISCO_MPI_CALL(MPI_Bcast(&info, sizeof info, MPI_BYTE, 0, comm));
  if (rank != 0 && info.fd >= 0) {
    std::string path = "/proc/" + std::to_string(info.pid) + "/fd/" + std::to_string(info.fd);
    int mine = open(path.c_str(), O_RDWR | O_CLOEXEC);
    struct stat st;
    if (mine < 0) {
      *why = "open(" + path + "): " + std::strerror(errno);
    } else if (fstat(mine, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
      *why = path + " is not the segment (another pid namespace?)";
    } else if ((base = MapFd(mine, bytes, why)) != nullptr && *NonceOf(base, bytes) != info.nonce) {
      *why = path + " is not the segment (another pid namespace?)";
      munmap(base, bytes);
      base = nullptr;
    }
    if (mine >= 0) close(mine);
  }
  // Rank 0's descriptor stays open until every rank has opened its own.
  AllTrue(true, comm);
  if (fd >= 0) close(fd);
  return base;
}

// Removes /dev/shm/disco-ccl-<pid>-<n> segments of processes that no longer exist (a job killed
// while its ranks were mapping a named segment).
void RemoveStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    int pid = 0;
    unsigned n = 0;
    if (std::sscanf(e->d_name, "disco-ccl-%d-%u", &pid, &n) != 2 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::string name = std::string("/") + e->d_name;
    if (shm_unlink(name.c_str()) == 0) {
      DISCO_LOG(INFO) << "collectives: removed " << name << ", left by a job that ended";
    }
  }
  closedir(dir);
}

// Maps the segment called `name` (creating it on rank 0); nullptr with `why` set on failure.
char* MapSegment(const char* name, bool create, size_t bytes, std::string* why) {
  int fd = create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0);
  if (fd < 0) {
    *why = std::string("shm_open(") + name + "): " + std::strerror(errno);
    return nullptr;
  }
  char* base = create && !SizeSegment(fd, bytes, why) ? nullptr : MapFd(fd, bytes, why);
  close(fd);
  return base;
}

// The named segment; collective over `comm`. Unlinked once every rank has mapped it.
char* MapNamed(MPI_Comm comm, int rank, size_t bytes, std::string* why) {
  char name[64] = {0};
  char* base = nullptr;
  if (rank == 0) {
    RemoveStaleSegments();
    static std::atomic<unsigned> counter{0};
    std::snprintf(name, sizeof(name), "/disco-ccl-%d-%u", static_cast<int>(getpid()),
                  counter.fetch_add(1));
    base = MapSegment(name, /*create=*/true, bytes, why);
    if (base == nullptr) name[0] = '\0';
  }
  DISCO_MPI_CALL(MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm));
  if (rank != 0 && name[0] != '\0') base = MapSegment(name, /*create=*/false, bytes, why);
  bool all_mapped = AllTrue(base != nullptr, comm);
  // Everyone who could open the name has done so: remove it, so that nothing outlives the job.
  if (rank == 0 && name[0] != '\0') shm_unlink(name);
  if (!all_mapped && base != nullptr) {
    munmap(base, bytes);
    base = nullptr;
  }
  return base;
}

}  // namespace

std::unique_ptr<ShmChannel> ShmChannel::Create(MPI_Comm comm) {
  int rank = 0, size = 1;
  DISCO_MPI_CALL(MPI_Comm_rank(comm, &rank));
  DISCO_MPI_CALL(MPI_Comm_size(comm, &size));
  if (size == 1) return nullptr;
  MPI_Comm node = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_size = mpi::Comm(node).size();
  if (!AllTrue(node_size == size, comm)) {
    DISCO_LOG(INFO) << "collectives: the " << size
                    << " ranks span several nodes; no shared-memory channel";
    return nullptr;
  }

  // Rank 0 creates the segment; the others map it. First without any name (a memfd the others
  // open through /proc/<pid>/fd/<fd>): a job killed at any moment leaves nothing behind. Where that
  // is not possible (another pid namespace, /proc hidden), a named /dev/shm segment, unlinked as
  // soon as every rank has it mapped; names that dead jobs left are removed first.
  const size_t bytes = SegmentBytes(size) + kPage;  // the last page: rank 0's nonce
  std::string why;
  char* base = MapAnonymous(comm, rank, bytes, &why);
  if (!AllTrue(base != nullptr, comm)) {
    if (base != nullptr) munmap(base, bytes);
    base = MapNamed(comm, rank, bytes, &why);
  }
  if (base != nullptr) {
    // Fault in this rank's own slots now, once, rather than in the first collectives.
    std::memset(base + HeaderBytes(size) + static_cast<size_t>(rank) * 2 * kSlotBytes, 0,
                2 * kSlotBytes);
  }
  if (!AllTrue(base != nullptr, comm)) {
    if (base != nullptr) munmap(base, bytes);
    DISCO_LOG(INFO) << "collectives: no shared-memory channel ("
                    << (why.empty() ? std::string("another rank could not map it") : why)
                    << "); using MPI's collectives";
    return nullptr;
  }
  // World ranks of the members, to name a peer that never arrives (the watchdog's line).
  int world_rank = 0;
  DISCO_MPI_CALL(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  std::vector<int> world_ranks(size);
  DISCO_MPI_CALL(MPI_Allgather(&world_rank, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, comm));
  return std::unique_ptr<ShmChannel>(
      new ShmChannel(base, bytes, rank, size, NodeOversubscribed(), std::move(world_ranks)));
}

ShmChannel::ShmChannel(char* base, size_t mapped, int rank, int size, bool oversubscribed,
                       std::vector<int> world_ranks)
    : base_(base),
      mapped_(mapped),
      rank_(rank),
      size_(size),
      spins_before_yield_(oversubscribed ? 0 : 1 << 14),
      world_ranks_(std::move(world_ranks)) {}

ShmChannel::~ShmChannel() { munmap(base_, mapped_); }

uint64_t* ShmChannel::Flag(int rank) const {
  return reinterpret_cast<uint64_t*>(base_ + static_cast<size_t>(rank) * kFlagStride);
}

char* ShmChannel::Slot(int rank, uint64_t round) const {
  return base_ + HeaderBytes(size_) + (static_cast<size_t>(rank) * 2 + round % 2) * kSlotBytes;
}

uint64_t ShmChannel::NextRound() { return ++round_; }

void ShmChannel::Exchange() {
  const uint64_t step = ++step_;
  __atomic_store_n(Flag(rank_), step, __ATOMIC_RELEASE);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const uint64_t* flag = Flag(r);
    for (int spins = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < step;) {
      if (spins < spins_before_yield_) {
        ++spins;
        CpuRelax();
      } else {
        if (spins == spins_before_yield_) {
          ++spins;
          wait_record::WaitingFor(world_ranks_[r]);  // a slow peer: tell the watchdog who it is
        }
        mpi::Progress();  // worker 0 may be sending this rank its next control frame
        sched_yield();
      }
    }
  }
}

void ShmChannel::PrefetchPeers(uint64_t round, size_t bytes) const {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const char* p = Slot(r, round);
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
  }
}

template <typename Source>
void ShmChannel::ReduceInRankOrder(char* dst, Source source, int64_t count, DLDataType t,
                                   ReduceOp op) const {
  Reduce(dst, source(0), source(1), count, t, op);
  for (int r = 2; r < size_; ++r) Reduce(dst, dst, source(r), count, t, op);
}

void ShmChannel::AllReduce(const char* send, char* recv, int64_t n, DLDataType t, ReduceOp op) {
  const size_t elem = DataTypeBytes(t);
  const int64_t per_step = static_cast<int64_t>(kSlotBytes / elem);
  if (static_cast<size_t>(n) * elem < kSplitMinBytes) {
    // Small: one exchange per step; every rank reduces the whole step.
    for (int64_t off = 0; off < n; off += per_step) {
      const int64_t c = std::min(per_step, n - off);
      const uint64_t s = NextRound();
      std::memcpy(Slot(rank_, s), send + off * elem, c * elem);
      Exchange();
      PrefetchPeers(s, c * elem);
      ReduceInRankOrder(
          recv + off * elem, [&](int r) { return Slot(r, s); }, c, t, op);
    }
    return;
  }
  const bool stream = static_cast<size_t>(n) * elem >= kStreamMinBytes;
  // Large: reduce-scatter then allgather within each step. Rank r reduces part r of the step (in
  // rank order, reading its own part straight from `send`) into part r of its slot, which the
  // peers had no reason to read; after a second exchange everyone copies the other parts.
  for (int64_t off = 0; off < n; off += per_step) {
    const int64_t c = std::min(per_step, n - off);
    const uint64_t s = NextRound();
    char* mine = Slot(rank_, s);
    const char* in = send + off * elem;
    auto part_at = [&](int p) {
      return (static_cast<int64_t>(p) * (c / size_) + std::min<int64_t>(p, c % size_)) * elem;
    };
    auto part_bytes = [&](int p) { return (c / size_ + (p < c % size_ ? 1 : 0)) * elem; };
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) std::memcpy(mine + part_at(p), in + part_at(p), part_bytes(p));
    }
    Exchange();
    const int64_t at = part_at(rank_), count = part_bytes(rank_) / elem;
    ReduceInRankOrder(
        mine + at, [&](int r) { return r == rank_ ? in + at : Slot(r, s) + at; }, count, t, op);
    Exchange();
    char* out = recv + off * elem;
    for (int p = 0; p < size_; ++p) {
      if (stream) {
        StreamCopy(out + part_at(p), Slot(p, s) + part_at(p), part_bytes(p));
      } else {
        std::memcpy(out + part_at(p), Slot(p, s) + part_at(p), part_bytes(p));
      }
    }
  }
}

void ShmChannel::AllGather(const char* send, char* recv, size_t bytes) {
  for (size_t off = 0; off < bytes; off += kSlotBytes) {
    const size_t c = std::min(kSlotBytes, bytes - off);
    const uint64_t s = NextRound();
    std::memcpy(Slot(rank_, s), send + off, c);
    Exchange();
    for (int r = 0; r < size_; ++r) {
      char* dst = recv + static_cast<size_t>(r) * bytes + off;
      if (r != rank_) {
        std::memcpy(dst, Slot(r, s), c);
      } else if (dst != send + off) {
        std::memcpy(dst, send + off, c);
      }
    }
  }
}

void ShmChannel::ReduceScatter(const char* send, char* recv, int64_t m, DLDataType t, ReduceOp op) {
  const size_t elem = DataTypeBytes(t);
  const int64_t per_step = std::max<int64_t>(1, kSlotBytes / (elem * size_));
  for (int64_t off = 0; off < m; off += per_step) {
    const int64_t c = std::min(per_step, m - off);
    const uint64_t s = NextRound();
    char* mine = Slot(rank_, s);
    for (int b = 0; b < size_; ++b) {
      std::memcpy(mine + b * c * elem, send + (b * m + off) * elem, c * elem);
    }
    Exchange();
    const size_t at = static_cast<size_t>(rank_) * c * elem;
    char* dst = recv + off * elem;
    ReduceInRankOrder(
        dst, [&](int r) { return Slot(r, s) + at; }, c, t, op);
  }
}

void ShmChannel::Broadcast(const char* send, char* recv, size_t bytes, int root) {
  for (size_t off = 0; off < bytes; off += kSlotBytes) {
    const size_t c = std::min(kSlotBytes, bytes - off);
    const uint64_t s = NextRound();
    if (rank_ == root) std::memcpy(Slot(root, s), send + off, c);
    Exchange();
    if (rank_ != root) {
      std::memcpy(recv + off, Slot(root, s), c);
    } else if (recv != send) {
      std::memcpy(recv + off, send + off, c);
    }
  }
}

}  // namespace ccl
}  // namespace disco
