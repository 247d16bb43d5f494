// The remote suites' connection to the server job (tests/remote/run_remote_test.sh starts it).
#ifndef DISCO_TESTS_REMOTE_REMOTE_ENV_H_
#define DISCO_TESTS_REMOTE_REMOTE_ENV_H_

#include <disco/disco.h>

#include <string>

namespace disco {
namespace testing {
/// The server's address and key (DISCO_TEST_SERVER=host:port, DISCO_SERVE_KEY).
const std::string& ServerHost();
int ServerPort();
const std::string& ServerKey();
/// Connects, retrying for a few seconds while the server still answers "busy" (it finishes
/// cleaning up after the previous client before it takes the next).
Session ConnectRetrying(const std::string& key);
/// Drops the suites' own session (the server is then free for another client) ...
void Detach();
/// ... and attaches it again (g_session points to it).
void Reattach();
}  // namespace testing
}  // namespace disco

#endif  // DISCO_TESTS_REMOTE_REMOTE_ENV_H_
