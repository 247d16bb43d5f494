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

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char kUsage[] =
    "usage: disco-serve [--host ADDR] [--port N] [--key KEY] [--key-file FILE] [--port-file FILE]\n"
    "                   [--idle-timeout S] [--request-timeout-ms MS] [--max-packet-bytes N]\n"
    "                   [--max-clients N] [--load LIB.so]...\n"
    "  --host             address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port             TCP port (default 0: any free port, printed and written to --port-file)\n"
    "  --key              key clients must present, 16 characters or more (default:\n"
    "                     $DISCO_SERVE_KEY; prefer the variable, a flag shows in ps). Without\n"
    "                     either, a random key is generated and written to --key-file\n"
    "  --key-file         where a generated key goes, readable by you only (default\n"
    "                     ~/.disco/serve-PORT.key, where clients of this user look)\n"
    "  --port-file        write the port here once listening\n"
    "  --idle-timeout     drop a client silent this many seconds between requests (default 3600;\n"
    "                     0: never)\n"
    "  --request-timeout-ms  drop a client whose begun request or copy moves no byte for this\n"
    "                     long, plus 1 s per MiB still to move (default 60000)\n"
    "  --max-packet-bytes largest request packet accepted (default 67108864)\n"
    "  --max-clients      stop after this many clients (default 0: until a client ends the job)\n"
    "  --load             load a library of worker functions on every worker first (repeatable)\n";

bool ParseInt(const char* text, long long lo, long long hi, long long* out) {  // NOLINT
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);  // NOLINT(runtime/int)
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  disco::ServeOptions opts;
  std::vector<std::string> libs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "disco-serve: %s needs a value\n%s", a.c_str(), kUsage);
      return 2;
    }
    const char* v = argv[++i];
    long long n = 0;  // NOLINT(runtime/int)
    bool ok = true;
    if (a == "--host") {
      opts.host = v;
    } else if (a == "--port") {
      ok = ParseInt(v, 0, 65535, &n);
      opts.port = static_cast<int>(n);
    } else if (a == "--key") {
      opts.key = v;
    } else if (a == "--key-file") {
      opts.key_file = v;
    } else if (a == "--port-file") {
      opts.port_file = v;
    } else if (a == "--idle-timeout") {
      ok = ParseInt(v, 0, 1 << 30, &n);
      opts.idle_timeout_s = static_cast<int>(n);
    } else if (a == "--request-timeout-ms") {
      ok = ParseInt(v, 1, 1 << 30, &n);
      opts.request_timeout_ms = static_cast<int>(n);
    } else if (a == "--max-packet-bytes") {
      ok = ParseInt(v, 4096, 1LL << 40, &n);
      opts.max_packet_bytes = static_cast<size_t>(n);
    } else if (a == "--max-clients") {
      ok = ParseInt(v, 0, 1 << 30, &n);
      opts.max_clients = static_cast<int>(n);
    } else if (a == "--load") {
      libs.push_back(v);
    } else {
      std::fprintf(stderr, "disco-serve: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "disco-serve: %s: '%s' is not a valid value\n", a.c_str(), v);
      return 2;
    }
  }
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
