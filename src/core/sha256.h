// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained: the liveness pings of the
// watchdog and the handshake of remote sessions authenticate with them (no OpenSSL dependency).
// The compression has no branches or table lookups that depend on the data; compare MACs with
// DigestsEqual, whose time does not depend on where they differ.
#ifndef DISCO_CORE_SHA256_H_
#define DISCO_CORE_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace disco {
namespace crypto {

using Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t n);
  /// The digest of everything passed to Update; the object is then spent (construct a new one).
  Digest Final();

 private:
  void Block(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

/// SHA-256 of `data`.
Digest Sha256Of(const void* data, size_t n);

/// HMAC-SHA256 with a fixed key: the padded key's inner and outer states are computed once, so a
/// MAC of a short message costs two compression rounds plus the message's.
class HmacSha256 {
 public:
  HmacSha256() = default;
  HmacSha256(const void* key, size_t key_len);
  explicit HmacSha256(const std::string& key) : HmacSha256(key.data(), key.size()) {}
  /// MAC of the concatenation of up to three parts (empty ones may be null).
  Digest Mac(const void* a, size_t a_len, const void* b = nullptr, size_t b_len = 0,
             const void* c = nullptr, size_t c_len = 0) const;

 private:
  Sha256 inner_, outer_;  // states after the ipad / opad block
};

/// Whether the first `n` bytes of `a` and `b` are equal, in time independent of where they differ.
bool DigestsEqual(const void* a, const void* b, size_t n);

/// Fills `out` with `n` bytes from the kernel's random source (getrandom); throws RuntimeError when
/// it fails.
void RandomBytes(void* out, size_t n);

}  // namespace crypto
}  // namespace disco

#endif  // DISCO_CORE_SHA256_H_
