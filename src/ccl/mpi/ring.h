// When the MPI backend takes disco's own ring, and the ring's constants. Nothing else of disco is
// included: bench/sim's skeleton, built apart from disco with mpicxx or smpicxx, includes it, so
// that it makes the choices and the messages the backend makes.
#ifndef DISCO_CCL_MPI_RING_H_
#define DISCO_CCL_MPI_RING_H_

#include <cstddef>
#include <cstdint>

namespace disco {
namespace ccl {

/// Messages from this size on take disco's own ring algorithms with persistent staging instead of
/// MPI_Allreduce / MPI_Reduce_scatter_block, which allocate a full-size temporary on every call.
constexpr size_t kRingMinBytes = 256 * 1024;
/// ... and only while each rank's share of the tensor is at least this large. The ring takes
/// 2(P-1) steps of one share each, overlapping each share's reduction with the next transfer; MPI's
/// own large allreduce (Open MPI 4.1: Rabenseifner's reduce-scatter + allgather) takes 2 log2 P
/// steps but copies and reduces outside the transfers. The ring's extra latency grows with P,
/// its saving with the bytes, and they cross between shares of 32 and 64 KiB: simulated with
/// bench/sim (fat tree, 100 Gb/s), the ring beats Open MPI 4.1 by 7-11 % with 64 KiB shares
/// (1 MiB at 16 ranks ... 64 MiB at 1024) and loses by 2-3 % with 32 KiB shares (2 MiB at 64,
/// 8 MiB at 256). Below this share disco calls MPI, so it is not slower than MPI's own.
constexpr size_t kRingMinShareBytes = 64 * 1024;
/// Whether a reduction of `bytes` over `ranks` ranks takes disco's ring.
inline bool UseRing(size_t bytes, int ranks) {
  return bytes >= kRingMinBytes && bytes / static_cast<size_t>(ranks) >= kRingMinShareBytes;
}

/// Tag of the ring's messages on the backend's communicator.
constexpr int kRingTag = 12;
/// Segments of a ring step: receiving segment k+1 overlaps reducing segment k.
constexpr size_t kRingSegmentBytes = 256 * 1024;
/// Segments received at once (staging slots of kRingSegmentBytes each).
constexpr int64_t kRingWindow = 4;

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_MPI_RING_H_
