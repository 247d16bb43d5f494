#include "mpi/mpi_util.h"

#include <disco/config.h>

#include <algorithm>
#include <sstream>
#include <thread>

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
  // One space for each run of blanks ("MPICH Version:\t4.0.2" has a tab).
  std::string out;
  for (char ch : s) {
    const bool blank = ch == ' ' || ch == '\t' || ch == '\r';
    if (!blank) {
      out += ch;
    } else if (!out.empty() && out.back() != ' ') {
      out += ' ';
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

bool IsActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

Family LibraryFamily() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return Family::kOther;
  const std::string s(text, len);
  if (s.find("Open MPI") != std::string::npos) return Family::kOpenMpi;
  for (const char* name : {"MPICH", "Intel(R) MPI", "MVAPICH"}) {
    if (s.find(name) != std::string::npos) return Family::kMpich;
  }
  return Family::kOther;
}

const char* FamilyName(Family family) {
  switch (family) {
    case Family::kOpenMpi:
      return "openmpi";
    case Family::kMpich:
      return "mpich";
    case Family::kOther:
      break;
  }
  return "other";
}

std::string ToolStringSetting(const std::string& wanted) {
#if DISCO_SIMULATED
  (void)wanted;
  return "";  // SMPI has no tool interface
#else
  // Once per process (thread-safe static), and never finalized: see the header.
  static const bool started = [] {
    int initialized = 0, finalized = 0, level = MPI_THREAD_SINGLE, provided = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    // Not started after MPI_Finalize: Open MPI 4.1's MPI_Query_thread aborts then, and its
    // MPI_T_init_thread frees a block twice (AddressSanitizer: opal_tsd_key_create).
    if (finalized) return false;
    if (initialized) MPI_Query_thread(&level);
    return MPI_T_init_thread(level, &provided) == MPI_SUCCESS;
  }();
  if (!started) return "";
  int count = 0;
  if (MPI_T_cvar_get_num(&count) != MPI_SUCCESS) return "";
  for (int i = 0; i < count; ++i) {
    char name[256], desc[16];
    int name_len = sizeof name, desc_len = sizeof desc, verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype = MPI_T_ENUM_NULL;
    if (MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS ||
        wanted != name || type != MPI_CHAR) {
      continue;
    }
    MPI_T_cvar_handle handle;
    int n = 0;
    if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &n) != MPI_SUCCESS) return "";
    std::string buf(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
    std::string value;
    if (MPI_T_cvar_read(handle, buf.data()) == MPI_SUCCESS) value = buf.c_str();
    MPI_T_cvar_handle_free(&handle);
    return value;
  }
  return "";
#endif
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

void Progress() {
  int pending = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &pending, MPI_STATUS_IGNORE);
}

NodeLocal NodeLocalRank(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  DISCO_MPI_CALL(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  Comm owned(node);
  return {owned.rank(), owned.size()};
}

void AgreeOnSuccess(MPI_Comm comm, std::exception_ptr local, const char* what) {
  int failed = local ? 1 : 0, any = 0;
  DISCO_MPI_CALL(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, comm));
  if (local) std::rethrow_exception(local);
  DISCO_CHECK(any == 0, RuntimeError) << what << " failed on another rank (its error says why)";
}

void AgreeOnPolledStep(MPI_Comm comm, const std::function<StepState()>& poll,
                       const std::function<void()>& abandon, const std::string& what) {
  constexpr int kFailureTag = 7301;
  int rank = 0, size = 1;
  DISCO_MPI_CALL(MPI_Comm_rank(comm, &rank));
  DISCO_MPI_CALL(MPI_Comm_size(comm, &size));
  // A failing rank tells every other one at once (its rank id), so that nobody waits for it.
  int notice = -1;
  std::vector<int> failed_ranks;
  MPI_Request incoming = MPI_REQUEST_NULL;
  DISCO_MPI_CALL(MPI_Irecv(&notice, 1, MPI_INT, MPI_ANY_SOURCE, kFailureTag, comm, &incoming));
  std::exception_ptr local;
  for (;;) {
    StepState state = StepState::kPending;
    try {
      state = poll();
    } catch (const std::exception&) {
      local = std::current_exception();
      state = StepState::kFailed;
    }
    if (state == StepState::kFailed && !local) {
      try {
        DISCO_THROW(RuntimeError) << what << " failed";
      } catch (const Error&) {
        local = std::current_exception();
      }
    }
    if (state != StepState::kPending) break;
    int arrived = 0;
    DISCO_MPI_CALL(MPI_Test(&incoming, &arrived, MPI_STATUS_IGNORE));
    if (arrived) {
      failed_ranks.push_back(notice);
      break;
    }
    std::this_thread::yield();
  }
  std::vector<int> me(static_cast<size_t>(size), rank);
  std::vector<MPI_Request> outgoing;
  if (local) {
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      outgoing.emplace_back();
      DISCO_MPI_CALL(MPI_Isend(&me[r], 1, MPI_INT, r, kFailureTag, comm, &outgoing.back()));
    }
  }
  int failed = local ? 1 : 0, total = 0;
  DISCO_MPI_CALL(MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, comm));
  // Take every notice sent to this rank (one per other failed rank), so none is left behind.
  const int expected = total - failed;
  if (failed_ranks.empty()) {
    if (expected > 0) {
      DISCO_MPI_CALL(MPI_Wait(&incoming, MPI_STATUS_IGNORE));
      failed_ranks.push_back(notice);
    } else {
      DISCO_MPI_CALL(MPI_Cancel(&incoming));
      DISCO_MPI_CALL(MPI_Wait(&incoming, MPI_STATUS_IGNORE));
    }
  }
  while (static_cast<int>(failed_ranks.size()) < expected) {
    DISCO_MPI_CALL(
        MPI_Recv(&notice, 1, MPI_INT, MPI_ANY_SOURCE, kFailureTag, comm, MPI_STATUS_IGNORE));
    failed_ranks.push_back(notice);
  }
  if (!outgoing.empty()) {
    DISCO_MPI_CALL(
        MPI_Waitall(static_cast<int>(outgoing.size()), outgoing.data(), MPI_STATUSES_IGNORE));
  }
  if (total == 0) return;
  abandon();
  if (local) std::rethrow_exception(local);
  std::ostringstream names;
  std::sort(failed_ranks.begin(), failed_ranks.end());
  for (size_t i = 0; i < failed_ranks.size(); ++i) names << (i ? ", " : "") << failed_ranks[i];
  DISCO_THROW(RuntimeError) << what << " failed on rank" << (failed_ranks.size() > 1 ? "s " : " ")
                            << names.str() << " (its error says why); abandoned here too";
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
  pending_bytes_ += p.data.size();
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
    if (done) pending_bytes_ -= it->data.size();
    it = done ? pending_.erase(it) : std::next(it);
  }
}

}  // namespace mpi
}  // namespace disco
