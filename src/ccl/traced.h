// A communicator that records its operations in the timeline (core/trace.h) and forwards them:
// InitCCL wraps the job's communicators in it when DISCO_TRACE is on, so that tracing costs
// nothing otherwise. Each collective is one span, from the start of its agreement round (when it
// has one) to the end of its data movement, with its bytes and the time spent in the round (the
// wait for the slowest rank). NCCL operations queued without a wait (AllReduceQueued) are spans
// of the queueing only.
#ifndef DISCO_CCL_TRACED_H_
#define DISCO_CCL_TRACED_H_

#include <memory>

#include "ccl/communicator.h"

namespace disco {
namespace ccl {

std::unique_ptr<Communicator> Traced(std::unique_ptr<Communicator> inner);

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_TRACED_H_
