// SHA-256 against the examples of FIPS 180-4 (NIST's "SHA256.pdf" and the one-million-'a' message),
// and HMAC-SHA256 against the test cases of RFC 4231.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace disco {
namespace crypto {
namespace {

std::string Hex(const uint8_t* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}
std::string Hex(const Digest& d) { return Hex(d.data(), d.size()); }
std::string HashHex(const std::string& m) { return Hex(Sha256Of(m.data(), m.size())); }

TEST(Sha256Test, Fips180Examples) {
  EXPECT_EQ(HashHex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HashHex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HashHex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(HashHex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalUpdatesMatchOneShotAtEveryPadBoundary) {
  for (size_t n : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000}) {
    std::string m(n, '\0');
    for (size_t i = 0; i < n; ++i) m[i] = static_cast<char>(i * 7 + 3);
    for (size_t split : {size_t{0}, size_t{1}, n / 2, n}) {
      if (split > n) continue;
      Sha256 h;
      h.Update(m.data(), split);
      h.Update(m.data() + split, n - split);
      EXPECT_EQ(Hex(h.Final()), HashHex(m)) << n << " bytes split at " << split;
    }
  }
}

struct HmacCase {
  std::string key, data, mac;
};

TEST(HmacSha256Test, Rfc4231TestCases) {
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  const std::string big_key(131, '\xaa');
  const std::vector<HmacCase> cases = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {big_key, "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {big_key,
       "This is a test using a larger than block-size key and a larger than block-size data. The "
       "key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const HmacCase& c : cases) {
    EXPECT_EQ(Hex(HmacSha256(c.key).Mac(c.data.data(), c.data.size())), c.mac) << c.data;
  }
  // Test case 5: the MAC truncated to 128 bits.
  Digest d = HmacSha256(std::string(20, '\x0c')).Mac("Test With Truncation", 20);
  EXPECT_EQ(Hex(d.data(), 16), "a3b6167473100ee06e0c796c2955552b");
}

TEST(HmacSha256Test, PartsAreConcatenatedAndTheKeyedStateIsReusable) {
  HmacSha256 mac("Jefe");
  const std::string m = "what do ya want for nothing?";
  Digest whole = mac.Mac(m.data(), m.size());
  EXPECT_EQ(mac.Mac(m.data(), 4, m.data() + 4, 10, m.data() + 14, m.size() - 14), whole);
  EXPECT_EQ(mac.Mac(m.data(), m.size()), whole);  // the precomputed pads are not consumed
}

TEST(HmacSha256Test, DigestsEqualComparesEveryByte) {
  Digest a = Sha256Of("x", 1), b = a;
  EXPECT_TRUE(DigestsEqual(a.data(), b.data(), a.size()));
  for (size_t i = 0; i < b.size(); ++i) {
    Digest c = a;
    c[i] ^= 1;
    EXPECT_FALSE(DigestsEqual(a.data(), c.data(), a.size())) << i;
  }
}

TEST(HmacSha256Test, RandomBytesAreNotAllTheSame) {
  uint8_t a[32], b[32];
  RandomBytes(a, sizeof a);
  RandomBytes(b, sizeof b);
  EXPECT_FALSE(DigestsEqual(a, b, sizeof a));
}

}  // namespace
}  // namespace crypto
}  // namespace disco
