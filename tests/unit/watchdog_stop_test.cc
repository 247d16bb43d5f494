// The watchdog's thread and Stop (session/watchdog.cc): Stop gives the probe's signal back only
// once the thread, which reads it and sends it, has ended. Under ThreadSanitizer (./launch/test's
// TSan stage) the old order, signals first, is a race reported; in any build the job's process
// outlives Stop.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "session/watchdog.h"

namespace disco {
namespace watchdog {
namespace {

int Count(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(WatchdogStopTest, StopsTheThreadBeforeGivingBackTheProbesSignal) {
  char path[] = "/tmp/disco-watchdog-stop-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  Start(0, 1, 30.0, liveness::JobSecret(), {});
  ControllerRunning(true);
  // Each SIGUSR1 is dumped by the thread's loop, which then runs the controller's probe: the
  // second dump comes after at least one whole turn of it (no deadline: each waits its turn).
  for (int dumps = 1; dumps <= 2; ++dumps) {
    raise(SIGUSR1);
    while (Count(path, "flight recorder (SIGUSR1)") < dumps) std::this_thread::yield();
  }
  ControllerRunning(false);
  Stop();
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  unlink(path);
  struct sigaction usr1 {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &usr1), 0);
  EXPECT_EQ(usr1.sa_handler, SIG_DFL);  // given back
}

}  // namespace
}  // namespace watchdog
}  // namespace disco
