// Ending the job from a rank when its launcher would not, or not soon:
// - `srun` without --kill-on-bad-exit leaves the ranks of other nodes waiting when one rank exits
//   (its PMIx abort reaches its own node only): a rank that ends the job cancels its step.
// - Neither Open MPI 4 nor MPICH's hydra has a heartbeat: when a node goes off the network,
//   mpirun (or mpiexec) waits minutes, or for good, for its daemon there. A rank that found ranks
//   gone (the watchdog's liveness pings) ends the launcher processes of its own node (mpirun or
//   the node's orted; hydra's proxy, and mpiexec on the node that started the job), so the job
//   ends now, on every node that can still be reached, and the lost node's ranks do the same on
//   theirs.
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
/// When this rank's parent is a launcher (Open MPI's mpirun or orted, MPICH's hydra_pmi_proxy):
/// SIGKILL to the parent's other children (this node's other ranks), then to the parent, and
/// under hydra to the mpiexec above the proxy when it runs on this node. Nothing otherwise (srun
/// starts ranks from slurmstepd: EndSlurmStep ends those).
void EndLocalLauncher();
/// What EndLocalLauncher would end, for the line that says so ("mpirun (pid 12)",
/// "hydra_pmi_proxy (pid 12) and mpiexec (pid 11)"), or "" for nothing.
std::string LocalLauncher();

}  // namespace disco

#endif  // DISCO_CORE_LAUNCHER_H_
