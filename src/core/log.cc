#include <disco/error.h>
#include <disco/log.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/env.h"

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
  // A bad level must not make logging itself throw; say so once and keep errors only.
  std::string msg = detail::RankPrefix() + "warn: DISCO_LOG_LEVEL='" + text +
                    "' is not one of error, warn, info, debug; using error\n";
  ssize_t ignored = write(STDERR_FILENO, msg.data(), msg.size());
  (void)ignored;
  return static_cast<int>(LogLevel::kError);
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

void LogLine(LogLevel level, const std::string& msg) {
  std::string line = detail::RankPrefix();
  line += LevelName(level);
  line += ": ";
  line += msg;
  if (line.empty() || line.back() != '\n') line += '\n';
  // One write(2) per line, so lines from many ranks sharing a terminal do not interleave.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace disco
