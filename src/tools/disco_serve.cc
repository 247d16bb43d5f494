// disco-serve: a job that serves its session to one remote controller at a time (disco/remote.h).
//
//   disco-run -n 4 disco-serve --port 7070 [--load libmyfuncs.so]
//
// With no key (--key, DISCO_SERVE_KEY), a random one is generated and written to a file only its
// owner can read (~/.disco/serve-PORT.key), where disco-remote and disco::Connect look for it.
//
// Rank 0 listens (loopback unless --host says otherwise) and forwards each client's requests into
// the job's session; ranks 1..N-1 run the worker loop. The job ends when a client calls
// disco::ShutdownRemoteJob, or after --max-clients clients.
#include <disco/disco.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tools/cli.h"

namespace {

// The options (kept in `opts` and `libs`), each with its line of --help.
void AddOptions(CLI::App* app, disco::ServeOptions* opts, std::vector<std::string>* libs) {
  using disco::cli::AddInt;
  app->add_option("--host", opts->host, "address to listen on (0.0.0.0: every interface)")
      ->type_name("ADDR")
      ->capture_default_str();
  AddInt(app, "--port", &opts->port, 0, 65535, "TCP port (0: any free one, see --port-file)");
  app->add_option("--key", opts->key,
                  "key clients present, 16+ characters (default $DISCO_SERVE_KEY, else generated)")
      ->type_name("KEY");
  app->add_option("--key-file", opts->key_file,
                  "where a generated key goes, yours only (default ~/.disco/serve-PORT.key)")
      ->type_name("FILE");
  app->add_option("--port-file", opts->port_file, "write the port here once listening")
      ->type_name("FILE");
  AddInt(app, "--idle-timeout", &opts->idle_timeout_s, 0, 1 << 30,
         "drop a client silent this many seconds between requests (0: never)");
  AddInt(app, "--request-timeout-ms", &opts->request_timeout_ms, 1, 1 << 30,
         "drop a client whose request moves no byte this long (+1 s per MiB left)");
  AddInt(app, "--max-packet-bytes", &opts->max_packet_bytes, 4096, int64_t{1} << 40,
         "largest request packet accepted");
  AddInt(app, "--max-clients", &opts->max_clients, 0, 1 << 30,
         "stop after this many clients (0: until a client ends the job)");
  app->add_option("--load", *libs, "load this library of worker functions first (repeatable)")
      ->type_name("LIB.so")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

}  // namespace

int main(int argc, char** argv) {
  disco::ServeOptions opts;
  std::vector<std::string> libs;
  CLI::App app(
      "disco-serve: a job that serves its session to one remote controller at a time\n"
      "(disco-remote, disco::Connect); run it under mpirun: disco-run -n 4 disco-serve --port 7070",
      "disco-serve");
  disco::cli::Configure(&app);
  AddOptions(&app, &opts, &libs);
  if (int code = disco::cli::Parse(&app, argc, argv); code >= 0) return code;
  // A server's log is its clients coming and going: info unless the user says otherwise.
  if (std::getenv("DISCO_LOG_LEVEL") == nullptr) disco::SetLogLevel(disco::LogLevel::kInfo);
  return disco::Main(argc, argv, [&](disco::Session& s) {
    if (!libs.empty()) {
      disco::DRef load = s.GetGlobalFunc("disco.load_library");
      for (const std::string& lib : libs) s.CallPacked(load, lib);
      s.SyncAll();  // a library that fails to load ends the job here, naming it
    }
    return disco::Serve(s, opts);
  });
}
