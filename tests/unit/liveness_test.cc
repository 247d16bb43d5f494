// The liveness datagrams of the watchdog (session/liveness.h): what a receiver accepts, and that
// nothing altered, forged or meant for another rank or job passes.
#include "session/liveness.h"

#include <gtest/gtest.h>

#include <cstring>

namespace disco {
namespace liveness {
namespace {

struct Fixture {
  JobSecret secret = NewJobSecret();
  crypto::HmacSha256 mac{secret.secret, sizeof secret.secret};
  Packet ping() const {
    Packet p;
    p.kind = kPing;
    p.sender = 3;
    p.receiver = 1;
    p.job_id = secret.job_id;
    p.nonce = 12345;
    return p;
  }
};

TEST(LivenessTest, ADatagramRoundTrips) {
  Fixture f;
  uint8_t d[kPacketBytes];
  Encode(f.ping(), f.mac, d);
  Packet got;
  ASSERT_EQ(Decode(d, sizeof d, 1, 4, f.secret.job_id, f.mac, &got), Verdict::kAccepted);
  EXPECT_EQ(got.kind, kPing);
  EXPECT_EQ(got.sender, 3u);
  EXPECT_EQ(got.receiver, 1u);
  EXPECT_EQ(got.job_id, f.secret.job_id);
  EXPECT_EQ(got.nonce, 12345u);
}

TEST(LivenessTest, EveryAlteredBitIsRefused) {
  Fixture f;
  uint8_t d[kPacketBytes];
  Encode(f.ping(), f.mac, d);
  for (size_t bit = 0; bit < kPacketBytes * 8; ++bit) {
    uint8_t x[kPacketBytes];
    std::memcpy(x, d, sizeof x);
    x[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    Packet got;
    EXPECT_NE(Decode(x, sizeof x, 1, 4, f.secret.job_id, f.mac, &got), Verdict::kAccepted)
        << "bit " << bit;
  }
}

TEST(LivenessTest, OtherRanksJobsKeysAndSizesAreRefused) {
  Fixture f;
  uint8_t d[kPacketBytes];
  Encode(f.ping(), f.mac, d);
  Packet got;
  EXPECT_EQ(Decode(d, sizeof d, 2, 4, f.secret.job_id, f.mac, &got), Verdict::kMalformed);
  EXPECT_EQ(Decode(d, sizeof d, 1, 3, f.secret.job_id, f.mac, &got), Verdict::kMalformed);
  EXPECT_EQ(Decode(d, sizeof d, 1, 4, f.secret.job_id + 1, f.mac, &got), Verdict::kOtherJob);
  EXPECT_EQ(Decode(d, sizeof d - 1, 1, 4, f.secret.job_id, f.mac, &got), Verdict::kMalformed);
  Fixture other;  // another job's secret, the same job id: the MAC fails
  EXPECT_EQ(Decode(d, sizeof d, 1, 4, f.secret.job_id, other.mac, &got), Verdict::kBadMac);
  // A ping reflected as a pong (kind changed, MAC kept) does not pass.
  uint8_t pong[kPacketBytes];
  std::memcpy(pong, d, sizeof pong);
  pong[4] = kPong;
  EXPECT_EQ(Decode(pong, sizeof pong, 1, 4, f.secret.job_id, f.mac, &got), Verdict::kBadMac);
  // A datagram to itself is not taken.
  Packet self = f.ping();
  self.sender = 1;
  Encode(self, f.mac, d);
  EXPECT_EQ(Decode(d, sizeof d, 1, 4, f.secret.job_id, f.mac, &got), Verdict::kMalformed);
}

TEST(LivenessTest, SecretsAreFreshEachTime) {
  JobSecret a = NewJobSecret(), b = NewJobSecret();
  EXPECT_NE(std::memcmp(a.secret, b.secret, sizeof a.secret), 0);
  EXPECT_NE(a.job_id, b.job_id);
}

}  // namespace
}  // namespace liveness
}  // namespace disco
