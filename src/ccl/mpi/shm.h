// Node-local shared-memory collectives for the MPI backend.
//
// When every rank of a communicator runs on one node, the ranks map one segment of shared memory.
// Rank 0 creates it without a name (memfd) and the others open it through /proc/<pid>/fd, so a
// job killed at any moment leaves nothing behind. Where that fails (ranks in other pid namespaces,
// /proc hidden), a named POSIX segment in /dev/shm is used, unlinked as soon as every rank has it
// mapped; a name left by a job killed in that moment is removed by the next channel made on the
// node, once its creator is gone. Each rank owns a flag
// on a cache line of its own and two slots of kSlotBytes. A collective moves through the segment
// in steps; in step s every rank
//
//   1. writes its part of the step into its own slot s % 2,
//   2. publishes s in its flag (release store),
//   3. waits until every peer's flag reaches s (acquire loads),
//   4. reads what it needs from the peers' slots s % 2.
//
// A rank publishes s only after it finished reading step s - 1, and it waited in step s - 1 for
// every peer to publish s - 1 (so every peer had finished step s - 2). Writing slot s % 2 in step
// s is therefore safe: nobody still reads step s - 2 from it. One flag exchange per step, no
// allocation per call, no MPI call at all on the data path.
//
// Reductions combine the slots in rank order on every rank, so every rank gets the same bits
// (floating-point sums included), as with MPI's and NCCL's allreduce.
//
// Waiting spins (with a pause instruction) for a short while and then yields the CPU: when the
// node's ranks may run on fewer CPUs than there are ranks (mpirun --oversubscribe, or their
// affinity masks: taskset, a cpuset of Slurm or a container), pure spinning would starve the peer
// being waited for, so then waits yield at once.
#ifndef DISCO_CCL_MPI_SHM_H_
#define DISCO_CCL_MPI_SHM_H_

#include <disco/ccl.h>
#include <dlpack/dlpack.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace disco {
namespace ccl {

class ShmChannel {
 public:
  /// Bytes one rank's slot holds: the unit of one step.
  static constexpr size_t kSlotBytes = 256 * 1024;
  /// Allreduces from this size on split each step's reduction between the ranks.
  static constexpr size_t kSplitMinBytes = 64 * 1024;
  /// Allreduces from this size on write their result with non-temporal stores.
  static constexpr size_t kStreamMinBytes = 32 << 20;
  /// Allgathers and broadcasts take the channel below this size (of the whole result). Larger ones
  /// go to MPI, whose shared-memory transport copies once (the receiver reads the sender's memory
  /// through the kernel) where the channel copies twice.
  static constexpr size_t kCopyMaxBytes = 32 * 1024;

  /// Collective over `comm` (every rank calls it): a channel when all ranks of `comm` share a node
  /// and every one of them could map the segment, else nullptr on every rank (the reason is logged
  /// at info level).
  static std::unique_ptr<ShmChannel> Create(MPI_Comm comm);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  /// recv = the reduction over ranks of send (n elements; recv may be send).
  void AllReduce(const char* send, char* recv, int64_t n, DLDataType t, ReduceOp op);
  /// recv holds size blocks of `bytes`, rank r's send in block r (send may be recv's block).
  void AllGather(const char* send, char* recv, size_t bytes);
  /// send holds size blocks of m elements; rank r gets the reduction of block r in recv.
  void ReduceScatter(const char* send, char* recv, int64_t m, DLDataType t, ReduceOp op);
  /// Every rank gets root's `send` (`bytes`) in recv (send may be recv on the root).
  void Broadcast(const char* send, char* recv, size_t bytes, int root);

 private:
  ShmChannel(char* base, size_t mapped, int rank, int size, bool oversubscribed,
             std::vector<int> world_ranks);

  uint64_t* Flag(int rank) const;
  /// The slot of `rank` that round `round` uses.
  char* Slot(int rank, uint64_t round) const;
  /// Starts a round: its slots are free for writing.
  uint64_t NextRound();
  /// Publishes this rank's next step and waits for every peer to publish it.
  void Exchange();
  /// Asks for the first `bytes` of every peer's slot of `round` at once: lines a peer's core wrote
  /// cross between the cores together, not one after another as a reduction reaches them.
  void PrefetchPeers(uint64_t round, size_t bytes) const;
  /// dst = source(0) op source(1) op ... op source(size - 1), combined in rank order on every
  /// rank (the same bits everywhere); `source(r)` points at rank r's `count` elements.
  template <typename Source>
  void ReduceInRankOrder(char* dst, Source source, int64_t count, DLDataType t, ReduceOp op) const;

  char* base_;
  size_t mapped_;
  int rank_;
  int size_;
  int spins_before_yield_;
  uint64_t step_ = 0;             // exchanges so far
  uint64_t round_ = 0;            // rounds so far (one or two exchanges each)
  std::vector<int> world_ranks_;  // MPI_COMM_WORLD rank of each member
};

}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_MPI_SHM_H_
