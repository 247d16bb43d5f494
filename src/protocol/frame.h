// The disco wire format, described in one place (the header's layout and the wire's codes are
// in protocol/frame_header.h, which includes nothing of disco: bench/sim's skeleton compiles it).
//
// A control frame is broadcast from rank 0 to every worker:
//
//   offset  size  field
//   0       4     magic 0x4F435344 ("DSCO" in little-endian byte order)
//   4       1     version (kVersion)
//   5       1     action (Action)
//   6       2     flags (kFlagNextFrameNonblocking | kFlagCollective, or 0)
//   8       8     sequence number (1, 2, 3, ... per session; workers check it)
//   16      4     payload length in bytes
//   20      4     reserved (0)
//   24      ...   payload
//
// The first DISCO_INLINE_BYTES of a frame travel in one MPI_Bcast (the unused tail of a short
// frame is padding); a frame longer than that sends the rest in a second MPI_Bcast.
//
// Payload: u32 kill count, that many i64 register ids to free before the command runs, u32
// argument count, then the arguments. The first arguments are the action's operands:
//   kCallPacked:          int result register, DRef function, call arguments...
//   kGetGlobalFunc:       int result register, string name
//   kSyncWorker:          int worker id (-1 = all workers: an MPI_Reduce sums their error counts)
//   kDebugGetFromRemote:  int register, int worker id
//   kDebugSetRegister:    int register, int worker id, value
//   kPark:                (none) workers wait without spinning (a nonblocking barrier on the
//                         control communicator, tested between growing sleeps) until rank 0 joins
//                         that barrier just before its next frame
//   kShutdown:            int exit code
//   kKillReg:             (none; the kill list is the command)
//
// An argument is a one-byte TypeCode tag (disco/any.h) and its data. A bytes or tensor argument
// whose tag has the high bit set (kOutOfLine) carries its length but not its data: the data
// follows the frame in a broadcast of its own, one per such argument, in argument order.
//   None: nothing          bool: u8 0|1          int: i64          float: f64 (IEEE)
//   string, bytes: u64 length + bytes            DataType: u8 code, u8 bits, u16 lanes
//   Device: i32 type, i32 id                     Shape: u32 ndim + ndim x i64
//   Tensor (host only): DataType, Shape, u64 byte count + data (row-major)
//   DRef: i64 register id                        Function, Object: never on the wire
//
// Replies from a worker to rank 0 go point to point, as a one-byte ReplyKind and its fields:
//   kSyncAck:    u64 number of error reports this worker has sent so far
//   kDebugValue: u64 error reports sent, u8 status (0 value, 1 poisoned, 2 no such register,
//                3 a value that cannot be sent),
//                then the value (an argument as above) or a string message
//   kError:      i32 worker, u64 sequence, i64 register, string function, string message
//
// Everything is little-endian. Every read is bounds-checked: a truncated, oversized or
// unknown-tag buffer raises ProtocolError naming the fault and its byte offset, and no length
// field is trusted beyond the bytes actually present.
#ifndef DISCO_PROTOCOL_FRAME_H_
#define DISCO_PROTOCOL_FRAME_H_

#include <disco/any.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "protocol/frame_header.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "disco's wire format is little-endian; big-endian hosts need byte swapping in frame.h"
#endif

namespace disco {
namespace protocol {

/// Smallest DISCO_INLINE_BYTES accepted: a header plus a small call.
constexpr size_t kMinInlineBytes = 64;
/// Largest tensor rank accepted on the wire.
constexpr uint32_t kMaxWireNdim = 64;
/// Tag bit of an argument whose data travels out of line.
constexpr uint8_t kOutOfLine = 0x80;
/// Bytes and tensor arguments from this size on travel out of line.
constexpr size_t kOutOfLineMinBytes = 512;

const char* ActionName(Action action);

/// Writes `header` into the first kHeaderBytes of `dst`.
inline void WriteHeader(uint8_t* dst, const FrameHeader& header) {
  std::memcpy(dst, &header, kHeaderBytes);
}
/// Sets the flags of the frame encoded at `dst`.
inline void SetFlags(uint8_t* dst, uint16_t flags) {
  std::memcpy(dst + offsetof(FrameHeader, flags), &flags, sizeof flags);
}
/// Reads and validates a header from `size` bytes: magic, version, action, and a payload length
/// no larger than `max_payload`.
FrameHeader ParseHeader(const uint8_t* data, size_t size, size_t max_payload);

/// A growable byte buffer whose storage is page-aligned and reused: growing keeps the contents,
/// shrinking never frees. Control frames are built and received in place in one of these.
/// What a command, reply or request buffer keeps between messages; larger ones are freed after
/// use (ByteBuffer::ReleaseAbove).
constexpr size_t kKeepBufferBytes = size_t{16} << 20;

class ByteBuffer {
 public:
  ByteBuffer() = default;
  ~ByteBuffer();
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;
  ByteBuffer(ByteBuffer&& other) noexcept;
  ByteBuffer& operator=(ByteBuffer&& other) noexcept;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  /// Makes room for `n` bytes in all, keeping the first size() bytes.
  void Reserve(size_t n);
  /// Sets size() to `n`, growing if needed (new bytes are zero on first growth).
  void Resize(size_t n) {
    if (n > capacity_) Reserve(n);
    size_ = n;
  }
  void Clear() { size_ = 0; }
  /// Frees the memory (size and capacity become 0) when the capacity exceeds `keep` bytes: after
  /// a large message, so that one large transfer does not pin its size for the rest of the job.
  void ReleaseAbove(size_t keep);

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

/// Appends little-endian values to a ByteBuffer.
class Writer {
 public:
  explicit Writer(ByteBuffer* buf) : buf_(buf) {}
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>, "Put of a non-trivial type");
    Append(&value, sizeof(T));
  }
  void Append(const void* data, size_t n) {
    size_t at = buf_->size();
    buf_->Resize(at + n);
    if (n != 0) std::memcpy(buf_->data() + at, data, n);
  }
  void PutString(const char* data, size_t n) {
    Put<uint64_t>(n);
    Append(data, n);
  }
  /// A u32 count, then the values (register lists).
  void PutI64List(const std::vector<int64_t>& values) {
    Put<uint32_t>(static_cast<uint32_t>(values.size()));
    Append(values.data(), values.size() * sizeof(int64_t));
  }
  size_t size() const { return buf_->size(); }
  ByteBuffer* buffer() { return buf_; }

 private:
  ByteBuffer* buf_;
};

/// Bounds-checked little-endian reads. Offsets in errors are relative to the start of the frame
/// (`base_offset` is the position of `data` in it).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, size_t base_offset = 0)
      : data_(data), size_(size), base_(base_offset) {}
  template <typename T>
  T Get(const char* what) {
    T value;
    std::memcpy(&value, Take(sizeof(T), what), sizeof(T));
    return value;
  }
  /// The next `n` bytes; throws ProtocolError when fewer remain.
  const uint8_t* Take(size_t n, const char* what) {
    if (n > size_ - pos_) Truncated(n, what);
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  /// A length field for `what`, checked against the bytes left (each item needs `item_bytes`).
  uint64_t GetLength(const char* what, size_t item_bytes);
  std::string GetString(const char* what);
  /// A u32 count of items that take at least `item_bytes` each, checked against the bytes left.
  uint32_t GetCount(const char* what, size_t item_bytes);
  /// A u32 count and that many i64 values (PutI64List).
  void GetI64List(const char* what, std::vector<int64_t>* out);
  size_t remaining() const { return size_ - pos_; }
  /// Position in the frame (base offset + bytes read).
  size_t offset() const { return base_ + pos_; }
  [[noreturn]] void Fail(const std::string& message, size_t at) const;

 private:
  [[noreturn]] void Truncated(size_t n, const char* what) const;
  const uint8_t* data_;
  size_t size_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace protocol
}  // namespace disco

#endif  // DISCO_PROTOCOL_FRAME_H_
