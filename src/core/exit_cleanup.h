// Files that must not outlive the process however it ends: a served job's generated key file
// (remote/key.h) goes with the job even when the launcher ends it by SIGTERM/SIGINT, when a fatal
// error aborts it (disco::Main's FatalAbort), or when the watchdog ends it (_Exit). Those paths run
// no destructors, so they call RemoveRegisteredFiles, which is async-signal-safe (a fixed table of
// paths and unlink). SIGKILL cannot be caught: every rank of a served job registers its key file
// (the server tells them), so the first rank a launcher's signal ends removes it before the
// launcher can SIGKILL the others (MPICH's hydra does so at the first rank's exit).
#ifndef DISCO_CORE_EXIT_CLEANUP_H_
#define DISCO_CORE_EXIT_CLEANUP_H_

#include <string>

namespace disco {
namespace exit_cleanup {

/// Registers `path` for removal on an abnormal exit; with `content`, it is removed only while it
/// holds exactly those bytes (a file that a later job wrote at the same path stays). False when it
/// does not fit (a path of 4096 bytes or more, content of 256 or more, or 8 registered already).
bool RegisterFile(const std::string& path, const std::string& content = std::string());
/// Forgets `path` (the caller removed it itself, or keeps it).
void UnregisterFile(const std::string& path);
/// Unlinks every registered file (async-signal-safe; also safe to call more than once).
void RemoveRegisteredFiles();

}  // namespace exit_cleanup
}  // namespace disco

#endif  // DISCO_CORE_EXIT_CLEANUP_H_
