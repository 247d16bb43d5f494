#include "session/trace_job.h"

#include <disco/error.h>
#include <disco/log.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/process_info.h"
#include "core/text.h"
#include "core/trace.h"
#include "mpi/mpi_util.h"

namespace disco {
namespace trace {
namespace {

struct Offset {
  int64_t local_ns = 0;   // this rank's clock when it was estimated
  int64_t offset_ns = 0;  // this rank's clock minus rank 0's
  int64_t error_ns = 0;   // half the best round trip
};

constexpr size_t kMaxRankFilePath = 4096;  // core/trace.cc keeps the name in a buffer this long

struct JobState {
  bool on = false;
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of the world: its messages meet nobody else's
  Offset start;
  int64_t origin_ns = 0;  // rank 0's clock at the start: time 0 of the trace
};
JobState& Job() {
  static JobState job;
  return job;
}

constexpr int kRounds = 8;
constexpr int kTag = 0x7472;  // "tr"

// This machine's boot: ranks that share it read the same CLOCK_MONOTONIC (one host, its network
// namespaces and containers included), so their offset is 0 exactly.
std::string BootId() {
  char id[64] = {0};
  const int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t n = read(fd, id, sizeof id - 1);
    close(fd);
    if (n > 0) id[n] = '\0';
  }
  return id;
}

// Each rank's offset to rank 0's clock: 0 for ranks booted with rank 0 (the same clock); for the
// others rank 0 pings kRounds times, and the round trip with the least time gives the offset (the
// remote clock read at its midpoint) and its error (half that round trip).
Offset EstimateOffset(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  char boot[64] = {0};
  std::snprintf(boot, sizeof boot, "%s", BootId().c_str());
  std::vector<char> boots(rank == 0 ? sizeof boot * static_cast<size_t>(size) : 0);
  DISCO_MPI_CALL(
      MPI_Gather(boot, sizeof boot, MPI_CHAR, boots.data(), sizeof boot, MPI_CHAR, 0, comm));
  std::vector<int> ping(static_cast<size_t>(size), 0);
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      ping[r] = boot[0] == '\0' || std::strncmp(boot, &boots[r * sizeof boot], sizeof boot) != 0;
    }
  }
  int pinged = 0;
  DISCO_MPI_CALL(MPI_Scatter(ping.data(), 1, MPI_INT, &pinged, 1, MPI_INT, 0, comm));
  Offset mine;
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      if (!ping[r]) continue;
      int64_t best_rtt = INT64_MAX, best_offset = 0;
      for (int k = 0; k < kRounds; ++k) {
        int64_t remote = 0;
        const int64_t t0 = NowNs();
        DISCO_MPI_CALL(MPI_Send(nullptr, 0, MPI_BYTE, r, kTag, comm));
        DISCO_MPI_CALL(MPI_Recv(&remote, 1, MPI_INT64_T, r, kTag, comm, MPI_STATUS_IGNORE));
        const int64_t t1 = NowNs();
        if (t1 - t0 < best_rtt) best_rtt = t1 - t0, best_offset = remote - (t0 + t1) / 2;
      }
      const int64_t result[2] = {best_offset, best_rtt / 2};
      DISCO_MPI_CALL(MPI_Send(result, 2, MPI_INT64_T, r, kTag, comm));
    }
  } else if (pinged) {
    for (int k = 0; k < kRounds; ++k) {
      DISCO_MPI_CALL(MPI_Recv(nullptr, 0, MPI_BYTE, 0, kTag, comm, MPI_STATUS_IGNORE));
      const int64_t now = NowNs();
      DISCO_MPI_CALL(MPI_Send(&now, 1, MPI_INT64_T, 0, kTag, comm));
    }
    int64_t result[2] = {0, 0};
    DISCO_MPI_CALL(MPI_Recv(result, 2, MPI_INT64_T, 0, kTag, comm, MPI_STATUS_IGNORE));
    mine.offset_ns = result[0];
    mine.error_ns = result[1];
  }
  mine.local_ns = NowNs();
  return mine;
}

// Opens `path` for writing: not through a symbolic link (O_NOFOLLOW), and only a regular file of
// this user (a file another user made in a shared directory, e.g. /tmp, is refused rather than
// filled with this job's trace). Truncates only when `truncate`. Throws ValueError naming the path.
int OpenOwnFile(const std::string& path, bool truncate, bool* created) {
  // O_NONBLOCK: a FIFO planted at the path would block open() until a reader came (forever);
  // with it the open fails at once (ENXIO) or returns, and the file type is checked below.
  int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  *created = fd >= 0;
  if (fd < 0 && errno == EEXIST) {
    fd = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  }
  if (fd < 0) {
    DISCO_THROW(ValueError) << "DISCO_TRACE=" << path
                            << ": cannot write it: " << std::strerror(errno)
                            << (errno == ELOOP   ? " (a symbolic link: give the file itself)"
                                : errno == ENXIO ? " (a FIFO with no reader: give a regular file)"
                                                 : "");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    close(fd);
    DISCO_THROW(ValueError) << "DISCO_TRACE=" << path << ": it exists and is "
                            << (S_ISREG(st.st_mode) ? "owned by uid " + std::to_string(st.st_uid)
                                                    : std::string("not a regular file"))
                            << ", not a file of yours (uid " << geteuid() << "): name another";
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (truncate && ftruncate(fd, 0) != 0) {
    const int e = errno;
    close(fd);
    DISCO_THROW(ValueError) << "DISCO_TRACE=" << path
                            << ": cannot truncate it: " << std::strerror(e);
  }
  return fd;
}

void WriteAll(const std::string& path, const std::string& body) {
  bool created = false;
  const int fd = OpenOwnFile(path, true, &created);
  size_t done = 0;
  while (done < body.size()) {
    const ssize_t w = write(fd, body.data() + done, body.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      close(fd);
      DISCO_THROW(RuntimeError) << "DISCO_TRACE=" << path << ": writing it failed after " << done
                                << " of " << body.size() << " bytes: " << std::strerror(e);
    }
    done += static_cast<size_t>(w);
  }
  DISCO_CHECK(close(fd) == 0, RuntimeError)
      << "DISCO_TRACE=" << path << ": closing it failed: " << std::strerror(errno);
}

// The metadata events that name rank `rank`'s process (with its host) and its tracks.
std::string RankMetadata(int rank) {
  const std::string r = std::to_string(rank);
  std::string meta = "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + r +
                     ",\"tid\":0,\"args\":{\"name\":\"rank " + r +
                     (rank == 0 ? ": controller + worker 0" : "") + " (" +
                     text::ForJsonString(GetProcessInfo().host) + ")\"}},\n";
  meta += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + r +
          ",\"tid\":0,\"args\":{\"sort_index\":" + r + "}},\n";
  meta += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + r +
          ",\"tid\":1,\"args\":{\"name\":\"worker " + r + ": commands\"}},\n";
  if (rank == 0) {
    meta +=
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":"
        "\"controller\"}},\n";
  }
  return meta;
}

}  // namespace

void StartJob(MPI_Comm world) {
  JobState& job = Job();
  job.on = false;
  const std::string path = env::GetString("DISCO_TRACE");
  if (path.empty()) return;
  const int64_t capacity = env::GetInt("DISCO_TRACE_EVENTS", 1024, int64_t{1} << 26);
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  // A path rank 0 cannot write is an error at the start, on every rank, not a lost trace at the
  // end. (Not truncated here: a job that fails before its end leaves rank files instead.)
  std::exception_ptr failure;
  if (rank == 0) {
    try {
      // Created for the test and removed again, or an existing file opened without truncation:
      // a job that fails leaves no empty file behind, nor an earlier trace cut short.
      bool created = false;
      close(OpenOwnFile(path, false, &created));
      if (created) unlink(path.c_str());
    } catch (const std::exception&) {
      failure = std::current_exception();
    }
  }
  // Every rank's own file (PATH.rank<r>.json, for a failure) must have a name that fits.
  const std::string rank_file = path + ".rank" + std::to_string(rank) + ".json";
  if (!failure && rank_file.size() >= kMaxRankFilePath) {
    failure = std::make_exception_ptr(
        ValueError("DISCO_TRACE=" + path.substr(0, 64) + "...: " + std::to_string(path.size()) +
                   " characters; with '.rank<r>.json' it must stay under " +
                   std::to_string(kMaxRankFilePath)));
  }
  mpi::AgreeOnSuccess(world, failure, "DISCO_TRACE");
  // A rank that could not leave its file after a failure says so now (a directory that exists
  // only on rank 0's node): a warning, since a job that ends well never writes it.
  const std::string dir = rank_file.find('/') == std::string::npos
                              ? std::string(".")
                              : rank_file.substr(0, std::max<size_t>(1, rank_file.rfind('/')));
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    DISCO_LOG(WARN) << "DISCO_TRACE: this rank cannot write " << rank_file << " ("
                    << std::strerror(errno) << "): a failure of the job would leave no trace of it";
  }
  if (job.comm == MPI_COMM_NULL) DISCO_MPI_CALL(MPI_Comm_dup(world, &job.comm));
  job.start = EstimateOffset(job.comm);
  int64_t origin = rank == 0 ? NowNs() : 0;
  DISCO_MPI_CALL(MPI_Bcast(&origin, 1, MPI_INT64_T, 0, job.comm));
  job.origin_ns = origin;
  Start(rank, path, static_cast<size_t>(capacity));
  job.on = true;
}

void FinishJob(MPI_Comm world) {
  (void)world;
  JobState& job = Job();
  if (!job.on) return;
  job.on = false;
  Stop();
  int rank = 0, size = 1;
  MPI_Comm_rank(job.comm, &rank);
  MPI_Comm_size(job.comm, &size);
  const Offset end = EstimateOffset(job.comm);
  uint64_t count = 0;
  std::string mine = RankMetadata(rank);
  mine += EventsJson(job.start.local_ns, job.start.offset_ns, end.local_ns, end.offset_ns,
                     job.origin_ns, rank, &count);
  // Rank 0 gathers every rank's text (sizes first), then writes the file.
  const int64_t stats[5] = {static_cast<int64_t>(mine.size()), static_cast<int64_t>(count),
                            std::max(job.start.error_ns, end.error_ns),
                            std::max(std::abs(job.start.offset_ns), std::abs(end.offset_ns)),
                            std::abs(end.offset_ns - job.start.offset_ns)};
  std::vector<int64_t> all(rank == 0 ? 5 * static_cast<size_t>(size) : 0);
  DISCO_MPI_CALL(MPI_Gather(stats, 5, MPI_INT64_T, all.data(), 5, MPI_INT64_T, 0, job.comm));
  // Each rank's text goes in pieces of at most 1 GiB (MPI counts are int).
  std::string body;
  if (rank == 0) {
    body = "{\"traceEvents\":[\n" + mine;
    for (int r = 1; r < size; ++r) {
      std::string part(static_cast<size_t>(all[5 * r]), '\0');
      for (size_t done = 0; done < part.size();) {
        const int n = static_cast<int>(std::min<size_t>(part.size() - done, size_t{1} << 30));
        DISCO_MPI_CALL(
            MPI_Recv(&part[done], n, MPI_CHAR, r, kTag + 1, job.comm, MPI_STATUS_IGNORE));
        done += static_cast<size_t>(n);
      }
      body += part;
    }
  } else {
    for (size_t done = 0; done < mine.size();) {
      const int n = static_cast<int>(std::min<size_t>(mine.size() - done, size_t{1} << 30));
      DISCO_MPI_CALL(MPI_Send(&mine[done], n, MPI_CHAR, 0, kTag + 1, job.comm));
      done += static_cast<size_t>(n);
    }
    return;
  }
  int64_t events = 0, error = 0, offset = 0, drift = 0;
  for (int r = 0; r < size; ++r) {
    events += all[5 * r + 1];
    error = std::max(error, all[5 * r + 2]);
    offset = std::max(offset, all[5 * r + 3]);
    drift = std::max(drift, all[5 * r + 4]);
  }
  char tail[512];
  std::snprintf(tail, sizeof tail,
                "{\"name\":\"clock\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"aligned_to\":"
                "\"rank 0\",\"max_offset_us\":%.3f,\"max_error_us\":%.3f,\"max_drift_us\":%.3f}}\n"
                "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"disco_trace\":1,\"ranks\":%d,"
                "\"events\":%" PRId64 ",\"clock_max_error_us\":%.3f}}\n",
                offset / 1e3, error / 1e3, drift / 1e3, size, events, error / 1e3);
  body += tail;
  const std::string& path = Path();
  try {
    WriteAll(path, body);
  } catch (const std::exception& e) {  // the job's own result stands; the trace is lost, loudly
    std::fprintf(stderr, "disco: error: %s\n", e.what());
    return;
  }
  std::fprintf(stderr,
               "disco: DISCO_TRACE: %" PRId64
               " events of %d rank(s) in %s; clocks aligned to rank 0's (ranks on its host share "
               "its clock; others by MPI round trips at start and end: largest offset %.1f us, "
               "error up to %.1f us, drift %.1f us)\n",
               events, size, path.c_str(), offset / 1e3, error / 1e3, drift / 1e3);
}

}  // namespace trace
}  // namespace disco
