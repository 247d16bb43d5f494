// The authentication primitives of the liveness datagrams (session/liveness.h) and of the remote
// handshake (remote/socket.h): HMAC-SHA256, random bytes and a constant-time comparison, all from
// OpenSSL's libcrypto (linked privately: nothing of OpenSSL is in disco's public headers).
// Not async-signal-safe: none of these may be called from a signal handler.
#ifndef DISCO_CORE_CRYPTO_H_
#define DISCO_CORE_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct evp_mac_ctx_st;  // OpenSSL's EVP_MAC_CTX (kept out of this header)

namespace disco {
namespace crypto {

using Digest = std::array<uint8_t, 32>;

/// HMAC-SHA256 with a fixed key. The key is set once, in a context kept for the object's life;
/// each MAC runs on a copy of it, so a const object may be used from several threads at once.
class HmacSha256 {
 public:
  HmacSha256() = default;  // no key yet: assign a keyed one before the first Mac
  /// Throws RuntimeError when OpenSSL cannot set up HMAC-SHA256 (e.g. no default provider).
  HmacSha256(const void* key, size_t key_len);
  explicit HmacSha256(const std::string& key) : HmacSha256(key.data(), key.size()) {}

  /// MAC of the concatenation of up to three parts (empty ones may be null). Throws RuntimeError
  /// when OpenSSL fails (out of memory).
  Digest Mac(const void* a, size_t a_len, const void* b = nullptr, size_t b_len = 0,
             const void* c = nullptr, size_t c_len = 0) const;

 private:
  struct FreeContext {
    void operator()(evp_mac_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_mac_ctx_st, FreeContext> keyed_;  // initialized with the key, never updated
};

/// Whether the first `n` bytes of `a` and `b` are equal, in time independent of where they differ
/// (CRYPTO_memcmp).
bool DigestsEqual(const void* a, const void* b, size_t n);

/// Fills `out` with `n` bytes from OpenSSL's random generator (RAND_bytes, seeded by the kernel);
/// throws RuntimeError when it fails.
void RandomBytes(void* out, size_t n);

}  // namespace crypto
}  // namespace disco

#endif  // DISCO_CORE_CRYPTO_H_
