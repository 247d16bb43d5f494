// A controller program that fails on purpose, one way per mode; run_fault_test.sh checks that the
// job ends promptly, with the right exit code and message.
#include <disco/disco.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "protocol/frame.h"
#include "session/session_impl.h"

namespace {

DISCO_REGISTER_GLOBAL("fault.kill_self").set_body_typed([](int64_t worker) {
  if (disco::ThisWorker().worker_id == worker) raise(SIGKILL);
});
DISCO_REGISTER_GLOBAL("fault.throw_on_1").set_body_typed([]() {
  if (disco::ThisWorker().worker_id == 1) throw disco::ValueError("worker 1 fails on purpose");
});
DISCO_REGISTER_GLOBAL("fault.noop").set_body_packed([](const disco::Args&, disco::Any*) {});

int Run(disco::Session& s, const std::string& mode) {
  if (mode == "controller-throws") {
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    throw std::runtime_error("boom from the controller");
  }
  if (mode == "kill-worker") {
    s.CallPacked(s.GetGlobalFunc("fault.kill_self"), 1);
    s.SyncAll();  // blocks on the dead worker: the launcher must end the job
    std::printf("unreachable: SyncAll returned after a worker died\n");
    return 0;
  }
  if (mode == "desync") {
    s.impl()->TestSkipSequence(2);
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    s.SyncAll();
    std::printf("unreachable: desync went unnoticed\n");
    return 0;
  }
  if (mode == "garbled-frame") {
    uint8_t junk[64];
    std::memset(junk, 0xAB, sizeof junk);
    s.impl()->TestBroadcastRaw(junk, sizeof junk);
    s.SyncAll();
    std::printf("unreachable: garbled frame went unnoticed\n");
    return 0;
  }
  if (mode == "clean") {
    s.CallPacked(s.GetGlobalFunc("fault.noop"));
    s.SyncAll();
    std::printf("clean shutdown: %d workers\n", s.num_workers());
    return 0;
  }
  if (mode == "exit-code") {
    std::printf("controller returns 3\n");
    return 3;
  }
  if (mode == "unobserved-error") {
    s.CallPacked(s.GetGlobalFunc("fault.throw_on_1"));
    return 0;  // never synced: shutdown reports it and the job fails
  }
  throw std::invalid_argument("unknown mode '" + mode + "'");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  return disco::Main(argc, argv, [&](disco::Session& s) {
    int rc = Run(s, mode);
    std::fflush(stdout);
    return rc;
  });
}
