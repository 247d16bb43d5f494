// A client that calls one function of a served job (tests/remote/run_keyfile_test.sh):
//   disco_remote_call HOST:PORT FUNCTION [INT...]
// attaches (the key: DISCO_SERVE_KEY, else the key file), calls FUNCTION with the integers on
// every worker, syncs and detaches. Exits 0 when the call returned, 1 with the error otherwise (a
// job that ends during the call closes the connection).
//   disco_remote_call HOST:PORT --stall
// attaches (the key: DISCO_SERVE_KEY), sends the first 10 bytes of a 100-byte request, prints
// "hang begins" and stalls for 60 s, the connection open (tests/remote/run_stalled_client_test.sh).
#include <disco/disco.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "remote/socket.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: disco_remote_call HOST:PORT FUNCTION [INT...]\n");
    return 2;
  }
  const std::string where = argv[1];
  const size_t colon = where.rfind(':');
  try {
    if (std::string(argv[2]) == "--stall") {
      const char* key = std::getenv("DISCO_SERVE_KEY");
      disco::remote::Socket sock = disco::remote::Socket::Connect(
          where.substr(0, colon), std::atoi(argv[1] + colon + 1), 10000);
      if (disco::remote::ClientHello(&sock, key != nullptr ? key : "", 10000) !=
          disco::remote::HandshakeCode::kOk) {
        std::printf("--stall: the server refused the handshake\n");
        return 1;
      }
      uint64_t len = 100;
      sock.SendAll(&len, sizeof len, 10000);
      sock.SendAll("0123456789", 10, 10000);
      std::printf("hang begins\n");
      std::fflush(stdout);
      sleep(60);
      return 0;
    }
    disco::Session s = disco::Connect(where.substr(0, colon), std::atoi(argv[1] + colon + 1), "");
    std::vector<disco::Any> args;
    for (int i = 3; i < argc; ++i) args.emplace_back(static_cast<int64_t>(std::atoll(argv[i])));
    disco::DRef f = s.GetGlobalFunc(argv[2]);
    if (args.empty()) {
      s.CallPacked(f);
    } else {
      s.CallPacked(f, args[0]);
    }
    s.SyncAll();
    std::printf("%s returned\n", argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::printf("%s: %s\n", argv[2], e.what());
    return 1;
  }
}
