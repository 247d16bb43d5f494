// The watchdog's signals (session/watchdog.h): SIGTERM and SIGINT print one line saying what the
// rank was doing (after removing the files of core/exit_cleanup.h), SIGUSR1 asks the watchdog's
// thread for a flight recorder dump, in front of whatever handled SIGUSR1 before. The handlers
// are async-signal-safe; what they share with the rest is lock-free.
#ifndef DISCO_SESSION_SIGNALS_H_
#define DISCO_SESSION_SIGNALS_H_

namespace disco {
namespace watchdog {

/// Installs the SIGTERM/SIGINT line (unless the program handles them itself: Python, SIGINT) and
/// the SIGUSR1 dump request; `rank` of `world_size` heads the line.
void InstallSignals(int rank, int world_size);
/// Ours in front of whatever handles SIGUSR1 now, which still gets every signal (a default action,
/// which would end the process, or an ignored signal is not passed on).
void InstallDumpHandler();
/// Whether SIGUSR1 asked for a dump since the last call (clears the request).
bool TakeDumpRequest();
/// Gives back the SIGTERM/SIGINT and SIGUSR1 handling (SIGUSR1: the action that was there before).
void StopSignals();

}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_SIGNALS_H_
