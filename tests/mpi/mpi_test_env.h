#ifndef DISCO_TESTS_MPI_MPI_TEST_ENV_H_
#define DISCO_TESTS_MPI_MPI_TEST_ENV_H_

#include <disco/disco.h>

#include <string>

namespace disco {
namespace testing {
/// The controller's session while the tests run (rank 0 only).
extern Session* g_session;

/// The message of the RemoteError `f` raises, or "" (and a test failure) when it raises none.
template <typename F>
std::string RemoteErrorOf(F&& f, int* worker = nullptr) {
  try {
    f();
  } catch (const RemoteError& e) {
    if (worker) *worker = e.worker();
    return e.what();
  }
  ADD_FAILURE() << "expected a RemoteError";
  return "";
}
/// The value formula (tests/mpi/ccl_test.cc) whose reductions stay exact for `op`.
inline std::string FillKindFor(const std::string& op) {
  if (op == "prod") return "prod";
  if (op == "min" || op == "max") return "minmax";
  return "sum";
}

/// SyncAll, turning a RemoteError into a test failure labelled `what`.
inline void ExpectNoRemoteError(Session& s, const std::string& what) {
  try {
    s.SyncAll();
  } catch (const RemoteError& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
}
}  // namespace testing
}  // namespace disco

#endif  // DISCO_TESTS_MPI_MPI_TEST_ENV_H_
