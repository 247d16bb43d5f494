#include "session/liveness.h"

#include <cstring>

#include "core/text.h"

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

// Each string field of a state, in order, with its size.
template <typename F>
void ForEachString(RankState* s, F f) {
  f(s->action, sizeof s->action);
  f(s->function, sizeof s->function);
  f(s->activity, sizeof s->activity);
  f(s->foreign_call, sizeof s->foreign_call);
  f(s->foreign_caller, sizeof s->foreign_caller);
}

size_t PacketBytes(uint8_t kind) { return kind == kState ? kStatePacketBytes : kPacketBytes; }

void PutHeader(const Packet& p, uint8_t* out) {
  std::memcpy(out, kMagic, 4);
  out[4] = p.kind;
  PutU32(out + 8, p.sender);
  PutU32(out + 12, p.receiver);
  PutU64(out + 16, p.job_id);
  PutU64(out + 24, p.nonce);
}

crypto::Digest MacOf(const uint8_t* data, size_t n, const crypto::HmacSha256& mac) {
  return n > kPacketBytes ? mac.Mac(data, kMacOffset, data + kPacketBytes, n - kPacketBytes)
                          : mac.Mac(data, kMacOffset);
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
  PutHeader(p, out);
  crypto::Digest d = MacOf(out, kPacketBytes, mac);
  std::memcpy(out + kMacOffset, d.data(), kMacBytes);
}

void EncodeState(const Packet& p, const RankState& state, const crypto::HmacSha256& mac,
                 uint8_t* out) {
  std::memset(out, 0, kStatePacketBytes);
  PutHeader(p, out);
  uint8_t* at = out + kPacketBytes;
  PutU64(at, state.seq);
  PutU64(at + 8, state.elapsed_ms);
  PutU32(at + 16, state.flags);
  PutU32(at + 20, static_cast<uint32_t>(state.peer));
  at += 24;
  RankState copy = state;
  ForEachString(&copy, [&](char* field, size_t size) {
    field[size - 1] = '\0';
    std::memcpy(at, field, size);
    at += size;
  });
  crypto::Digest d = MacOf(out, kStatePacketBytes, mac);
  std::memcpy(out + kMacOffset, d.data(), kMacBytes);
}

RankState DecodeState(const uint8_t* data) {
  RankState s;
  const uint8_t* at = data + kPacketBytes;
  s.seq = GetU64(at);
  s.elapsed_ms = GetU64(at + 8);
  s.flags = GetU32(at + 16);
  s.peer = static_cast<int32_t>(GetU32(at + 20));
  at += 24;
  ForEachString(&s, [&](char* field, size_t size) {
    std::memcpy(field, at, size);
    at += size;
  });
  MakePrintable(&s);
  return s;
}

void MakePrintable(RankState* state) {
  ForEachString(state,
                [](char* field, size_t size) { text::SignalSafePrintableUtf8(field, size); });
}

Verdict Parse(const uint8_t* data, size_t n, int self, int world, uint64_t job_id, Packet* out) {
  if (n < kPacketBytes || std::memcmp(data, kMagic, 4) != 0) return Verdict::kMalformed;
  if (data[4] < kPing || data[4] > kFired || data[5] != 0 || data[6] != 0 || data[7] != 0 ||
      n != PacketBytes(data[4])) {
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

bool MacValid(const uint8_t* data, size_t n, const crypto::HmacSha256& mac) {
  crypto::Digest d = MacOf(data, n, mac);
  return crypto::DigestsEqual(d.data(), data + kMacOffset, kMacBytes);
}

Verdict Decode(const uint8_t* data, size_t n, int self, int world, uint64_t job_id,
               const crypto::HmacSha256& mac, Packet* out) {
  Packet p;
  Verdict v = Parse(data, n, self, world, job_id, &p);
  if (v != Verdict::kAccepted) return v;
  if (!MacValid(data, n, mac)) return Verdict::kBadMac;
  *out = p;
  return Verdict::kAccepted;
}

}  // namespace liveness
}  // namespace disco
