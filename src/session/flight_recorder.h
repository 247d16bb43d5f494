// The flight recorder of one rank (session/watchdog.h: Begin, End, Step, MarkCollective, Dump):
// the last kFlightRecords commands the rank ran, in seqlocked records (session/flight_record.h),
// and the command running now. Only the thread running commands writes it (no lock: Begin/End sit
// on every call's path); the watchdog's thread and signal handlers read it. Every reader below is
// async-signal-safe (tagged `// signal-safe`): lock-free loads, no allocation.
#ifndef DISCO_SESSION_FLIGHT_RECORDER_H_
#define DISCO_SESSION_FLIGHT_RECORDER_H_

#include <cstdint>
#include <string>

#include "session/flight_record.h"

namespace disco {
namespace watchdog {
namespace recorder {

/// Commands recorded so far (Begin calls); the last one's record is written.
uint64_t Count();  // signal-safe
/// Whether a command runs now (between Begin and End).
bool Busy();  // signal-safe
/// When the running command began (NowNs).
int64_t BusySinceNs();  // signal-safe
/// A copy of the latest record (Count() > 0), marked torn when it was being written.
CommandRecord Last();  // signal-safe
/// The call a replay is at (Step), or nullptr.
const char* StepLabel();  // signal-safe
/// Whether the running function was marked a collective (MarkCollective).
bool MarkedCollective();  // signal-safe

/// The monotonic clock the records use: mpi::NowNs's, read at a kernel tick's resolution (1-4 ms,
/// never ahead of mpi::NowNs) unless UseFineClock(true).
int64_t NowNs();  // signal-safe
/// Whether the records read the clock at full resolution (a job with a trace, DISCO_TRACE, does);
/// set once as the job starts, before any command.
void UseFineClock(bool fine);

/// "command #7 (call_packed 'my.fn')": a record for a log line (allocates).
std::string Describe(const CommandRecord& r);

}  // namespace recorder
}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_FLIGHT_RECORDER_H_
