#include "session/liveness.h"

#include <cstring>

namespace disco {
namespace liveness {
namespace {

constexpr char kMagic[4] = {'D', 'W', 'D', '2'};

void PutU32(uint8_t* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(at[i]) << (8 * i);
  return v;
}
uint64_t GetU64(const uint8_t* at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
  return v;
}

}  // namespace

JobSecret NewJobSecret() {
  JobSecret s;
  crypto::RandomBytes(s.secret, sizeof s.secret);
  crypto::RandomBytes(&s.job_id, sizeof s.job_id);
  return s;
}

void Encode(const Packet& p, const crypto::HmacSha256& mac, uint8_t* out) {
  std::memset(out, 0, kPacketBytes);
  std::memcpy(out, kMagic, 4);
  out[4] = p.kind;
  PutU32(out + 8, p.sender);
  PutU32(out + 12, p.receiver);
  PutU64(out + 16, p.job_id);
  PutU64(out + 24, p.nonce);
  crypto::Digest d = mac.Mac(out, kMacOffset);
  std::memcpy(out + kMacOffset, d.data(), kMacBytes);
}

Verdict Parse(const uint8_t* data, size_t n, int self, int world, uint64_t job_id, Packet* out) {
  if (n != kPacketBytes || std::memcmp(data, kMagic, 4) != 0) return Verdict::kMalformed;
  if ((data[4] != kPing && data[4] != kPong) || data[5] != 0 || data[6] != 0 || data[7] != 0) {
    return Verdict::kMalformed;
  }
  Packet p;
  p.kind = data[4];
  p.sender = GetU32(data + 8);
  p.receiver = GetU32(data + 12);
  p.job_id = GetU64(data + 16);
  p.nonce = GetU64(data + 24);
  if (p.receiver != static_cast<uint32_t>(self) || p.sender >= static_cast<uint32_t>(world) ||
      p.sender == static_cast<uint32_t>(self)) {
    return Verdict::kMalformed;
  }
  if (p.job_id != job_id) return Verdict::kOtherJob;
  *out = p;
  return Verdict::kAccepted;
}

bool MacValid(const uint8_t* data, const crypto::HmacSha256& mac) {
  crypto::Digest d = mac.Mac(data, kMacOffset);
  return crypto::DigestsEqual(d.data(), data + kMacOffset, kMacBytes);
}

Verdict Decode(const uint8_t* data, size_t n, int self, int world, uint64_t job_id,
               const crypto::HmacSha256& mac, Packet* out) {
  Packet p;
  Verdict v = Parse(data, n, self, world, job_id, &p);
  if (v != Verdict::kAccepted) return v;
  if (!MacValid(data, mac)) return Verdict::kBadMac;
  *out = p;
  return Verdict::kAccepted;
}

}  // namespace liveness
}  // namespace disco
