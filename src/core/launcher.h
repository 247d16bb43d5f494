// Ending the job from a rank when its launcher would not, or not soon:
// - `srun` without --kill-on-bad-exit leaves the ranks of other nodes waiting when one rank exits
//   (its PMIx abort reaches its own node only): a rank that ends the job cancels its step.
// - Open MPI 4 has no heartbeat: when a node goes off the network, mpirun waits minutes for its
//   daemon. A rank that found ranks gone (the watchdog's liveness pings) ends the launcher process
//   of its own node (mpirun, or the node's orted), so the job ends now, on every node that can
//   still be reached, and the lost node's ranks do the same on theirs.
#ifndef DISCO_CORE_LAUNCHER_H_
#define DISCO_CORE_LAUNCHER_H_

#include <string>

namespace disco {

/// Ends the job from this rank: one error line naming `cause`, then the fatal path that disco::Main
/// installed (flight recorder, Slurm step, MPI_Abort); without one, the process exits 1. For a rank
/// that cannot go on without leaving the others waiting for it (a collective it cannot join).
[[noreturn]] void EndJobWithError(const std::string& cause);
/// Installs the fatal path EndJobWithError takes (disco::Main does, before any command runs).
void SetFatalHandler(void (*handler)(const std::string& cause));

/// Under Slurm (SLURM_JOB_ID and SLURM_STEP_ID set), starts `scancel JOB.STEP`, waiting at most a
/// second for it; nothing otherwise, or when scancel cannot be started. Once per process.
void EndSlurmStep();
/// Under Open MPI's launcher (OMPI_COMM_WORLD_SIZE set), when this rank's parent is mpirun or
/// orted: SIGKILL to the parent's other children (this node's other ranks), then to the parent.
/// Nothing otherwise.
void EndLocalLauncher();

}  // namespace disco

#endif  // DISCO_CORE_LAUNCHER_H_
