// The watchdog and the flight recorder of one rank (docs/errors.md, DISCO_TIMEOUT).
//
// Every function a rank runs for a command (Worker::CallPacked, on workers and on worker 0 in the
// controller's process) is bracketed by Begin/End, and so is every other command a worker runs
// (but parking and shutdown, which are waits). The flight recorder keeps the last kFlightRecords
// of them: sequence number, action, function, duration. A watchdog thread checks
// the running command every 50 ms: past DISCO_TIMEOUT seconds it prints one line (the command,
// its sequence number, the elapsed time, and the peer a collective is waiting for when the
// transport knows it), dumps the flight recorder, waits a second so that the other stuck ranks
// print theirs, and ends the process, which makes the launcher end the job. A rank the launcher
// terminates (SIGTERM; or SIGINT, where the program does not handle it) first removes the files
// registered with core/exit_cleanup.h (a served job's key file) and prints one line saying what it
// was doing; so do a watchdog timeout and a liveness failure before they end the process. SIGUSR1
// dumps the flight recorder of a running job; so does a fatal error. A watchdog that fires first
// pings every rank's watchdog (UDP) and names the ranks that answer nothing within a second.
//
// The parts, each with its own state: watchdog.cc (the thread: Start, Stop, its loop, the timeout
// line), session/flight_recorder.h (Begin, End, Step, MarkCollective, Dump), session/signals.h
// (SIGTERM/SIGINT, SIGUSR1), session/liveness_server.h (the UDP socket: pings, liveness checks;
// LocalHost, LocalPingAddress, SetPingAddresses, ShuttingDown), session/hang_gather.h (every
// rank's state and the hang verdict) and session/controller_probe.h (ControllerRunning,
// SetStackDumper). Functions a signal handler may run are tagged `// signal-safe` or live in a
// namespace signal_safe, apart from the code that allocates.
#ifndef DISCO_SESSION_WATCHDOG_H_
#define DISCO_SESSION_WATCHDOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "session/liveness.h"

namespace disco {
namespace watchdog {

constexpr int kFlightRecords = 32;

/// Where a rank's watchdog answers liveness pings (UDP): when a watchdog fires, it pings every
/// rank and names those that do not answer within a second (a node that died or went off the
/// network), since MPI itself cannot say which ranks went silent. Every datagram is authenticated
/// (session/liveness.h) and must come from the sender's address and port.
///
/// The socket is bound to 127.0.0.1 when every rank runs on this host (no other host can reach
/// it); otherwise to the address of this host that the kernel routes to the first rank on another
/// host (the interface the job's traffic to other nodes takes), and to every interface
/// (INADDR_ANY) only when no such address is found.
struct PingAddress {
  static constexpr int kMaxAddresses = 4;
  uint32_t ipv4[kMaxAddresses] = {0};  // the host's IPv4 addresses, network byte order; 0: none
  uint32_t bound = 0;                  // the socket's address, network byte order; 0: every one
  uint16_t port = 0;                   // network byte order; 0: no socket
  char host[64] = {0};
};

/// Starts this rank's watchdog thread (every rank, after MPI_Init; again after Stop for a new job
/// of the same process). `timeout_s` <= 0 only
/// serves SIGUSR1 and the SIGTERM/SIGINT line (no liveness socket). `secret` is the job's, the
/// same on every rank (rank 0 draws it, MPI carries it); `hosts` holds every rank's LocalHost(),
/// in rank order: the liveness socket is bound to the address that reaches them (above).
void Start(int rank, int world_size, double timeout_s, const liveness::JobSecret& secret,
           const std::vector<PingAddress>& hosts);
/// Stops the thread (before MPI_Finalize) and gives back the signals it handled, so that a
/// process that goes on after its job ends the usual way on SIGTERM; idempotent.
void Stop();

/// The rank starts running `function` for command #`seq` (`action` names the command).
void Begin(uint64_t seq, const char* action, const std::string& function);
/// The running function returned (or threw).
void End();
/// Inside a graph replay begun with Begin: the replay is at call `index`, `label` ("graph 3 call
/// 5 'my.fn'", alive while the graph is) names it in the watchdog's line.
void Step(int64_t index, const char* label);
/// The function now running (since the last Begin) is a collective: a timeout with no peer known
/// then says the ranks that never arrived are not known, rather than that the function runs on.
void MarkCollective();

/// Prints the flight recorder to the log (stderr), headed by `why`.
void Dump(const std::string& why);

/// Rank 0's controller starts running on the calling thread (`running`), or has returned. While
/// it runs and no command does, the watchdog samples that thread's native stack now and then:
/// a controller that stays inside an MPI call of its own (one the workers, waiting in disco's
/// command loop, never join) past DISCO_TIMEOUT ends the job, naming the call. A controller that
/// computes, or waits inside a disco call, is left alone.
void ControllerRunning(bool running);
/// `dump` prints the stacks of an interpreter running in this process (Python's) to stderr,
/// without locks; the watchdog calls it on its own thread before it ends the job. nullptr: none.
void SetStackDumper(void (*dump)());

/// The job is ending normally: no more liveness checks (ranks that finished stop answering).
void ShuttingDown();
/// This host's name and IPv4 addresses (no socket yet), for Start's `hosts`.
PingAddress LocalHost();
/// This rank's address (after Start).
PingAddress LocalPingAddress();
/// Every rank's address, in rank order (all ranks exchange them after Start).
void SetPingAddresses(const std::vector<PingAddress>& all);

}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_WATCHDOG_H_
