/// \file disco/log.h
/// \brief Leveled logging filtered by `DISCO_LOG_LEVEL` (error|warn|info|debug; default error).
///
/// Every line carries the `[rank R/N host] ` prefix. `DISCO_LOG(INFO) << "..."` builds the line
/// only when the level is enabled.
#ifndef DISCO_LOG_H_
#define DISCO_LOG_H_

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
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage() { LogLine(level_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
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

#endif  // DISCO_LOG_H_
