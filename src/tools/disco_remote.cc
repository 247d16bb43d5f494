// disco-remote: a command-line client for a served job (disco-serve).
//
//   disco-remote HOST:PORT info          workers, groups, round-trip time
//   disco-remote HOST:PORT shutdown [N]  end the job with exit code N (0..255)
//
// The key: DISCO_SERVE_KEY, else the file DISCO_SERVE_KEY_FILE names, else ~/.disco/serve-PORT.key.
//
// Not an MPI program: it runs anywhere that reaches the port (through an SSH tunnel, say).
#include <disco/disco.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "remote/socket.h"
#include "tools/cli.h"

namespace {

// What the command line asks for.
struct Command {
  std::string where, host;  // HOST:PORT as given, and its host
  int port = 0;
  bool info = false;  // else shutdown
  int code = 0;       // shutdown's exit code
};

// Parses the command line into `c`: -1 to go on, else the exit code (cli::Parse's).
int ParseCommandLine(int argc, char** argv, Command* c) {
  CLI::App app("disco-remote: a command-line client for a served job (disco-serve)",
               "disco-remote");
  disco::cli::Configure(&app);
  app.footer(
      "The key comes from DISCO_SERVE_KEY, else from the file DISCO_SERVE_KEY_FILE names,\n"
      "else from ~/.disco/serve-PORT.key (which a server started without a key writes).");
  app.add_option("HOST:PORT", c->where, "the served job's address")
      ->required()
      ->check(CLI::Validator(
          [c](std::string& text) -> std::string {
            if (disco::remote::ParseHostPort(text, &c->host, &c->port)) return "";
            return "'" + text + "' is not HOST:PORT";
          },
          ""));
  app.require_subcommand(0, 1);
  CLI::App* info = app.add_subcommand("info", "print the job's workers, groups and a call's time");
  CLI::App* shutdown = app.add_subcommand("shutdown", "end the job with an exit code");
  // 0..255: an exit status wraps anything else (256 would read as success).
  disco::cli::AddInt(shutdown, "EXIT_CODE", &c->code, 0, 255, "the job's exit code");
  if (int code = disco::cli::Parse(&app, argc, argv); code >= 0) return code;
  if (!info->parsed() && !shutdown->parsed()) {
    return disco::cli::Fail(app, "name a command: info or shutdown");
  }
  c->info = info->parsed();
  return -1;
}

// Workers, groups and a call's round trip of the served job.
void Info(disco::Session& s, const std::string& where) {
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
}

}  // namespace

int main(int argc, char** argv) {
  Command c;
  if (int code = ParseCommandLine(argc, argv, &c); code >= 0) return code;
  try {
    // The key: DISCO_SERVE_KEY, else DISCO_SERVE_KEY_FILE, else the file a keyless server wrote.
    disco::Session s = disco::Connect(c.host, c.port, "");
    if (c.info) {
      Info(s, c.where);
    } else {
      disco::ShutdownRemoteJob(s, c.code);
      std::printf("disco-remote: asked %s to end its job with exit code %d\n", c.where.c_str(),
                  c.code);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "disco-remote: %s\n", e.what());
    return 1;
  }
}
