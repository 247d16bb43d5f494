// gtest main for the MPI suites: every rank enters disco::Main; rank 0 runs the tests as the
// controller and the others serve as workers. Worker-side checks throw, so a failure on any rank
// reaches rank 0 as a RemoteError and fails the test there; the exit code is agreed by all ranks.
#include <disco/disco.h>
#include <gtest/gtest.h>

#include "mpi/mpi_test_env.h"

namespace disco {
namespace testing {
Session* g_session = nullptr;
}  // namespace testing
}  // namespace disco

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return disco::Main(argc, argv, [](disco::Session& session) {
    disco::testing::g_session = &session;
    int rc = RUN_ALL_TESTS();
    disco::testing::g_session = nullptr;
    return rc;
  });
}
