// The server end of remote sessions, on rank 0 of a job: Serve, the generated key file and its
// guard on every rank. An acceptor thread runs handshakes (acceptor.h, handshake.h; it answers
// "busy" while a client is attached), and the main thread, which alone touches the session (MPI
// stays in one thread), serves one client's requests at a time (connection.h).
#include <disco/files.h>
#include <disco/log.h>
#include <disco/remote.h>
#include <disco/worker.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/exit_cleanup.h"
#include "remote/acceptor.h"
#include "remote/connection.h"
#include "remote/key.h"
#include "remote/rpc.h"
#include "remote/socket.h"
#include "session/session_impl.h"

namespace disco {
namespace {

using remote::Socket;

// `path` from the root (clients run in other directories).
std::string AbsolutePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[4096];
  return getcwd(cwd, sizeof cwd) != nullptr ? std::string(cwd) + "/" + path : path;
}

// Whether `host` resolves to a loopback address (by its address, not its spelling).
bool IsLoopback(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  if (getaddrinfo(host.empty() ? "localhost" : host.c_str(), nullptr, &hints, &res) != 0) {
    return false;
  }
  bool loopback = res != nullptr;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      loopback &= (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      loopback &= IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    }
  }
  freeaddrinfo(res);
  return loopback;
}

void WritePortFile(const std::string& path, int port) {
  // Created beside `path` (O_EXCL, O_NOFOLLOW: a link planted there is not written through), 0600,
  // then renamed onto it.
  try {
    AtomicFile file(path);
    file.Write(std::to_string(port) + "\n");
    file.Commit();
  } catch (const RuntimeError& e) {
    DISCO_THROW(ValueError) << "cannot write the port file '" << path << "': " << e.what();
  }
}

// ---- The generated key file on every rank ------------------------------------------------------
// Rank 0 alone cannot promise to remove it: MPICH's hydra SIGKILLs every rank once the first one
// exits on the launcher's SIGTERM or SIGINT, often before rank 0 has run its handler. So every rank
// registers the file (with its content: a rank on another node, or any rank after the job served,
// leaves alone a file that another server wrote at the same path), and the first rank the signal
// ends removes it before its exit lets the launcher kill the others.

// Registers `path` for removal on this rank's abnormal exit, while it holds `content`.
void GuardKeyFile(const std::string& path, const std::string& content) {
  if (!exit_cleanup::RegisterFile(path, content)) {
    DISCO_LOG(WARN) << "disco-serve: the key file '" << path
                    << "' cannot be registered for removal on a signal (its path is too long, "
                       "or too many files are registered): it may outlive a killed job";
  }
}

// Run by every worker: the key file of the job's current server (one at a time: Serve again
// replaces it). Worker 0 is rank 0, which guards the file itself.
constexpr char kGuardKeyFileFunction[] = "disco.serve.guard_key_file";
DISCO_REGISTER_GLOBAL(kGuardKeyFileFunction)
    .set_body_typed(
        [](std::string path, std::string content) {
          if (ThisWorker().worker_id == 0) return;
          static std::string guarded;
          if (!guarded.empty()) exit_cleanup::UnregisterFile(guarded);
          guarded = path;
          GuardKeyFile(path, content);
        },
        {"path", "content"});

// Every worker guards the key file before a client can learn of the server (the port file).
void GuardKeyFileOnEveryRank(Session& session, const std::string& path,
                             const std::string& content) {
  session.CallPacked(session.GetGlobalFunc(kGuardKeyFileFunction), path, content);
  session.SyncAll();
}

// A client that stalls inside a request (or stops taking its reply) holds the whole job: with
// DISCO_TIMEOUT set, it is dropped once no byte moved for that long, if that is sooner.
ServeOptions PerClientOptions(Session& session, const ServeOptions& options) {
  ServeOptions per_client = options;
  const int64_t timeout_s = session.impl()->config().timeout_s;
  if (timeout_s > 0 && timeout_s < INT32_MAX / 1000 &&
      (per_client.request_timeout_ms <= 0 || per_client.request_timeout_ms > timeout_s * 1000)) {
    per_client.request_timeout_ms = static_cast<int>(timeout_s * 1000);
  }
  return per_client;
}

// The server's lines on stdout: where it listens, where the generated key is (`key_file`, when
// one was generated), and a warning off loopback.
void Announce(Session& session, const ServeOptions& options, int port,
              const std::string& key_file) {
  std::printf("disco-serve: listening on %s:%d, %d workers in %d groups\n", options.host.c_str(),
              port, session.num_workers(), session.num_groups());
  if (!key_file.empty()) {
    std::printf(
        "disco-serve: no key was given: clients of this user find the generated key in %s "
        "(readable by you only; removed when the job ends)\n",
        AbsolutePath(key_file).c_str());
  }
  if (!IsLoopback(options.host)) {
    std::printf(
        "disco-serve: %s is not loopback: the data travel in clear text (an "
        "SSH tunnel to a loopback server keeps them private)\n",
        options.host.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int Serve(Session& session, const ServeOptions& options) {
  DISCO_CHECK(session.impl() != nullptr, ValueError)
      << "Serve needs the job's own session (rank 0 of disco::Main), not a remote one";
  DISCO_CHECK(options.max_packet_bytes > remote::ChunkOverheadBytes() + 1024, ValueError)
      << "Serve: max_packet_bytes " << options.max_packet_bytes << " is too small";
  // Never without a key: a client with the key can run any code as the job's owner (it can load
  // libraries), and loopback is shared by every user of the machine.
  std::string key = options.key;
  if (key.empty()) key = env::GetString("DISCO_SERVE_KEY");
  DISCO_CHECK(key.empty() || key.size() >= remote::kMinKeyChars, ValueError)
      << "Serve: the key has " << key.size() << " characters; use at least " << remote::kMinKeyChars
      << " (or none: a random key is generated and written to a file "
      << "only you can read)";
  Socket listener = Socket::Listen(options.host, options.port, /*backlog=*/64);
  int port = listener.port();
  std::string key_file;
  // The generated key file goes when the server ends: by this destructor, or, when the job ends
  // without running it (SIGTERM or SIGINT, a fatal error, the watchdog), by core/exit_cleanup.h
  // on whichever rank ends first (GuardKeyFileOnEveryRank).
  struct RemoveKeyFile {
    std::string path;
    ~RemoveKeyFile() {
      if (path.empty()) return;
      unlink(path.c_str());
      exit_cleanup::UnregisterFile(path);
    }
  } remove_key_file;
  std::unique_ptr<RemovalWatcher> key_watcher;  // released before remove_key_file removes it
  if (key.empty()) {
    key = remote::GenerateKey();
    key_file = options.key_file.empty() ? remote::DefaultKeyFile(port) : options.key_file;
    remote::WriteKeyFile(key_file, key);
    remove_key_file.path = AbsolutePath(key_file);
    GuardKeyFile(remove_key_file.path, remote::KeyFileContent(key));
    GuardKeyFileOnEveryRank(session, remove_key_file.path, remote::KeyFileContent(key));
    // And when this process ends in a way no handler sees (a SIGKILL, or a launcher's SIGKILL
    // cutting the handler short on a loaded machine): a watcher process removes it.
    key_watcher = std::make_unique<RemovalWatcher>(std::vector<RemovalWatcher::Entry>{
        {remove_key_file.path, false, remote::KeyFileContent(key)}});
  }
  if (!options.port_file.empty()) WritePortFile(options.port_file, port);
  const ServeOptions per_client = PerClientOptions(session, options);
  Announce(session, options, port, key_file);

  remote::Acceptor acceptor(&listener, key,
                            static_cast<int>(env::GetInt("DISCO_SERVE_PEER_PREFIX", 8, 32)));
  for (int served = 0; options.max_clients == 0 || served < options.max_clients; ++served) {
    int exit_code = -1;
    bool end_job;
    session.impl()->ParkWorkers();  // no client: workers sleep until one comes
    {
      remote::ClientConnection client(&session, acceptor.Next(), per_client,
                                      [&] { acceptor.Release(); });
      end_job = client.Serve(&exit_code);
    }
    if (end_job) {
      DISCO_LOG(INFO) << "disco-serve: a client ended the job with exit code " << exit_code;
      return exit_code;
    }
  }
  return 0;
}

}  // namespace disco
