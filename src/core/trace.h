// The timeline (DISCO_TRACE=PATH): what every rank did, when, written at the end of the job as
// one Chrome / Perfetto trace-event JSON file (session/trace_job.cc merges the ranks and aligns
// their clocks).
//
// Each rank keeps its events in a ring of DISCO_TRACE_EVENTS entries (allocated once, when tracing
// is on; the oldest are overwritten and counted), so memory stays bounded however long the job
// runs. An event is a span: a kind, a name (at most kNameBytes - 1 bytes are kept, not cutting a
// UTF-8 character), its start and end on this rank's steady clock, and up to three integers whose
// meaning the kind gives. Recording costs one branch when tracing is off, and a clock read and a
// slot of the ring when it is on; any thread may record.
#ifndef DISCO_CORE_TRACE_H_
#define DISCO_CORE_TRACE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace disco {
namespace trace {

/// What a span is; the arguments a0..a2 each kind records.
enum class Kind : uint8_t {
  kCommand = 0,     // rank 0's controller sends a command: seq, frame bytes, -
  kRun = 1,         // a rank runs a command: seq, -, -
  kCollective = 2,  // a collective builtin: bytes, ns waiting in the ranks' agreement round, -
  kH5Read = 3,      // HDF5 reads: bytes, datasets, -
  kH5Write = 4,     // HDF5 writes: bytes, datasets, -
  kSync = 5,        // the controller waits for workers: worker (-1: all), -, -
  kReplay = 6,      // the controller replays a captured graph: graph id, calls, -
  kRemote = 7,      // a served job answers a remote request: request bytes, reply bytes, -
  kNumKinds = 8,
};
const char* KindName(Kind kind);

constexpr size_t kNameBytes = 48;

struct Event {
  int64_t start_ns;
  int64_t end_ns;
  int64_t a[3];
  Kind kind;
  char name[kNameBytes];
};

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

/// Whether this rank records (DISCO_TRACE set for the job).
inline bool Enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
/// This rank's steady clock, in nanoseconds.
int64_t NowNs();

/// Turns recording on with a ring of `capacity` events (rounded up to a power of two), clearing
/// what was recorded; `path` is where the job's trace goes (rank files on a fatal error: see
/// WriteRankFile). Called by every rank at the start of a job.
void Start(int rank, const std::string& path, size_t capacity);
/// Turns recording off (the events stay until the next Start).
void Stop();
const std::string& Path();
int Rank();

/// Records a finished span (no-op when tracing is off). `name` need not outlive the call.
void Record(Kind kind, const char* name, size_t name_len, int64_t start_ns, int64_t end_ns,
            int64_t a0 = 0, int64_t a1 = 0, int64_t a2 = 0);
inline void Record(Kind kind, const std::string& name, int64_t start_ns, int64_t end_ns,
                   int64_t a0 = 0, int64_t a1 = 0, int64_t a2 = 0) {
  Record(kind, name.data(), name.size(), start_ns, end_ns, a0, a1, a2);
}

/// A span from construction to destruction, recorded only when tracing was on at construction.
class Span {
 public:
  Span(Kind kind, const char* name) : kind_(kind), name_(name) {
    if (Enabled()) start_ = NowNs();
  }
  ~Span() {
    if (start_ >= 0)
      Record(kind_, name_, std::char_traits<char>::length(name_), start_, NowNs(), a_[0], a_[1],
             a_[2]);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  void set(int i, int64_t v) { a_[i] = v; }
  bool active() const { return start_ >= 0; }

 private:
  Kind kind_;
  const char* name_;
  int64_t start_ = -1;
  int64_t a_[3] = {0, 0, 0};
};

/// The events recorded since Start, oldest first (at most the ring's capacity), and how many
/// older ones the ring overwrote.
size_t Snapshot(Event* out, size_t max, uint64_t* dropped);
size_t Capacity();

/// This rank's events as trace-event JSON objects (one per line, each followed by ",\n"), their
/// times mapped to the job's clock: t_job = t_local - offset, offset interpolated linearly
/// between (t0, offset0) and (t1, offset1), in microseconds from `origin_ns` (job clock).
/// Rank 0's command spans take the function name of worker 0's run of the same sequence number.
std::string EventsJson(int64_t t0, int64_t offset0, int64_t t1, int64_t offset1, int64_t origin_ns,
                       int pid, uint64_t* count);

/// A hung or failing job's trace: this rank's events, unaligned, to PATH.rank<r>.json (a complete
/// trace-event file of its own; python3 -m disco.trace merges such files), and a line on stderr.
/// Once per Start; turns recording off. Async-signal-safe (no allocation, no locks, no stdio): the
/// SIGTERM handler of a rank the launcher ends calls it. `why` goes into the file's metadata.
void WriteRankFile(const char* why);

}  // namespace trace
}  // namespace disco

#endif  // DISCO_CORE_TRACE_H_
