#include "core/trace.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace disco {
namespace trace {
namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

struct Ring {
  std::unique_ptr<Event[]> events;
  uint64_t mask = 0;
  std::atomic<uint64_t> next{0};
  std::string path;
  int rank = 0;
  std::once_flag rank_file_once;
};
Ring& TheRing() {
  static Ring* ring = new Ring;  // never destroyed: a fatal path may write it during exit
  return *ring;
}

void AppendEscaped(std::string* out, const char* s) {
  for (; *s != '\0'; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20 || c >= 0x7f) {  // control bytes, and bytes of cut UTF-8: escaped
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

void AppendF(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void AppendF(std::string* out, const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > 0) out->append(buf, static_cast<size_t>(std::min(n, static_cast<int>(sizeof buf) - 1)));
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
    r.events = std::make_unique<Event[]>(n);
    r.mask = n - 1;
  }
  r.next.store(0);
  r.path = path;
  r.rank = rank;
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
  Event& e = r.events[r.next.fetch_add(1, std::memory_order_relaxed) & r.mask];
  e.start_ns = start_ns;
  e.end_ns = end_ns;
  e.a[0] = a0;
  e.a[1] = a1;
  e.a[2] = a2;
  e.kind = kind;
  const size_t n = std::min(name_len, kNameBytes - 1);
  std::memcpy(e.name, name, n);
  e.name[n] = '\0';
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
  for (uint64_t i = begin; i < end && n < max; ++i) out[n++] = r.events[i & r.mask];
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
  auto job_us = [&](int64_t t) {
    const double offset = static_cast<double>(offset0) + slope * static_cast<double>(t - t0);
    return (static_cast<double>(t - origin_ns) - offset) / 1e3;
  };
  std::string out;
  out.reserve(events.size() * 160);
  for (const Event& e : events) {
    const double ts = job_us(e.start_ns);
    const double dur = std::max(0.0, job_us(e.end_ns) - ts);
    std::string name = e.name;
    if (e.kind == Kind::kCommand) {
      auto it = run_names.find(e.a[0]);
      if (it != run_names.end()) name += std::string(" ") + it->second;
    }
    out += "{\"name\":\"";
    AppendEscaped(&out, name.c_str());
    AppendF(&out, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,",
            KindName(e.kind), pid, TidOf(e.kind), ts, dur);
    switch (e.kind) {
      case Kind::kCommand:
        AppendF(&out, "\"args\":{\"seq\":%" PRId64 ",\"frame_bytes\":%" PRId64 "}", e.a[0], e.a[1]);
        break;
      case Kind::kRun:
        AppendF(&out, "\"args\":{\"seq\":%" PRId64 "}", e.a[0]);
        break;
      case Kind::kCollective:
        AppendF(&out, "\"args\":{\"bytes\":%" PRId64 ",\"wait_us\":%.3f}", e.a[0],
                static_cast<double>(e.a[1]) / 1e3);
        break;
      case Kind::kH5Read:
      case Kind::kH5Write:
        AppendF(&out, "\"args\":{\"bytes\":%" PRId64 ",\"datasets\":%" PRId64 ",\"MB_per_s\":%.1f}",
                e.a[0], e.a[1], dur > 0 ? static_cast<double>(e.a[0]) / dur : 0.0);
        break;
      case Kind::kSync:
        AppendF(&out, "\"args\":{\"worker\":%" PRId64 "}", e.a[0]);
        break;
      case Kind::kReplay:
        AppendF(&out, "\"args\":{\"graph\":%" PRId64 ",\"calls\":%" PRId64 "}", e.a[0], e.a[1]);
        break;
      case Kind::kRemote:
        AppendF(&out, "\"args\":{\"request_bytes\":%" PRId64 ",\"reply_bytes\":%" PRId64 "}",
                e.a[0], e.a[1]);
        break;
      default:
        out += "\"args\":{}";
    }
    out += "},\n";
  }
  if (count != nullptr) *count = events.size();
  if (dropped > 0) {
    AppendF(&out,
            "{\"name\":\"dropped\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"events\":%" PRIu64
            ",\"why\":\"the ring (DISCO_TRACE_EVENTS) overwrote the oldest\"}},\n",
            pid, dropped);
  }
  return out;
}

void WriteRankFile(const char* why) {
  Ring& r = TheRing();
  if (r.events == nullptr || r.path.empty()) return;
  std::call_once(r.rank_file_once, [&] {
    try {
      detail::g_enabled.store(false);  // a consistent snapshot: nothing records from here on
      std::vector<Event> first(1);
      uint64_t dropped = 0;
      int64_t origin = 0;
      if (Snapshot(first.data(), 1, &dropped) == 1) origin = first[0].start_ns;
      uint64_t count = 0;
      std::string body = "{\"traceEvents\":[\n";
      body += EventsJson(0, 0, 0, 0, origin, r.rank, &count);
      AppendF(&body,
              "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
              "\"rank %d (this rank's file, unaligned clock)\"}}\n],\n",
              r.rank, r.rank);
      body += "\"displayTimeUnit\":\"ms\",\"otherData\":{\"disco_rank_file\":1,\"rank\":";
      AppendF(&body, "%d,\"origin_ns\":%" PRId64 ",\"why\":\"", r.rank, origin);
      AppendEscaped(&body, why);
      body += "\"}}\n";
      const std::string path = r.path + ".rank" + std::to_string(r.rank) + ".json";
      const int fd =
          open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd < 0) {
        std::fprintf(stderr, "disco: [rank %d] DISCO_TRACE: cannot write %s: %s\n", r.rank,
                     path.c_str(), std::strerror(errno));
        return;
      }
      size_t done = 0;
      while (done < body.size()) {
        const ssize_t w = write(fd, body.data() + done, body.size() - done);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
      close(fd);
      std::fprintf(stderr,
                   "disco: [rank %d] DISCO_TRACE: %" PRIu64 " events of this rank in %s (%s)\n",
                   r.rank, count, path.c_str(), why);
    } catch (const std::exception&) {
    }
  });
}

}  // namespace trace
}  // namespace disco
