#include "io/progress.h"

#include <disco/error.h>
#include <disco/log.h>
#include <disco/worker.h>

#include <chrono>
#include <cstdio>
#include <mutex>

#include "core/env.h"

namespace disco {
namespace io {
namespace progress {
namespace {

using Clock = std::chrono::steady_clock;

struct Run {
  std::mutex mu;
  bool active = false;
  std::string verb, path, shown;
  Clock::time_point start, last_line;
  int64_t bytes = 0, datasets = 0;
  bool printed = false;
};

Run& TheRun() {
  static Run* run = new Run();  // outlives every static destructor: builtins run until exit
  return *run;
}

// DISCO_PROGRESS_MS, read once: 0 turns the lines off. A bad value is a warning, not the load's
// failure (the lines are a courtesy): the default is used.
int64_t AfterMs() {
  static const int64_t ms = [] {
    try {
      return env::GetInt("DISCO_PROGRESS_MS", 0, int64_t{1} << 40);
    } catch (const Error&) {
      DISCO_LOG(WARN) << "DISCO_PROGRESS_MS='" << env::GetString("DISCO_PROGRESS_MS")
                      << "' is not a whole number of milliseconds from 0 to 2^40; progress lines "
                         "of loads and saves use 3000 ms";
      return int64_t{3000};
    }
  }();
  return ms;
}

bool Reports() {
  return AfterMs() > 0 && ThisWorker().worker_id == 0;  // worker 0 is rank 0's process
}

std::string SizeText(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  }
  return buf;
}

// h5::SaveTensors writes "<file>.partial.<pid>.<n>" and renames it: the lines name <file>.
std::string ShownName(const std::string& path) {
  const size_t at = path.rfind(".partial.");
  if (at == std::string::npos || at == 0) return path;
  const std::string rest = path.substr(at + 9);
  const size_t dot = rest.find('.');
  const auto digits = [](const std::string& t) {
    return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (dot == std::string::npos || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1))) {
    return path;
  }
  return path.substr(0, at);
}

void Line(const Run& r, const char* verb, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(r.bytes) / (1 << 20) / seconds : 0.0;
  std::fprintf(stderr, "disco: %s %s: %lld dataset%s, %s on worker 0 in %.1f s (%.0f MiB/s)\n",
               verb, r.shown.c_str(), static_cast<long long>(r.datasets),
               r.datasets == 1 ? "" : "s", SizeText(r.bytes).c_str(), seconds, rate);
  std::fflush(stderr);
}

}  // namespace

void Begin(const char* verb, const std::string& path) {
  if (!Reports()) return;
  Run& r = TheRun();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.active && r.verb == verb && r.path == path) return;
  r.active = true;
  r.verb = verb;
  r.path = path;
  r.shown = ShownName(path);
  r.start = r.last_line = Clock::now();
  r.bytes = r.datasets = 0;
  r.printed = false;
}

void Done(int64_t bytes) {
  if (!Reports()) return;
  Run& r = TheRun();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.active) return;
  r.bytes += bytes;
  r.datasets += 1;
  const Clock::time_point now = Clock::now();
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  if (ms(now - r.start) < AfterMs()) return;
  if (r.printed && ms(now - r.last_line) < 2000) return;
  Line(r, r.verb.c_str(), std::chrono::duration<double>(now - r.start).count());
  r.printed = true;
  r.last_line = now;
}

void End(const std::string& path, const std::string& shown) {
  if (!Reports()) return;
  Run& r = TheRun();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.active || r.path != path) return;
  r.active = false;
  const double seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
  if (!r.printed && seconds * 1000 < static_cast<double>(AfterMs())) return;
  if (!shown.empty()) r.shown = shown;
  Line(r, r.verb == "loading" ? "loaded" : "saved", seconds);
}

}  // namespace progress
}  // namespace io
}  // namespace disco
