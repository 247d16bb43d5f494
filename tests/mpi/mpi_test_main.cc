// gtest main for the MPI suites: every rank enters disco::Main; rank 0 runs the tests as the
// controller and the others serve as workers. Worker-side checks throw, so a failure on any rank
// reaches rank 0 as a RemoteError and fails the test there; the exit code is agreed by all ranks.
//
// With `--mpi-thread-multiple`, the program starts MPI itself at MPI_THREAD_MULTIPLE before
// disco::Main, which keeps that level (the suites run as under disco::Main's own SINGLE).
//
// With `--serve PORT_FILE`, the job instead serves its session (with every test function
// registered) to a remote client on loopback: tests/remote runs the same suites through it.
#include <disco/disco.h>
#include <gtest/gtest.h>

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "mpi/mpi_test_env.h"

namespace disco {
namespace testing {
Session* g_session = nullptr;
}  // namespace testing
}  // namespace disco

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string serve_port_file;
  bool thread_multiple = false;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && std::strcmp(argv[i], "--serve") == 0) serve_port_file = argv[i + 1];
    if (std::strcmp(argv[i], "--mpi-thread-multiple") == 0) thread_multiple = true;
  }
  if (thread_multiple) {
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return 1;
    if (provided != MPI_THREAD_MULTIPLE) {  // nothing at MULTIPLE to test: CTest's skip code
      std::printf("skipped: this MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n",
                  provided);
      MPI_Finalize();
      return 77;
    }
  }
  const int rc = disco::Main(argc, argv, [&](disco::Session& session) {
    if (!serve_port_file.empty()) {
      disco::SetLogLevel(disco::LogLevel::kInfo);
      disco::ServeOptions opts;
      opts.port_file = serve_port_file;
      opts.request_timeout_ms = 3000;  // tests/remote's truncated-request case waits this long
      opts.idle_timeout_s = 20;        // and its idle-client case this long (a client on a loaded
                                       // machine may take seconds between two requests)
      return disco::Serve(session, opts);
    }
    disco::testing::g_session = &session;
    int rc = RUN_ALL_TESTS();
    disco::testing::g_session = nullptr;
    return rc;
  });
  if (thread_multiple) MPI_Finalize();  // the program's MPI, the program's to finalize
  return rc;
}
