// MPI helpers: the DISCO_MPI_CALL wrapper and RAII for communicators.
#ifndef DISCO_MPI_MPI_UTIL_H_
#define DISCO_MPI_MPI_UTIL_H_

#include <disco/error.h>
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <string>
#include <vector>

/// Evaluates an MPI call once; throws RuntimeError with MPI's error string when it fails. The
/// communicators disco creates use MPI_ERRORS_RETURN, so failures arrive here.
#define DISCO_MPI_CALL(expr)                                                                    \
  do {                                                                                          \
    int disco_mpi_status_ = (expr);                                                             \
    if (disco_mpi_status_ != MPI_SUCCESS) {                                                     \
      DISCO_THROW(RuntimeError) << #expr                                                        \
                                << " failed: " << ::disco::mpi::ErrorString(disco_mpi_status_); \
    }                                                                                           \
  } while (0)

namespace disco {
namespace mpi {

std::string ErrorString(int code);
/// First line of MPI_Get_library_version.
std::string LibraryVersion();
/// True between MPI_Init and MPI_Finalize.
bool IsActive();

/// The MPI family, from MPI_Get_library_version (callable before MPI_Init): it decides which
/// launcher processes and environment variables a job has and what the library's settings are
/// called. MPICH includes its derivatives (Intel MPI, MVAPICH, Cray MPICH).
enum class Family { kOpenMpi, kMpich, kOther };
Family LibraryFamily();
const char* FamilyName(Family family);

/// The value of an MPI library's string setting (a control variable of the MPI tool interface:
/// Open MPI's "btl", MPICH's "MPIR_CVAR_CH4_NETMOD"), or "" where the library has none or leaves
/// it unset. The tool interface is started on the first call and stays up for the life of the
/// process, never finalized: MPICH 4.0 frees its table of control variables when the last
/// MPI_T_finalize balances the MPI_T_init_thread calls, and a later MPI_T_init_thread leaves
/// MPI_T_cvar_get_num to dereference the freed table. It is started at the thread level MPI
/// runs at (Open MPI 4.1's MPI_T_init_thread sets the level MPI_Query_thread reports), and not
/// after MPI_Finalize (Open MPI's then frees a block twice): a first call then returns "".
std::string ToolStringSetting(const std::string& name);

/// Owns a communicator (freed in the destructor unless MPI is already finalized).
class Comm {
 public:
  Comm() = default;
  explicit Comm(MPI_Comm comm) : comm_(comm) {}
  ~Comm() { Reset(); }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  Comm& operator=(Comm&& other) noexcept {
    if (this != &other) {
      Reset();
      comm_ = other.comm_;
      other.comm_ = MPI_COMM_NULL;
    }
    return *this;
  }
  /// A duplicate of `parent` with MPI_ERRORS_RETURN.
  static Comm Dup(MPI_Comm parent);
  /// MPI_Comm_split of `parent`.
  static Comm Split(MPI_Comm parent, int color, int key);
  MPI_Comm get() const { return comm_; }
  int rank() const;
  int size() const;
  void Reset();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

/// Non-blocking sends of copies: the caller may reuse its buffer at once. Sends still pending
/// when this goes (the job is ending, nobody will receive them) are cancelled, so that
/// MPI_Finalize does not wait for them.
class CopiedSends {
 public:
  CopiedSends() = default;
  ~CopiedSends();
  CopiedSends(const CopiedSends&) = delete;
  CopiedSends& operator=(const CopiedSends&) = delete;
  /// MPI_Isend of a copy of `n` bytes (the caller checks `n` against its own limits).
  void Send(const void* data, int n, int dest, int tag, MPI_Comm comm);
  /// Completes the sends that have finished; with `wait`, all of them.
  void Progress(bool wait);
  /// Sends not known to be complete, and the bytes their copies hold.
  size_t pending() const { return pending_.size(); }
  size_t pending_bytes() const { return pending_bytes_; }

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<uint8_t> data;
  };
  std::list<Pending> pending_;
  size_t pending_bytes_ = 0;
};

/// The rank of this process among the processes of `comm` on its node (MPI_COMM_TYPE_SHARED),
/// and how many they are.
struct NodeLocal {
  int rank = 0;
  int size = 1;
};
NodeLocal NodeLocalRank(MPI_Comm comm);

/// Turns MPI's progress engine once, for a rank that waits outside MPI (spinning on shared memory
/// or a GPU stream): a message sent to it that MPI has not buffered, such as worker 0's next
/// control frame, completes only through the receiver's progress.
void Progress();

/// Every rank of `comm` learns whether all of them succeeded (`local` is this rank's failure, or
/// null): a failed rank rethrows its own error, the others throw one naming `what`. Call it
/// between local checks and the next collective step, so that no rank waits for one that left.
void AgreeOnSuccess(MPI_Comm comm, std::exception_ptr local, const char* what);

/// What a step that runs on its own says when polled.
enum class StepState { kPending, kDone, kFailed };

/// Waits for a local step that a failure on another rank would leave waiting forever (an NCCL
/// init or split waits for every rank of the new communicator). `poll` is called until it says
/// done or failed (a throw counts as failed, with its error); meanwhile, a failure announced by
/// another rank ends the wait. Every rank of `comm` then reaches the same verdict within
/// milliseconds of the first failure: when any rank failed, every rank calls `abandon` (abort
/// what the step made), the failing ranks rethrow their own error and the others throw one that
/// names `what` and the ranks that failed. `comm` must carry no other traffic meanwhile (a
/// duplicate of its own).
void AgreeOnPolledStep(MPI_Comm comm, const std::function<StepState()>& poll,
                       const std::function<void()>& abandon, const std::string& what);

}  // namespace mpi
}  // namespace disco

#endif  // DISCO_MPI_MPI_UTIL_H_
