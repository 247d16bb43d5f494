#include "core/trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/text.h"

namespace disco {
namespace trace {
namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

std::atomic<bool> g_rank_file_written{false};
char g_rank_file_path[4096] = {0};

// One event of the ring. The thread that records it writes it while a failing rank's writer (the
// watchdog's thread, a signal handler) may read it: a seqlock of atomic words (odd version while
// written; release stores, acquire loads), at the cost of plain stores and loads on x86. A reader
// skips an event that stays half-written (one being recorded as the rank file is written).
class Slot {
 public:
  void Store(const Event& e) {
    uint64_t w[kWords];
    std::memcpy(w, &e, sizeof e);
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    for (size_t i = 0; i < kWords; ++i) words_[i].store(w[i], std::memory_order_release);
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  bool Load(Event* e) const {
    for (int tries = 0; tries < 8; ++tries) {
      const uint64_t before = version_.load(std::memory_order_acquire);
      uint64_t w[kWords];
      for (size_t i = 0; i < kWords; ++i) w[i] = words_[i].load(std::memory_order_acquire);
      if ((before & 1) == 0 && version_.load(std::memory_order_relaxed) == before) {
        std::memcpy(e, w, sizeof *e);
        return true;
      }
    }
    return false;
  }

 private:
  static constexpr size_t kWords = sizeof(Event) / 8;
  static_assert(sizeof(Event) % 8 == 0, "an event is whole words");
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> words_[kWords] = {};
};

struct Ring {
  std::unique_ptr<Slot[]> events;
  uint64_t mask = 0;
  std::atomic<uint64_t> next{0};
  std::string path;
  int rank = 0;
};
Ring& TheRing() {
  static Ring* ring = new Ring;  // never destroyed: a fatal path may write it during exit
  return *ring;
}

// The thread (track) of a kind within its rank: 0 the controller, 1 the worker's commands (whose
// collectives and HDF5 calls nest inside them).
int TidOf(Kind kind) {
  switch (kind) {
    case Kind::kCommand:
    case Kind::kSync:
    case Kind::kReplay:
    case Kind::kRemote:
      return 0;
    default:
      return 1;
  }
}

}  // namespace

namespace {

// Text out for the events, in one serializer (WriteEvent) for both of the trace's writers: the
// merged file's (a std::string) and a failing rank's own file (async-signal-safe: a buffer on the
// stack flushed with write(2); no allocation, no locks, no stdio). `Out` provides Char.
template <typename Out>
class Text {
 public:
  void Str(const char* s) {
    while (*s != '\0') self().Char(*s++);
  }
  void Int(int64_t v) {
    uint64_t u = static_cast<uint64_t>(v);
    if (v < 0) {
      self().Char('-');
      u = ~u + 1;
    }
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u > 0);
    while (n > 0) self().Char(digits[--n]);
  }
  // `v` thousandths as a decimal with three places ("12.345"): nanoseconds as microseconds.
  void Milli(int64_t v) {
    if (v < 0) {
      self().Char('-');
      v = v == INT64_MIN ? INT64_MAX : -v;
    }
    Int(v / 1000);
    self().Char('.');
    self().Char(static_cast<char>('0' + v % 1000 / 100));
    self().Char(static_cast<char>('0' + v % 100 / 10));
    self().Char(static_cast<char>('0' + v % 10));
  }
  // `s` inside a JSON string: well-formed UTF-8 kept, controls and cut characters escaped
  // (text::JsonEscape).
  void Escaped(const char* s) {
    text::JsonEscape(s, std::strlen(s), [this](char c) { self().Char(c); });
  }

 private:
  Out& self() { return static_cast<Out&>(*this); }
};

class StringOut : public Text<StringOut> {
 public:
  explicit StringOut(std::string* out) : out_(out) {}
  void Char(char c) { out_->push_back(c); }

 private:
  std::string* out_;
};

class SafeWriter : public Text<SafeWriter> {
 public:
  explicit SafeWriter(int fd) : fd_(fd) {}
  ~SafeWriter() { Flush(); }
  void Char(char c) {
    if (n_ == sizeof buf_) Flush();
    buf_[n_++] = c;
  }
  void Flush() {
    size_t done = 0;
    while (done < n_) {
      const ssize_t w = write(fd_, buf_ + done, n_ - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    n_ = 0;
  }

 private:
  int fd_;
  char buf_[4096];
  size_t n_ = 0;
};

// One event as a trace-event object followed by ",\n": its name (and `suffix`, when given: the
// function a command ran), kind, track, start and duration (nanoseconds on the file's clock) and
// the arguments of its kind.
template <typename Out>
void WriteEvent(Text<Out>& w, const Event& e, const char* suffix, int pid, int64_t ts_ns,
                int64_t dur_ns) {
  dur_ns = std::max<int64_t>(0, dur_ns);
  w.Str("{\"name\":\"");
  w.Escaped(e.name);
  if (suffix != nullptr) {
    w.Str(" ");
    w.Escaped(suffix);
  }
  w.Str("\",\"cat\":\"");
  w.Str(KindName(e.kind));
  w.Str("\",\"ph\":\"X\",\"pid\":");
  w.Int(pid);
  w.Str(",\"tid\":");
  w.Int(TidOf(e.kind));
  w.Str(",\"ts\":");
  w.Milli(ts_ns);
  w.Str(",\"dur\":");
  w.Milli(dur_ns);
  w.Str(",\"args\":{");
  auto arg = [&](const char* key, int64_t v, bool first = false) {
    w.Str(first ? "\"" : ",\"");
    w.Str(key);
    w.Str("\":");
    w.Int(v);
  };
  switch (e.kind) {
    case Kind::kCommand:
      arg("seq", e.a[0], true);
      arg("frame_bytes", e.a[1]);
      break;
    case Kind::kRun:
      arg("seq", e.a[0], true);
      break;
    case Kind::kCollective:
      arg("bytes", e.a[0], true);
      w.Str(",\"wait_us\":");
      w.Milli(e.a[1]);
      break;
    case Kind::kH5Read:
    case Kind::kH5Write:
      arg("bytes", e.a[0], true);
      arg("datasets", e.a[1]);
      // Bytes per microsecond are MB/s; in thousandths: bytes * 1e6 / ns (the bytes of one
      // event stay far below 2^63 / 1e6).
      w.Str(",\"MB_per_s\":");
      w.Milli(dur_ns > 0 && e.a[0] >= 0 && e.a[0] < (int64_t{1} << 43) ? e.a[0] * 1000000 / dur_ns
                                                                       : 0);
      break;
    case Kind::kSync:
      arg("worker", e.a[0], true);
      break;
    case Kind::kReplay:
      arg("graph", e.a[0], true);
      arg("calls", e.a[1]);
      break;
    case Kind::kRemote:
      arg("request_bytes", e.a[0], true);
      arg("reply_bytes", e.a[1]);
      break;
    default:
      break;
  }
  w.Str("}},\n");
}

}  // namespace

const char* KindName(Kind kind) {
  static const char* const kNames[] = {"command",    "run",  "collective", "hdf5_read",
                                       "hdf5_write", "sync", "replay",     "remote"};
  const int k = static_cast<int>(kind);
  return k >= 0 && k < static_cast<int>(Kind::kNumKinds) ? kNames[k] : "unknown";
}

int64_t NowNs() {  // CLOCK_MONOTONIC, as the watchdog's flight recorder (mpi/clock.h)
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void Start(int rank, const std::string& path, size_t capacity) {
  Ring& r = TheRing();
  detail::g_enabled.store(false);
  size_t n = 1024;
  while (n < capacity && n < (size_t{1} << 30)) n <<= 1;
  if (r.mask + 1 != n || r.events == nullptr) {
    r.events = std::make_unique<Slot[]>(n);
    r.mask = n - 1;
  }
  r.next.store(0);
  r.path = path;
  r.rank = rank;
  std::snprintf(g_rank_file_path, sizeof g_rank_file_path, "%s.rank%d.json", path.c_str(), rank);
  g_rank_file_written.store(false);
  detail::g_enabled.store(true);
}

void Stop() { detail::g_enabled.store(false); }
const std::string& Path() { return TheRing().path; }
int Rank() { return TheRing().rank; }
size_t Capacity() { return TheRing().events != nullptr ? TheRing().mask + 1 : 0; }

void Record(Kind kind, const char* name, size_t name_len, int64_t start_ns, int64_t end_ns,
            int64_t a0, int64_t a1, int64_t a2) {
  if (!Enabled()) return;
  Ring& r = TheRing();
  Slot& slot = r.events[r.next.fetch_add(1, std::memory_order_relaxed) & r.mask];
  Event e{};
  e.start_ns = start_ns;
  e.end_ns = end_ns;
  e.a[0] = a0;
  e.a[1] = a1;
  e.a[2] = a2;
  e.kind = kind;
  const size_t n = text::Utf8Cut(name, name_len, kNameBytes - 1);  // "函数" not cut inside "数"
  std::memcpy(e.name, name, n);
  e.name[n] = '\0';
  slot.Store(e);
}

size_t Snapshot(Event* out, size_t max, uint64_t* dropped) {
  Ring& r = TheRing();
  if (r.events == nullptr) {
    if (dropped != nullptr) *dropped = 0;
    return 0;
  }
  const uint64_t end = r.next.load();
  const uint64_t cap = r.mask + 1;
  const uint64_t begin = end > cap ? end - cap : 0;
  if (dropped != nullptr) *dropped = begin;
  size_t n = 0;
  for (uint64_t i = begin; i < end && n < max; ++i) n += r.events[i & r.mask].Load(&out[n]) ? 1 : 0;
  return n;
}

std::string EventsJson(int64_t t0, int64_t offset0, int64_t t1, int64_t offset1, int64_t origin_ns,
                       int pid, uint64_t* count) {
  std::vector<Event> events(Capacity());
  uint64_t dropped = 0;
  events.resize(Snapshot(events.data(), events.size(), &dropped));
  // Rank 0's commands are named after the function worker 0 ran for them.
  std::unordered_map<int64_t, const char*> run_names;
  for (const Event& e : events) {
    if (e.kind == Kind::kRun) run_names[e.a[0]] = e.name;
  }
  const double slope =
      t1 > t0 ? static_cast<double>(offset1 - offset0) / static_cast<double>(t1 - t0) : 0.0;
  auto job_ns = [&](int64_t t) {  // on rank 0's clock, from `origin_ns`
    const double offset = static_cast<double>(offset0) + slope * static_cast<double>(t - t0);
    return t - origin_ns - static_cast<int64_t>(offset);
  };
  std::string out;
  out.reserve(events.size() * 160);
  StringOut w(&out);
  for (const Event& e : events) {
    const char* suffix = nullptr;
    if (e.kind == Kind::kCommand) {
      auto it = run_names.find(e.a[0]);
      if (it != run_names.end()) suffix = it->second;
    }
    const int64_t ts = job_ns(e.start_ns);
    WriteEvent(w, e, suffix, pid, ts, job_ns(e.end_ns) - ts);
  }
  if (count != nullptr) *count = events.size();
  if (dropped > 0) {
    w.Str("{\"name\":\"dropped\",\"ph\":\"M\",\"pid\":");
    w.Int(pid);
    w.Str(",\"tid\":1,\"args\":{\"events\":");
    w.Int(static_cast<int64_t>(dropped));
    w.Str(",\"why\":\"the ring (DISCO_TRACE_EVENTS) overwrote the oldest\"}},\n");
  }
  return out;
}

void WriteRankFile(const char* why) {
  Ring& r = TheRing();
  if (r.events == nullptr || g_rank_file_path[0] == '\0') return;
  if (g_rank_file_written.exchange(true)) return;
  detail::g_enabled.store(false);  // a consistent ring: nothing records from here on
  const uint64_t end = r.next.load();
  const uint64_t cap = r.mask + 1;
  const uint64_t begin = end > cap ? end - cap : 0;
  int64_t origin = INT64_MAX;
  for (uint64_t i = begin; i < end; ++i) {
    Event e;
    if (r.events[i & r.mask].Load(&e)) origin = std::min(origin, e.start_ns);
  }
  if (origin == INT64_MAX) origin = 0;
  // Not through a link, and not into a file another user made (O_TRUNC only once it is ours).
  // O_NONBLOCK: a FIFO planted there must not block this rank (and its watchdog) in open().
  int fd = open(g_rank_file_path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  const int open_errno = fd < 0 ? errno : 0;
  struct stat st {};
  const char* refused = nullptr;
  if (fd >= 0) {
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      refused = "not a regular file";
    } else if (st.st_uid != geteuid()) {
      refused = "another user's file";
    } else if (ftruncate(fd, 0) != 0) {
      refused = "cannot truncate it";
    }
    if (refused != nullptr) {
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    SafeWriter err(STDERR_FILENO);
    err.Str("disco: [rank ");
    err.Int(r.rank);
    err.Str("] DISCO_TRACE: cannot write ");
    err.Str(g_rank_file_path);
    if (refused != nullptr) {
      err.Str(" (");
      err.Str(refused);
      err.Str(")\n");
    } else {
      err.Str(" (open failed, errno ");
      err.Int(open_errno);
      err.Str(open_errno == ELOOP ? ": a symbolic link)\n" : ")\n");
    }
    return;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  {
    SafeWriter w(fd);
    w.Str("{\"traceEvents\":[\n");
    for (uint64_t i = begin; i < end; ++i) {
      Event e;
      if (!r.events[i & r.mask].Load(&e)) continue;  // being recorded
      WriteEvent(w, e, nullptr, r.rank, e.start_ns - origin, e.end_ns - e.start_ns);
    }
    w.Str("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
    w.Int(r.rank);
    w.Str(",\"tid\":0,\"args\":{\"name\":\"rank ");
    w.Int(r.rank);
    w.Str(" (its own file: clock not aligned)\"}}\n],\"displayTimeUnit\":\"ms\",");
    w.Str("\"otherData\":{\"disco_rank_file\":1,\"rank\":");
    w.Int(r.rank);
    w.Str(",\"dropped\":");
    w.Int(static_cast<int64_t>(begin));
    w.Str(",\"origin_ns\":");
    w.Int(origin);
    w.Str(",\"why\":\"");
    w.Escaped(why);
    w.Str("\"}}\n");
  }
  close(fd);
  SafeWriter err(STDERR_FILENO);
  err.Str("disco: [rank ");
  err.Int(r.rank);
  err.Str("] DISCO_TRACE: ");
  err.Int(static_cast<int64_t>(end - begin));
  err.Str(" events of this rank in ");
  err.Str(g_rank_file_path);
  err.Str(" (");
  err.Str(why);
  err.Str(")\n");
}

}  // namespace trace
}  // namespace disco
