// Files a program keeps between runs, or must not leave behind when it ends badly.
#ifndef DISCO_FILES_H_
#define DISCO_FILES_H_

#include <string>

namespace disco {

/// A directory in which only this user can create names: `$TMPDIR/disco-u<uid>` (`/tmp/...` when
/// TMPDIR is unset), made with mode 0700 when missing. A program keeps its default files there, so
/// that no other user of a shared /tmp can plant or swap them. Throws ValueError naming the
/// directory when it is a symbolic link or not a directory, belongs to another user, or others can
/// write into it.
std::string PrivateTempDir();

/// Registers `path` (a file, or a directory with the files in it: one level) for removal if the
/// process ends without running destructors: SIGTERM or SIGINT from the launcher, a fatal error,
/// the watchdog. False when it does not fit (8 paths at once, each under 4096 bytes). SIGKILL
/// cannot be caught.
bool RemoveOnAbnormalExit(const std::string& path);
/// Forgets `path` (the program removed or kept it itself).
void ForgetOnAbnormalExit(const std::string& path);

}  // namespace disco

#endif  // DISCO_FILES_H_
