// The watchdog's liveness server (session/watchdog.h: PingAddress): this rank's UDP socket, which
// the watchdog thread serves, and what it knows of every other rank's watchdog. The datagrams'
// format and authentication are session/liveness.h's. A watchdog that fires pings every rank and
// names those that answer nothing within a second; a rank that waits checks now and then that the
// ranks it watches still answer (CheckLiveness); state requests and answers carry each rank's
// state for the hang verdict (session/hang_gather.h). All but the setters of watchdog.h run on the
// watchdog's thread.
#ifndef DISCO_SESSION_LIVENESS_SERVER_H_
#define DISCO_SESSION_LIVENESS_SERVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "session/liveness.h"
#include "session/watchdog.h"

namespace disco {
namespace watchdog {
namespace server {

/// A new job: this rank, the job's size and DISCO_TIMEOUT; forgets the last job's peers, counters
/// and checks, closes its socket, and finds this host's addresses.
void Reset(int rank, int world_size, double timeout_s);
/// Opens the liveness socket, keyed with the job's `secret`, bound to the address that reaches
/// `hosts` (every rank's LocalHost(), in rank order).
void Open(const liveness::JobSecret& secret, const std::vector<PingAddress>& hosts);
/// The socket (-1: none).
int Fd();
int Rank();
int WorldSize();
/// This rank's address.
const PingAddress& Self();
/// Whether the job is ending normally (ShuttingDown).
bool ShuttingDownNow();
/// The thread's copy of every rank's address, once SetPingAddresses has run.
bool PeersReady();
/// Every rank's address (after PeersReady).
const std::vector<PingAddress>& Known();

/// Takes every datagram waiting on the socket, in batches, up to a bound per call.
void ServePings();
/// At most one line per 10 s about datagrams that were dropped, with their counts.
void WarnAboutDrops(int64_t now);
/// Sends rank `r` a datagram of `kind` (a ping, a state request, a fired notice) at each of its
/// addresses, and remembers what awaits an answer.
void SendTo(int r, uint8_t kind, int64_t now);
/// "ranks 2, 3 (node2)" of those not alive (and counted in `answered`, when given).
std::string Name(const std::vector<PingAddress>& peers, const std::vector<bool>& alive,
                 const std::vector<bool>* answered, int* count);
/// Pings every other rank for up to a second: "ranks 2, 3 (node2) answered no liveness ping ...",
/// or "" (all answered, or no addresses to ping).
std::string SilentRanks(std::vector<bool>* alive_out = nullptr);
/// Seconds between liveness checks: DISCO_TIMEOUT / 3, within 1 to 10 s, so that a dead rank or
/// node ends the job within DISCO_TIMEOUT even where nothing waits on it in a command.
double CheckPeriod(double timeout_s);
/// The liveness check of a rank that waits; ends the job when a rank it watches is dead.
void CheckLiveness();
/// The first rank that told rank 0 its watchdog fired (-1: none).
int FiredBy();

/// A round of state requests (hang_gather.cc): forgets the last round's answers.
void BeginStateRound();
/// Whether rank `r` answered this round, and its answer.
bool GotState(int r);
const liveness::RankState& StateOf(int r);
/// Forgets the requests still unanswered.
void EndStateRound();

}  // namespace server
}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_LIVENESS_SERVER_H_
