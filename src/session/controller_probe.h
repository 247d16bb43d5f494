// A controller blocked outside disco, and the interpreter's stacks (session/watchdog.h:
// ControllerRunning, SetStackDumper).
//
// Commands are timed; a controller that sends none cannot hang a command, but it can hang the job:
// blocked in an MPI call of its own (mpi4py's COMM_WORLD.Barrier()) that the workers, waiting in
// disco's command loop, never join. When rank 0 has run no command for DISCO_TIMEOUT / 2, the
// watchdog samples the controller thread's native stack about once a second (a signal whose
// handler records backtrace()); a controller that stays inside the same MPI entry point, called
// from outside disco (not libdisco), until DISCO_TIMEOUT has passed without a command ends the
// job, naming the call and the library that made it. A controller that computes, or waits inside
// a disco call, is never ended by this. Every rank's state for a hang verdict says where its
// command thread is in MPI from the same samples.
#ifndef DISCO_SESSION_CONTROLLER_PROBE_H_
#define DISCO_SESSION_CONTROLLER_PROBE_H_

#include <string>

namespace disco {
namespace watchdog {
namespace probe {

/// With a timeout, the watchdog samples the stack of the calling thread (the one that runs
/// commands, and rank 0's controller) with a real-time signal nothing else here uses.
void Start(double timeout_s);
/// Gives back the probe's signal (after the watchdog's thread, which sends it, has ended).
void Stop();
/// One step of the probe, on the watchdog thread (every 50 ms while DISCO_TIMEOUT is set); ends
/// the job when the controller stays blocked in an MPI call of its own.
void Step();

/// Whether rank 0's controller runs (ControllerRunning).
bool ControllerRunning();
/// Samples the command thread's native stack; returns its depth, or -1 (no probe, or the thread
/// did not answer within 200 ms). On the watchdog thread only.
int SampleStack();
/// The frames of the last sample (SampleStack's depth of them).
void* const* Frames();
/// The MPI entry point (MPI_Barrier) the sampled stack is inside, when it was called from outside
/// libdisco (and outside HDF5, which disco's I/O calls MPI-IO through), with the path of the
/// library that called it; "" otherwise. `*in_mpi` (when given): whether the stack is inside any
/// MPI entry point at all.
std::string ForeignMpiCall(void* const* frames, int depth, std::string* caller,
                           bool* in_mpi = nullptr);
/// Prints the stacks of the interpreter running in this process (SetStackDumper), if any.
void DumpInterpreterStacks();

}  // namespace probe
}  // namespace watchdog
}  // namespace disco

#endif  // DISCO_SESSION_CONTROLLER_PROBE_H_
