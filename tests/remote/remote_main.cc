// gtest main of the remote suites: a plain process (no MPI job of its own) that attaches to a
// served job with disco::Connect and runs the session suites (tests/mpi) through it, then the
// remote-only cases, then ends the job with the tests' verdict as its exit code.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "mpi/mpi_test_env.h"
#include "remote/remote_env.h"
#include "remote/socket.h"

namespace disco {
namespace testing {
Session* g_session = nullptr;

namespace {
std::string g_host;
int g_port = 0;
std::string g_key;
std::unique_ptr<Session> g_holder;
}  // namespace

const std::string& ServerHost() { return g_host; }
int ServerPort() { return g_port; }
const std::string& ServerKey() { return g_key; }

Session ConnectRetrying(const std::string& key) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    try {
      return Connect(g_host, g_port, key);
    } catch (const RuntimeError& e) {
      if (std::string(e.what()).find("busy") == std::string::npos ||
          std::chrono::steady_clock::now() > deadline) {
        throw;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

void Detach() {
  g_session = nullptr;
  g_holder.reset();
}

void Reattach() {
  Detach();
  g_holder = std::make_unique<Session>(ConnectRetrying(g_key));
  g_session = g_holder.get();
}
}  // namespace testing
}  // namespace disco

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  namespace t = disco::testing;
  const char* server = std::getenv("DISCO_TEST_SERVER");
  const char* key = std::getenv("DISCO_SERVE_KEY");
  if (server == nullptr || !disco::remote::ParseHostPort(server, &t::g_host, &t::g_port)) {
    std::fprintf(stderr,
                 "disco_remote_tests: set DISCO_TEST_SERVER=host:port (and "
                 "DISCO_SERVE_KEY); tests/remote/run_remote_test.sh does\n");
    return 2;
  }
  t::g_key = key != nullptr ? key : "";
  t::Reattach();
  int rc = RUN_ALL_TESTS();
  if (t::g_session == nullptr) t::Reattach();
  disco::ShutdownRemoteJob(*t::g_session, rc == 0 ? 0 : 1);
  t::Detach();
  return rc;
}
