// The hang verdict of the watchdog (session/watchdog.h): from what every rank was doing when a
// watchdog fired (the states rank 0 gathers over the liveness channel, session/liveness.h), the
// rank(s) that hold the others up and why, in one line.
//
// The rules, in order, for each rank that is a culprit:
//   - it answered no state request: dead, stopped, or its node is off the network;
//   - its command thread is inside an MPI call made from outside disco (a worker function's, or
//     the controller's own, such as mpi4py's COMM_WORLD.Barrier()), which no other rank joins;
//   - it runs a command that is no collective, for longer than the others wait: its own function
//     (or HDF5 read, ...) does not return;
//   - ranks wait in a collective for it (the transport named it), or it is missing from the
//     collective the others wait in: it finished that command without joining (or runs another
//     command, or never started it);
//   - ranks that wait for each other in a cycle: a deadlock.
// Every rank reached in a collective with no rank missing means the collective itself does not
// complete (the transport, the network); the line says so rather than blaming a rank.
#ifndef DISCO_SESSION_HANG_H_
#define DISCO_SESSION_HANG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "session/liveness.h"

namespace disco {
namespace hang {

/// One rank as the watchdog that gathers found it.
struct RankView {
  bool answered = false;  // its state arrived (a rank's own state always does)
  std::string host;
  liveness::RankState state;
};

/// The verdict: "hang culprit: rank 3 (node1): ..." (or "hang culprits: ..."), with the ranks that
/// wait for the culprit(s); one line, no trailing newline.
std::string Verdict(const std::vector<RankView>& ranks);

/// For a worker `rank` whose watchdog fired while rank 0 answers nothing: the lowest worker below
/// it whose watchdog fires too (busy with a command that has run, or within `margin_ms` will have
/// run, `timeout_ms`), which prints the job's one verdict; -1 when this rank prints it. The margin
/// covers watchdogs that fire a poll apart, and commands that reached the ranks a moment apart.
/// `*wait_ms` is how long that worker may take to fire.
int VerdictPrinterBelow(const std::vector<RankView>& ranks, int rank, int64_t timeout_ms,
                        int64_t margin_ms, int64_t* wait_ms);

}  // namespace hang
}  // namespace disco

#endif  // DISCO_SESSION_HANG_H_
