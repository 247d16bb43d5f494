#include "protocol/frame.h"

#include <disco/error.h>

#include <cstdlib>
#include <sstream>

namespace disco {
namespace protocol {

const char* ActionName(Action action) {
  switch (action) {
    case Action::kShutdown:
      return "shutdown";
    case Action::kKillReg:
      return "kill_reg";
    case Action::kGetGlobalFunc:
      return "get_global_func";
    case Action::kCallPacked:
      return "call_packed";
    case Action::kSyncWorker:
      return "sync_worker";
    case Action::kDebugGetFromRemote:
      return "debug_get_from_remote";
    case Action::kPark:
      return "park";
    case Action::kDebugSetRegister:
      return "debug_set_register";
    case Action::kInstallGraph:
      return "install_graph";
    case Action::kReplayGraph:
      return "replay_graph";
    case Action::kFreeGraph:
      return "free_graph";
  }
  return "unknown";
}

FrameHeader ParseHeader(const uint8_t* data, size_t size, size_t max_payload) {
  Reader reader(data, size);
  FrameHeader h;
  // One copy of the whole header (field-by-field reads stall store forwarding), then the checks.
  std::memcpy(&h, reader.Take(kHeaderBytes, "frame header"), kHeaderBytes);
  if (h.magic != kMagic) {
    std::ostringstream os;
    os << "bad frame magic 0x" << std::hex << h.magic << " (expected 0x" << kMagic << ")";
    reader.Fail(os.str(), 0);
  }
  if (h.version != kVersion) {
    reader.Fail("unsupported frame version " + std::to_string(h.version) + " (this build speaks " +
                    std::to_string(kVersion) + ")",
                4);
  }
  if (h.action > kMaxAction) reader.Fail("unknown action " + std::to_string(h.action), 5);
  if ((h.flags & ~kKnownFlags) != 0)
    reader.Fail("unknown frame flags " + std::to_string(h.flags), 6);
  if (h.flags != 0 && h.action != static_cast<uint8_t>(Action::kCallPacked)) {
    reader.Fail("frame flags " + std::to_string(h.flags) + " on a non-call frame", 6);
  }
  if (h.payload_bytes > max_payload) {
    reader.Fail("payload length " + std::to_string(h.payload_bytes) + " exceeds the limit of " +
                    std::to_string(max_payload) + " bytes (DISCO_MAX_FRAME_BYTES)",
                16);
  }
  return h;
}

ByteBuffer::~ByteBuffer() { std::free(data_); }

ByteBuffer::ByteBuffer(ByteBuffer&& other) noexcept
    : data_(other.data_), size_(other.size_), capacity_(other.capacity_) {
  other.data_ = nullptr;
  other.size_ = other.capacity_ = 0;
}

ByteBuffer& ByteBuffer::operator=(ByteBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
  }
  return *this;
}

void ByteBuffer::ReleaseAbove(size_t keep) {
  if (capacity_ <= keep) return;
  std::free(data_);
  data_ = nullptr;
  size_ = capacity_ = 0;
}

void ByteBuffer::Reserve(size_t n) {
  if (n <= capacity_) return;
  constexpr size_t kPage = 4096;
  size_t cap = capacity_ == 0 ? kPage : capacity_;
  while (cap < n) cap = cap > (SIZE_MAX / 2) ? n : cap * 2;
  // Large buffers are freed after use (ReleaseAbove), so they need no room to grow into.
  if (n > kKeepBufferBytes) cap = n;
  cap = (cap + kPage - 1) / kPage * kPage;
  void* fresh = std::aligned_alloc(kPage, cap);
  DISCO_CHECK(fresh != nullptr, RuntimeError)
      << "out of memory growing a buffer to " << cap << " bytes";
  if (size_ != 0) std::memcpy(fresh, data_, size_);
  // Touch the new pages now: first-touch faults on fresh memory are slow here, and a reused
  // buffer then never faults again.
  std::memset(static_cast<uint8_t*>(fresh) + size_, 0, cap - size_);
  std::free(data_);
  data_ = static_cast<uint8_t*>(fresh);
  capacity_ = cap;
}

uint64_t Reader::GetLength(const char* what, size_t item_bytes) {
  size_t at = offset();
  uint64_t n = Get<uint64_t>(what);
  if (item_bytes != 0 && n > remaining() / item_bytes) {
    Fail(std::string(what) + " " + std::to_string(n) + " needs " +
             (item_bytes == 1 ? std::to_string(n) : "more") + " bytes but only " +
             std::to_string(remaining()) + " remain",
         at);
  }
  return n;
}

std::string Reader::GetString(const char* what) {
  uint64_t n = GetLength(what, 1);
  const uint8_t* p = Take(n, what);
  return std::string(reinterpret_cast<const char*>(p), n);
}

uint32_t Reader::GetCount(const char* what, size_t item_bytes) {
  size_t at = offset();
  uint32_t n = Get<uint32_t>(what);
  if (n > remaining() / item_bytes) {
    Fail(std::string(what) + " " + std::to_string(n) + " exceeds the " +
             std::to_string(remaining()) + " bytes left",
         at);
  }
  return n;
}

void Reader::GetI64List(const char* what, std::vector<int64_t>* out) {
  uint32_t n = GetCount(what, sizeof(int64_t));
  out->resize(n);
  const uint8_t* p = Take(n * sizeof(int64_t), what);
  if (n != 0) std::memcpy(out->data(), p, n * sizeof(int64_t));
}

void Reader::Fail(const std::string& message, size_t at) const {
  DISCO_THROW(ProtocolError) << "malformed message at byte offset " << at << ": " << message;
}

void Reader::Truncated(size_t n, const char* what) const {
  Fail("truncated: " + std::to_string(n) + " bytes needed for " + what + ", " +
           std::to_string(size_ - pos_) + " left in a buffer of " + std::to_string(base_ + size_) +
           " bytes",
       offset());
}

}  // namespace protocol
}  // namespace disco
