/// \file disco/log.h
/// \brief Leveled logging filtered by `DISCO_LOG_LEVEL` (error|warn|info|debug; default warn, so
/// warnings are seen unless a user turns them off, as in NCCL, PyTorch and Open MPI).
///
/// Every line carries the `[rank R/N host] ` prefix. `DISCO_LOG(INFO) << "..."` builds the line
/// only when the level is enabled. A warning that may repeat uses `DISCO_LOG_EVERY_N_SEC(WARN, s)`:
/// at most one line per `s` seconds from that place, which counts the lines it held back.
#ifndef DISCO_LOG_H_
#define DISCO_LOG_H_

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

namespace disco {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// The level in force (read from `DISCO_LOG_LEVEL` on first use).
LogLevel GetLogLevel();
/// Overrides the level for this process.
void SetLogLevel(LogLevel level);
/// Writes one prefixed line to stderr, whole, with a single write(2).
void LogLine(LogLevel level, const std::string& msg);

namespace detail {
class LogMessage {
 public:
  explicit LogMessage(LogLevel level, uint64_t held_back = 0, double period_s = 0)
      : level_(level), held_back_(held_back), period_s_(period_s) {}
  ~LogMessage() {
    if (held_back_ > 0) {
      stream_ << " (" << held_back_ << " more such line" << (held_back_ == 1 ? "" : "s")
              << " in the last " << period_s_ << " s not shown)";
    }
    LogLine(level_, stream_.str());
  }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  uint64_t held_back_;
  double period_s_;
  std::ostringstream stream_;
};

/// One call site's budget: a line per period; the lines held back in between are counted.
class LogRateLimit {
 public:
  explicit LogRateLimit(double period_s) : period_ns_(static_cast<int64_t>(period_s * 1e9)) {}
  /// True when a line may be written now; `*held_back` gets the lines held back since the last.
  bool Allow(uint64_t* held_back);

 private:
  const int64_t period_ns_;
  std::atomic<int64_t> next_ns_{0};
  std::atomic<uint64_t> held_back_{0};
};
}  // namespace detail
}  // namespace disco

#define DISCO_LOG_LEVEL_ERROR ::disco::LogLevel::kError
#define DISCO_LOG_LEVEL_WARN ::disco::LogLevel::kWarn
#define DISCO_LOG_LEVEL_INFO ::disco::LogLevel::kInfo
#define DISCO_LOG_LEVEL_DEBUG ::disco::LogLevel::kDebug

/// `DISCO_LOG(INFO) << ...;` — one line, prefixed, only when enabled.
#define DISCO_LOG(severity)                                                                      \
  if (static_cast<int>(DISCO_LOG_LEVEL_##severity) > static_cast<int>(::disco::GetLogLevel())) { \
  } else                                                                                         \
    ::disco::detail::LogMessage(DISCO_LOG_LEVEL_##severity).stream()

/// `DISCO_LOG_EVERY_N_SEC(WARN, 10) << ...;` — as DISCO_LOG, at most once per `seconds` (a
/// constant) from this call site; a line says how many were held back before it.
#define DISCO_LOG_EVERY_N_SEC(severity, seconds)                                                 \
  if (static_cast<int>(DISCO_LOG_LEVEL_##severity) > static_cast<int>(::disco::GetLogLevel())) { \
  } else if (uint64_t disco_log_held_back_ = 0;                                                  \
             !DISCO_DETAIL_RATE_LIMIT_(seconds).Allow(&disco_log_held_back_)) {                  \
  } else                                                                                         \
    ::disco::detail::LogMessage(DISCO_LOG_LEVEL_##severity, disco_log_held_back_, (seconds))     \
        .stream()
// The call site's own LogRateLimit (a static inside a lambda that is unique to the site).
#define DISCO_DETAIL_RATE_LIMIT_(seconds)                \
  ([]() -> ::disco::detail::LogRateLimit& {              \
    static ::disco::detail::LogRateLimit limit(seconds); \
    return limit;                                        \
  }())

#endif  // DISCO_LOG_H_
