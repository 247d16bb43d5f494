// The gathering of the hang verdict (session/hang.h) by a watchdog that fired: this rank's own
// state, every other rank's over the liveness channel (session/liveness_server.h), the verdict
// line, and the end of the job. On the watchdog's thread only; all of it allocates.
#ifndef DISCO_SESSION_HANG_GATHER_H_
#define DISCO_SESSION_HANG_GATHER_H_

#include <vector>

#include "session/hang.h"
#include "session/liveness.h"

namespace disco {
namespace watchdog {

/// This rank's state for a hang verdict: its command, where its thread is (a stack sample).
liveness::RankState OwnState();
/// Every rank's state: this rank's own, and each other's as it answers a state request within
/// 1.5 s (a rank that answers nothing is marked so).
std::vector<hang::RankView> Gather();
/// Gathers every rank's state and prints the hang verdict. Returns whether some rank answered
/// nothing.
bool PrintVerdict();
/// A worker whose watchdog fired while rank 0 answers nothing: gathers and prints the verdict
/// itself, unless a lower worker's command ran past `timeout_s` too. Returns whether some rank
/// answered nothing.
bool WorkerVerdict(double timeout_s);
/// A worker whose liveness check found rank 0 dead: gathers every rank's state and prints the
/// verdict, unless a lower worker answers (it watches rank 0 too and gives the job's one verdict);
/// then this rank prints it only when the job is still there `wait_s` later.
void DeadControllerVerdict(double wait_s);
/// A worker whose watchdog fired tells rank 0 and waits for it to end the job; 4 s later it prints
/// the verdict itself and ends the job.
void AwaitRankZeroVerdict();
/// Rank 0, told by rank `rank` that its watchdog fired: every rank's state, the verdict, the end
/// of the job.
[[noreturn]] void FireOnNotice(int rank, double timeout_s);
/// The end of a job whose watchdog fired (this node's launcher too when `silent_ranks`).
[[noreturn]] void EndJob(bool silent_ranks);

}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_HANG_GATHER_H_
