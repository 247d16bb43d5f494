// The tags of the control plane's point-to-point messages (MpiTransport's communicator). Nothing
// else of disco is included: bench/sim's skeleton, built apart from disco with mpicxx or smpicxx,
// includes it, so that it sends what the session sends.
#ifndef DISCO_SESSION_TRANSPORT_TAGS_H_
#define DISCO_SESSION_TRANSPORT_TAGS_H_

namespace disco {

/// A worker's reply to rank 0 (a sync ack, a debug value).
constexpr int kControlTagReply = 101;
/// A worker's error report to rank 0.
constexpr int kControlTagError = 102;

}  // namespace disco

#endif  // DISCO_SESSION_TRANSPORT_TAGS_H_
