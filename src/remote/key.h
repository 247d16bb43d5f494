// Keys of served jobs. A job served without a key gets a random one (256 bits, hex), written to a
// file only its owner can read; clients of the same user find it there (DefaultKeyFile: one file
// per port under ~/.disco), or take the key from DISCO_SERVE_KEY.
#ifndef DISCO_REMOTE_KEY_H_
#define DISCO_REMOTE_KEY_H_

#include <string>

namespace disco {
namespace remote {

/// Shortest key a user may choose (a generated key is 64 characters).
constexpr size_t kMinKeyChars = 16;

/// 32 random bytes from the kernel, as 64 hex digits.
std::string GenerateKey();
/// $HOME/.disco/serve-PORT.key (HOME from the password database when unset).
std::string DefaultKeyFile(int port);
/// What a key file holds: `key` and a newline.
std::string KeyFileContent(const std::string& key);
/// Writes `key` to `path` readable by its owner only (mode 0600, in a directory made 0700 when
/// missing), atomically (a rename).
void WriteKeyFile(const std::string& path, const std::string& key);
/// The key in `path` (one line). Refuses a file others can read or write, or not owned by this
/// user, as ssh refuses such a private key.
std::string ReadKeyFile(const std::string& path);
/// The key a client presents: `key` when given, else DISCO_SERVE_KEY, else the file `key_file`,
/// else DISCO_SERVE_KEY_FILE, else DefaultKeyFile(port). Throws ValueError naming where it looked
/// when none of them has one. With `source`, says where the key came from ("the key file 'PATH'",
/// "DISCO_SERVE_KEY", "the key given"), for messages about a key the server refused.
std::string ClientKey(const std::string& key, const std::string& key_file, int port,
                      std::string* source = nullptr);

}  // namespace remote
}  // namespace disco

#endif  // DISCO_REMOTE_KEY_H_
