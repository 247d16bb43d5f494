// Files that must not outlive the process however it ends: a served job's generated key file
// (remote/key.h) goes with the job even when the launcher ends it by SIGTERM/SIGINT, when a fatal
// error aborts it (disco::Main's FatalAbort), or when the watchdog ends it (_Exit). Those paths run
// no destructors, so they call RemoveRegisteredFiles, which is async-signal-safe (a fixed table of
// paths and unlink). SIGKILL cannot be caught: a file can still be left behind then.
#ifndef DISCO_CORE_EXIT_CLEANUP_H_
#define DISCO_CORE_EXIT_CLEANUP_H_

#include <string>

namespace disco {
namespace exit_cleanup {

/// Registers `path` for removal on an abnormal exit; false when it does not fit (a path of 4096
/// bytes or more, or 8 registered already).
bool RegisterFile(const std::string& path);
/// Forgets `path` (the caller removed it itself, or keeps it).
void UnregisterFile(const std::string& path);
/// Unlinks every registered file (async-signal-safe; also safe to call more than once).
void RemoveRegisteredFiles();

}  // namespace exit_cleanup
}  // namespace disco

#endif  // DISCO_CORE_EXIT_CLEANUP_H_
