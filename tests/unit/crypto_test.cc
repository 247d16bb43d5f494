// core/crypto.h, OpenSSL's libcrypto underneath: HMAC-SHA256 against the test cases of RFC 4231
// (the liveness datagrams and the remote handshake keep their MACs), the constant-time comparison
// and the random bytes.
#include "core/crypto.h"

#include <disco/error.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
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

TEST(HmacSha256Test, AnEmptyKeyIsAKeyAndAKeyedObjectMoves) {
  // HMAC-SHA256("", ""), as Python's hmac module computes it.
  EXPECT_EQ(Hex(HmacSha256(std::string()).Mac(nullptr, 0)),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  HmacSha256 later;  // unkeyed, as the watchdog's is until a job starts
  EXPECT_THROW(later.Mac("x", 1), InternalError);
  later = HmacSha256("Jefe");
  EXPECT_EQ(Hex(later.Mac("what do ya want for nothing?", 28)),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(HmacSha256Test, OneKeyedObjectServesSeveralThreads) {
  const HmacSha256 mac("Jefe");
  const std::string m = "what do ya want for nothing?";
  const Digest want = mac.Mac(m.data(), m.size());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (mac.Mac(m.data(), 4, m.data() + 4, m.size() - 4) != want) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(HmacSha256Test, DigestsEqualComparesEveryByte) {
  Digest a = HmacSha256("k").Mac("x", 1), b = a;
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
  std::vector<uint8_t> none(0);
  RandomBytes(none.data(), 0);  // nothing asked, nothing drawn
}

}  // namespace
}  // namespace crypto
}  // namespace disco
