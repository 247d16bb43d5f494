#include "core/crypto.h"

#include <disco/error.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <algorithm>

namespace disco {
namespace crypto {
namespace {

// What OpenSSL said about its latest failure (its thread's error queue, which this empties).
std::string OpenSslReason() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "OpenSSL gave no reason";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

#define DISCO_OPENSSL_CHECK(cond, what)                                               \
  DISCO_CHECK(cond, RuntimeError) << "OpenSSL's libcrypto could not " << what << ": " \
                                  << OpenSslReason()

// OpenSSL frees its global state in an atexit handler unless told otherwise; the watchdog thread
// may still be MACing a datagram when a program calls exit(), so disco asks it not to (the memory
// goes with the process). When another library initialized OpenSSL first, its choice stands.
void InitOnce() {
  static const bool done = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  DISCO_OPENSSL_CHECK(done, "initialize");
}

}  // namespace

void HmacSha256::FreeContext::operator()(evp_mac_ctx_st* ctx) const { EVP_MAC_CTX_free(ctx); }

HmacSha256::HmacSha256(const void* key, size_t key_len) {
  InitOnce();
  // Fetched once per key, not per MAC: the context keeps its own reference to the algorithm.
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, OSSL_MAC_NAME_HMAC, nullptr);
  DISCO_OPENSSL_CHECK(hmac != nullptr, "fetch HMAC (is its default provider available?)");
  keyed_.reset(EVP_MAC_CTX_new(hmac));
  EVP_MAC_free(hmac);
  DISCO_OPENSSL_CHECK(keyed_ != nullptr, "allocate an HMAC context");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_END};
  static const unsigned char kNoKey = 0;  // an empty key still has to be a key, not "the same"
  const unsigned char* k = key_len > 0 ? static_cast<const unsigned char*>(key) : &kNoKey;
  DISCO_OPENSSL_CHECK(EVP_MAC_init(keyed_.get(), k, key_len, params) == 1,
                      "key HMAC-SHA256 (" << key_len << "-byte key)");
}

Digest HmacSha256::Mac(const void* a, size_t a_len, const void* b, size_t b_len, const void* c,
                       size_t c_len) const {
  DISCO_ICHECK(keyed_ != nullptr) << "HMAC-SHA256 used before it was given a key";
  std::unique_ptr<evp_mac_ctx_st, FreeContext> ctx(EVP_MAC_CTX_dup(keyed_.get()));
  DISCO_OPENSSL_CHECK(ctx != nullptr, "copy an HMAC-SHA256 context");
  const struct {
    const void* data;
    size_t len;
  } parts[] = {{a, a_len}, {b, b_len}, {c, c_len}};
  for (const auto& part : parts) {
    if (part.len == 0) continue;
    DISCO_OPENSSL_CHECK(
        EVP_MAC_update(ctx.get(), static_cast<const unsigned char*>(part.data), part.len) == 1,
        "compute an HMAC-SHA256");
  }
  Digest out;
  size_t out_len = 0;
  DISCO_OPENSSL_CHECK(EVP_MAC_final(ctx.get(), out.data(), &out_len, out.size()) == 1,
                      "finish an HMAC-SHA256");
  DISCO_ICHECK_EQ(out_len, out.size());
  return out;
}

bool DigestsEqual(const void* a, const void* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

void RandomBytes(void* out, size_t n) {
  InitOnce();
  unsigned char* p = static_cast<unsigned char*>(out);
  while (n > 0) {  // RAND_bytes takes an int
    const int k = static_cast<int>(std::min<size_t>(n, size_t{1} << 30));
    DISCO_OPENSSL_CHECK(RAND_bytes(p, k) == 1, "draw " << k << " random bytes");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace crypto
}  // namespace disco

#undef DISCO_OPENSSL_CHECK
