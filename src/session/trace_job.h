// The job's side of the timeline (core/trace.h): DISCO_TRACE starts every rank's recorder at the
// start of a job; at its end the ranks' clocks are aligned to rank 0's and rank 0 writes the one
// trace file. Both are collective over the job's world communicator.
#ifndef DISCO_SESSION_TRACE_JOB_H_
#define DISCO_SESSION_TRACE_JOB_H_

#include <mpi.h>

namespace disco {
namespace trace {

/// Reads DISCO_TRACE (the path; empty: off) and DISCO_TRACE_EVENTS (the ring's size per rank),
/// agreed on every rank before, starts recording, and estimates each rank's clock offset to rank
/// 0's (the best of several MPI round trips). No-op without DISCO_TRACE. Throws ValueError naming
/// a bad knob, on every rank alike.
void StartJob(MPI_Comm world);
/// Estimates the offsets again, maps every rank's events onto rank 0's clock (the offset
/// interpolated between the two estimates), gathers them on rank 0, which writes DISCO_TRACE and
/// prints one line (events, ranks, the offsets' error). No-op when StartJob did not start.
void FinishJob(MPI_Comm world);

}  // namespace trace
}  // namespace disco

#endif  // DISCO_SESSION_TRACE_JOB_H_
