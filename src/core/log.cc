#include <disco/error.h>
#include <disco/log.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "core/env.h"
#include "core/process_info.h"
#include "core/text.h"

namespace disco {
namespace {

std::atomic<int>& LevelStorage() {
  static std::atomic<int> level{-1};
  return level;
}

int ParseLevel(const std::string& text) {
  if (text == "error") return static_cast<int>(LogLevel::kError);
  if (text == "warn" || text == "warning") return static_cast<int>(LogLevel::kWarn);
  if (text == "info") return static_cast<int>(LogLevel::kInfo);
  if (text == "debug") return static_cast<int>(LogLevel::kDebug);
  // A bad level must not make logging itself throw; say so once and keep the default.
  std::string msg = detail::RankPrefix() + "warn: DISCO_LOG_LEVEL='" + text +
                    "' is not one of error, warn, info, debug; using warn\n";
  ssize_t ignored = write(STDERR_FILENO, msg.data(), msg.size());
  (void)ignored;
  return static_cast<int>(LogLevel::kWarn);
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

void WriteAll(int fd, const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// DISCO_LOG_FILE with %r (rank), %h (host) and %p (pid) substituted; "" when unset.
std::string LogFilePath() {
  std::string pattern = env::GetString("DISCO_LOG_FILE");
  if (pattern.empty()) return "";
  const ProcessInfo& info = GetProcessInfo();
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'r')
        out += info.rank >= 0 ? std::to_string(info.rank) : "-";
      else if (c == 'h')
        out += info.host.empty() ? HostName() : info.host;
      else if (c == 'p')
        out += std::to_string(getpid());
      else if (c == '%')
        out += '%';
      else
        (out += '%') += c;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// The log file's descriptor, or -1 for stderr. Opened on first use, and again once the rank is
// known if it was opened before (a name with %r must not collect every rank's early lines).
int LogFd() {
  static std::mutex mu;
  static int fd = -1;
  static bool tried = false;
  static int opened_rank = -1;
  std::lock_guard<std::mutex> lock(mu);
  int rank = GetProcessInfo().rank;
  if (tried && !(opened_rank < 0 && rank >= 0)) return fd;
  tried = true;
  opened_rank = rank;
  std::string path = LogFilePath();
  if (path.empty()) return fd = -1;
  int nfd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (nfd < 0) {
    WriteAll(STDERR_FILENO, detail::RankPrefix() + "warn: cannot open DISCO_LOG_FILE '" + path +
                                "': " + std::strerror(errno) + "; logging to stderr\n");
  } else {
    if (fd >= 0) close(fd);
    fd = nfd;
  }
  return fd;
}

}  // namespace

LogLevel GetLogLevel() {
  int level = LevelStorage().load(std::memory_order_relaxed);
  if (level < 0) {
    level = ParseLevel(env::GetString("DISCO_LOG_LEVEL"));
    LevelStorage().store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void SetLogLevel(LogLevel level) { LevelStorage().store(static_cast<int>(level)); }

namespace detail {
bool LogRateLimit::Allow(uint64_t* held_back) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  int64_t next = next_ns_.load(std::memory_order_relaxed);
  if (now < next || !next_ns_.compare_exchange_strong(next, now + period_ns_)) {
    held_back_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *held_back = held_back_.exchange(0, std::memory_order_relaxed);
  return true;
}
}  // namespace detail

void LogLine(LogLevel level, const std::string& msg) {
  std::string line = detail::RankPrefix();
  line += LevelName(level);
  line += ": ";
  // Control characters other than newline and tab (terminal escapes from a name a client or a
  // file supplied) are written as \xNN, so a log line can neither drive a terminal nor read as
  // binary; so are the bytes of ill-formed UTF-8, while well-formed UTF-8 stays readable.
  line += text::ForLogText(msg);
  if (line.empty() || line.back() != '\n') line += '\n';
  // One write(2) per line, so lines from many ranks sharing a terminal do not interleave. With a
  // log file, errors still reach stderr too: a failing job must say why where the user looks.
  int fd = LogFd();
  if (fd >= 0) WriteAll(fd, line);
  if (fd < 0 || level == LogLevel::kError) WriteAll(STDERR_FILENO, line);
}

}  // namespace disco
