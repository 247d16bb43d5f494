/// \file disco/remote.h
/// \brief Remote sessions: a controller outside the MPI job, attached over TCP.
///
/// A long-running job serves its session (`disco-serve`, or `disco::Serve` from a program of
/// one's own): rank 0 listens on a TCP port and forwards each request of one client at a time
/// into the job's session; ranks 1..N-1 run the ordinary worker loop. `disco::Connect` returns a
/// `Session` with the same API as in the job: functions, calls, DRefs, syncs, debug reads and
/// writes, collectives, `CopyToWorker0` / `CopyFromWorker0` (host tensors, streamed in chunks
/// straight from and into tensor memory on both ends).
///
/// Every request is answered before the next one goes (a call costs one network round trip);
/// errors keep their type across the wire (ValueError stays ValueError, a worker's failure is a
/// RemoteError naming the worker). DRefs the client drops are freed with its next request; the
/// registers of a client that leaves, cleanly or not, are freed on every worker and the job
/// waits for the next client. A second client while one is attached is refused as busy.
///
/// Wire format: src/remote/rpc.h. Handshake: src/remote/socket.h.
#ifndef DISCO_REMOTE_H_
#define DISCO_REMOTE_H_

#include <disco/session.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace disco {

/// Client-side settings of `Connect`.
struct ConnectOptions {
  /// Deadline for the TCP connection and the handshake.
  int connect_timeout_ms = 10000;
  /// Deadline for each answer of the server; -1 waits forever (a SyncAll may wait for a long
  /// computation on the workers).
  int reply_timeout_ms = -1;
  /// Tensor copies travel in packets of at most this size (and at most the server's limit).
  size_t chunk_bytes = size_t{4} << 20;
  /// Largest answer accepted (a debug read of a big tensor); the server refuses to send more,
  /// with an error that says so.
  size_t max_reply_bytes = size_t{1} << 30;
  /// Where to read the key when none is given and DISCO_SERVE_KEY is unset; empty:
  /// DISCO_SERVE_KEY_FILE, else ~/.disco/serve-PORT.key (written by a server started without a
  /// key).
  std::string key_file;
};

/// Attaches to the session served at host:port with `key`; an empty key is taken from
/// DISCO_SERVE_KEY, else from the key file (ConnectOptions::key_file). Raises RuntimeError when
/// nothing listens or the server refuses (the message names the reason: wrong key, and where the
/// key came from; wrong protocol version; busy with another client), and when the other end does
/// not prove that it holds the key (it is not the server: another process may hold the port). The
/// key never travels: client and server prove to each other that they hold it (challenge and
/// response, HMAC-SHA256), the client first; see src/remote/socket.h.
Session Connect(const std::string& host, int port, const std::string& key,
                const ConnectOptions& options = {});

/// Ends the whole served job with `exit_code` (a plain `Session::Shutdown` of a remote session
/// only detaches the client). `session` must come from `Connect`.
void ShutdownRemoteJob(Session& session, int exit_code = 0);

/// Server-side settings of `Serve` (and of `disco-serve`'s flags).
struct ServeOptions {
  /// Address to listen on: loopback by default; "0.0.0.0" for every interface.
  std::string host = "127.0.0.1";
  /// 0 picks a free port (see `port_file`).
  int port = 0;
  /// Clients must present this key (at least 16 characters); empty: `DISCO_SERVE_KEY`, and if
  /// that is unset too, a random 256-bit key is generated and written to `key_file`, readable by
  /// its owner only (removed when the server ends). A server never accepts clients without a key.
  std::string key;
  /// Where a generated key goes; empty: ~/.disco/serve-PORT.key, where Connect looks by default.
  std::string key_file;
  /// When set, the port is written to this file (atomically) once the server listens.
  std::string port_file;
  /// A client silent for this long between requests is disconnected (0: never).
  int idle_timeout_s = 3600;
  /// Once a request (or an answer, or a tensor copy) has begun, the client is dropped when no byte
  /// of it moves for this long plus a second per MiB still to move (the limit starts again with
  /// every byte that moves): a slow client, or one on a loaded machine, is waited for; a silent
  /// one is not. Each step of a handshake (the hello, then the proof of the key) must be complete
  /// within 5 s, however it is paced. Handshakes run side by side: slow or silent connections
  /// cannot keep a client with the key out, and wrong keys are answered later with each failure
  /// from the same network (DISCO_SERVE_PEER_PREFIX).
  int request_timeout_ms = 60000;
  /// Largest request packet accepted; longer lengths are refused before anything is allocated.
  size_t max_packet_bytes = size_t{64} << 20;
  /// Stop after serving this many clients (0: serve until a client ends the job).
  int max_clients = 0;
};

/// Serves `session` to remote clients until one of them calls ShutdownRemoteJob (its exit code is
/// returned) or `max_clients` have come and gone (returns 0). Run on rank 0 as the controller of
/// `disco::Main`.
int Serve(Session& session, const ServeOptions& options);

}  // namespace disco

#endif  // DISCO_REMOTE_H_
