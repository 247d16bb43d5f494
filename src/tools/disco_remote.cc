// disco-remote: a command-line client for a served job (disco-serve).
//
//   disco-remote HOST:PORT info          workers, groups, round-trip time
//   disco-remote HOST:PORT shutdown [N]  end the job with exit code N (0..255)
//
// The key: DISCO_SERVE_KEY, else the file DISCO_SERVE_KEY_FILE names, else ~/.disco/serve-PORT.key.
//
// Not an MPI program: it runs anywhere that reaches the port (through an SSH tunnel, say).
#include <disco/disco.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "remote/socket.h"

namespace {

int Usage() {
  std::fprintf(
      stderr,
      "usage: disco-remote HOST:PORT info\n"
      "       disco-remote HOST:PORT shutdown [EXIT_CODE]\n"
      "The key comes from DISCO_SERVE_KEY, else from the file DISCO_SERVE_KEY_FILE names,\n"
      "else from ~/.disco/serve-PORT.key (which a server started without a key writes).\n");
  return 2;
}

// The exit code of `shutdown`: a number in 0..255 (an exit status wraps anything else: 256
// would read as success), or -1.
int ParseExitCode(const std::string& arg) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(arg.c_str(), &end, 10);  // NOLINT(runtime/int)
  if (arg.empty() || *end != '\0' || errno != 0 || v < 0 || v > 255) return -1;
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  std::string where = argv[1], cmd = argv[2], host;
  int port = 0;
  if (!disco::remote::ParseHostPort(where, &host, &port)) return Usage();
  if (cmd != "info" && cmd != "shutdown") return Usage();
  int code = 0;
  if (cmd == "shutdown" && argc > 3 && (code = ParseExitCode(argv[3])) < 0) {
    std::fprintf(stderr, "disco-remote: shutdown: exit code '%s' is not a number in 0..255\n",
                 argv[3]);
    return 2;
  }
  try {
    // The key: DISCO_SERVE_KEY, else DISCO_SERVE_KEY_FILE, else the file a keyless server wrote.
    disco::Session s = disco::Connect(host, port, "");
    if (cmd == "info") {
      disco::DRef f = s.GetGlobalFunc("disco.worker_id");
      auto t0 = std::chrono::steady_clock::now();
      const int calls = 100;
      for (int i = 0; i < calls; ++i) s.CallPacked(f);
      s.SyncAll();
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          (calls + 1);
      std::printf("disco-remote: %s serves %d workers in %d groups; a call takes %.1f us\n",
                  where.c_str(), s.num_workers(), s.num_groups(), us);
      return 0;
    }
    if (cmd == "shutdown") {
      disco::ShutdownRemoteJob(s, code);
      std::printf("disco-remote: asked %s to end its job with exit code %d\n", where.c_str(), code);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "disco-remote: %s\n", e.what());
    return 1;
  }
  return Usage();
}
