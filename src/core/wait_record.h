// Inside a collective, the peer this rank waits for: the data plane (src/ccl) records it when a
// wait grows long, the watchdog (src/session/watchdog.cc) names it when a command overruns. Kept
// here, below both.
#ifndef DISCO_CORE_WAIT_RECORD_H_
#define DISCO_CORE_WAIT_RECORD_H_

namespace disco {
namespace wait_record {

/// This rank now waits for `peer` (a world rank; -1: none or unknown).
void WaitingFor(int peer);
/// The peer recorded last, or -1.
int Peer();
/// No wait (a new command begins).
void Clear();

}  // namespace wait_record
}  // namespace disco

#endif  // DISCO_CORE_WAIT_RECORD_H_
