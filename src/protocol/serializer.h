// Serialization of values, commands and replies (format in protocol/frame.h). No MPI here.
#ifndef DISCO_PROTOCOL_SERIALIZER_H_
#define DISCO_PROTOCOL_SERIALIZER_H_

#include <disco/any.h>

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/frame.h"

namespace disco {
namespace protocol {

/// Data of a bytes or tensor argument that travels after its frame, in a broadcast of its own,
/// straight from the sender's memory (no copy into the frame).
struct BulkSegment {
  const void* data;
  size_t size;
};
/// Where the receiver puts such data: memory of the decoded value itself (no copy out of a frame).
struct BulkSlot {
  void* data;
  size_t size;
};

/// Appends one tagged value. With `bulk`, bytes and host tensors of at least `bulk_min` bytes go
/// out of line: the frame holds their metadata and `bulk` gets the data. Throws ValueError for
/// values that cannot cross the wire (Function, Object, non-host tensors), naming the value's type.
void EncodeAny(Writer* w, const Any& value, std::vector<BulkSegment>* bulk = nullptr,
               size_t bulk_min = 0);
/// Reads one tagged value; a DRef becomes DRef::Unowned(register id). An out-of-line value is
/// allocated (at most `max_bulk` bytes) and its destination appended to `bulk`; without `bulk`
/// out-of-line values are a ProtocolError. With `values_left`, the value and each element of its
/// arrays and maps take one from it, and a count beyond what is left is a ProtocolError before
/// room is made for it: a decoded value (an Any, tens of bytes) may come from one byte, so this
/// bounds a message's memory by its values, not only by its bytes.
Any DecodeAny(Reader* r, std::vector<BulkSlot>* bulk = nullptr, size_t max_bulk = 0,
              size_t* values_left = nullptr);

/// A decoded command frame.
struct Command {
  FrameHeader header;
  std::vector<int64_t> kills;
  std::vector<Any> args;
  /// Out-of-line data still to be received, in order, into the values in `args`.
  std::vector<BulkSlot> bulk;
  Action action() const { return static_cast<Action>(header.action); }
};

/// Builds a whole frame (header + payload) in `buf`: kills, then `head` and `args` as one argument
/// list; bytes and tensors of at least `bulk_min` bytes go to `bulk` instead. Returns the frame's
/// size.
size_t EncodeCommand(ByteBuffer* buf, Action action, uint64_t seq,
                     const std::vector<int64_t>& kills, const Any* head, size_t num_head,
                     const Any* args, size_t num_args, std::vector<BulkSegment>* bulk = nullptr,
                     size_t bulk_min = 0);
/// Decodes a whole frame of `size` bytes (header included) into `out`, reusing its vectors.
/// Checks the header, the payload length against `size`, every argument, and that no bytes
/// trail the payload. Out-of-line values are allocated (each at most `max_payload` bytes) and
/// listed in `out->bulk`.
void DecodeCommand(const uint8_t* data, size_t size, size_t max_payload, Command* out);
/// The same, for a frame whose header the caller has already parsed (the worker loop needs its
/// payload length before the rest of the frame arrives).
void DecodeCommand(const FrameHeader& header, const uint8_t* data, size_t size, size_t max_payload,
                   Command* out);

/// An error a worker reports to rank 0.
struct ErrorReport {
  int32_t worker = 0;
  uint64_t seq = 0;
  int64_t reg = 0;
  std::string function;
  std::string message;
};
void EncodeErrorReport(ByteBuffer* buf, const ErrorReport& report);
void EncodeSyncAck(ByteBuffer* buf, uint64_t errors_sent);

/// kUnsendable: the register holds a value that cannot cross the wire (a Function, an Object).
enum class DebugStatus : uint8_t {
  kValue = 0,
  kPoisoned = 1,
  kNoSuchRegister = 2,
  kUnsendable = 3
};
/// `value` for kValue, a string message otherwise.
void EncodeDebugValue(ByteBuffer* buf, uint64_t errors_sent, DebugStatus status, const Any& value);

/// One decoded reply.
struct Reply {
  ReplyKind kind = ReplyKind::kSyncAck;
  uint64_t errors_sent = 0;
  DebugStatus status = DebugStatus::kValue;
  Any value;          // kDebugValue
  ErrorReport error;  // kError
};
void DecodeReply(const uint8_t* data, size_t size, Reply* out);

}  // namespace protocol
}  // namespace disco

#endif  // DISCO_PROTOCOL_SERIALIZER_H_
