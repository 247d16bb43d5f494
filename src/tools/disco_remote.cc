// disco-remote: a command-line client for a served job (disco-serve).
//
//   DISCO_SERVE_KEY=secret disco-remote HOST:PORT info          workers, groups, round-trip time
//   DISCO_SERVE_KEY=secret disco-remote HOST:PORT shutdown [N]  end the job with exit code N
//
// Not an MPI program: it runs anywhere that reaches the port (through an SSH tunnel, say).
#include <disco/disco.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "remote/socket.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: disco-remote HOST:PORT info\n"
               "       disco-remote HOST:PORT shutdown [EXIT_CODE]\n"
               "The key comes from DISCO_SERVE_KEY.\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  std::string where = argv[1], cmd = argv[2], host;
  int port = 0;
  if (!disco::remote::ParseHostPort(where, &host, &port)) return Usage();
  const char* key = std::getenv("DISCO_SERVE_KEY");
  try {
    disco::Session s = disco::Connect(host, port, key ? key : "");
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
      int code = argc > 3 ? std::atoi(argv[3]) : 0;
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
