#include "session/mpi_util.h"

namespace disco {
namespace mpi {

std::string ErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

std::string LibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown MPI";
  std::string s(text, len);
  size_t nl = s.find_first_of("\n,");
  if (nl != std::string::npos) s = s.substr(0, nl);
  return s;
}

bool IsActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

Comm Comm::Dup(MPI_Comm parent) {
  MPI_Comm out = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_dup(parent, &out));
  Comm comm(out);
  DISCO_MPI_CALL(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return comm;
}

Comm Comm::Split(MPI_Comm parent, int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split(parent, color, key, &out));
  Comm comm(out);
  if (out != MPI_COMM_NULL) DISCO_MPI_CALL(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return comm;
}

int Comm::rank() const {
  int r = -1;
  DISCO_MPI_CALL(MPI_Comm_rank(comm_, &r));
  return r;
}

int Comm::size() const {
  int s = 0;
  DISCO_MPI_CALL(MPI_Comm_size(comm_, &s));
  return s;
}

void Comm::Reset() {
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && IsActive()) {
    MPI_Comm_free(&comm_);
  }
  comm_ = MPI_COMM_NULL;
}

int NodeLocalRank(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  Comm owned(node);
  return owned.rank();
}

void AgreeOnSuccess(MPI_Comm comm, std::exception_ptr local, const char* what) {
  int failed = local ? 1 : 0, any = 0;
  DISCO_MPI_CALL(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, comm));
  if (local) std::rethrow_exception(local);
  DISCO_CHECK(any == 0, RuntimeError) << what << " failed on another rank (its error says why)";
}

CopiedSends::~CopiedSends() {
  if (!IsActive()) return;
  for (Pending& p : pending_) {
    int done = 0;
    MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Cancel(&p.request);
      MPI_Request_free(&p.request);
    }
  }
}

void CopiedSends::Send(const void* data, int n, int dest, int tag, MPI_Comm comm) {
  pending_.emplace_back();
  Pending& p = pending_.back();
  p.data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
  DISCO_MPI_CALL(MPI_Isend(p.data.data(), n, MPI_BYTE, dest, tag, comm, &p.request));
}

void CopiedSends::Progress(bool wait) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    if (wait) {
      DISCO_MPI_CALL(MPI_Wait(&it->request, MPI_STATUS_IGNORE));
      done = 1;
    } else {
      DISCO_MPI_CALL(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    }
    it = done ? pending_.erase(it) : std::next(it);
  }
}

}  // namespace mpi
}  // namespace disco
