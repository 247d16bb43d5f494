// The watchdog and the flight recorder of one rank (DESIGN.md §4, DISCO_TIMEOUT).
//
// Every function a rank runs for a command (Worker::CallPacked, on workers and on worker 0 in the
// controller's process) is bracketed by Begin/End, and so is every other command a worker runs
// (but parking and shutdown, which are waits). The flight recorder keeps the last kFlightRecords
// of them: sequence number, action, function, duration. A watchdog thread checks
// the running command every 50 ms: past DISCO_TIMEOUT seconds it prints one line (the command,
// its sequence number, the elapsed time, and the peer a collective is waiting for when the
// transport knows it), dumps the flight recorder, waits a second so that the other stuck ranks
// print theirs, and ends the process, which makes the launcher end the job. A rank the launcher
// terminates (SIGTERM) first prints one line saying what it was doing. SIGUSR1 dumps the flight
// recorder of a running job; so does a fatal error. A watchdog that fires first pings every rank's
// watchdog (UDP) and names the ranks that answer nothing within a second.
#ifndef DISCO_SESSION_WATCHDOG_H_
#define DISCO_SESSION_WATCHDOG_H_

#include <cstdint>
#include <string>
#include <vector>

namespace disco {
namespace watchdog {

constexpr int kFlightRecords = 32;

/// Starts this rank's watchdog thread (every rank, after MPI_Init; again after Stop for a new
/// job of the same process). `timeout_s` <= 0 only serves SIGUSR1 and the SIGTERM line.
void Start(int rank, int world_size, double timeout_s);
/// Stops the thread (before MPI_Finalize) and gives back the signals it handled, so that a
/// process that goes on after its job ends the usual way on SIGTERM; idempotent.
void Stop();

/// The rank starts running `function` for command #`seq` (`action` names the command).
void Begin(uint64_t seq, const char* action, const std::string& function);
/// The running function returned (or threw).
void End();

/// Prints the flight recorder to the log (stderr), headed by `why`.
void Dump(const std::string& why);

/// Where a rank's watchdog answers liveness pings (UDP, its host's address): when a watchdog
/// fires, it pings every rank and names those that do not answer within a second (a node that
/// died or went off the network), since MPI itself cannot say which ranks went silent.
struct PingAddress {
  static constexpr int kMaxAddresses = 4;
  uint32_t ipv4[kMaxAddresses] = {0};  // the host's IPv4 addresses, network byte order; 0: none
  uint16_t port = 0;                   // network byte order; 0: no socket
  char host[64] = {0};
};
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
/// This rank's address (after Start).
PingAddress LocalPingAddress();
/// Every rank's address, in rank order (all ranks exchange them after Start).
void SetPingAddresses(const std::vector<PingAddress>& all);

}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_WATCHDOG_H_
