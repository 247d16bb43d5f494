// One clock for the runtime and its tools. In a normal build it is CLOCK_MONOTONIC (what the
// watchdog, the flight recorder and disco-bench read). In a build for SimGrid's SMPI
// (DISCO_SIMULATED: disco compiled with smpicxx, every rank a simulated actor in one process) it is
// MPI_Wtime, the simulated time: std::chrono's clocks there read the simulator's own wall time,
// which says nothing of the simulated run.
#ifndef DISCO_MPI_CLOCK_H_
#define DISCO_MPI_CLOCK_H_

#include <disco/config.h>
#include <mpi.h>
#include <time.h>

#include <cstdint>

namespace disco {
namespace mpi {

/// Nanoseconds of a monotonic clock (simulated time under SMPI). Async-signal-safe in a normal
/// build; under SMPI only simulated ranks (not helper threads) may read it.
inline int64_t NowNs() {
#if DISCO_SIMULATED
  return static_cast<int64_t>(MPI_Wtime() * 1e9);
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
#endif
}

/// Microseconds of the same clock.
inline double NowUs() { return static_cast<double>(NowNs()) * 1e-3; }

}  // namespace mpi
}  // namespace disco

#endif  // DISCO_MPI_CLOCK_H_
