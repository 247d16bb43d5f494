// The remote-session wire format, after the handshake of remote/socket.h. Every message is a
// packet (u64 little-endian length, then the body); lengths are checked against the receiver's
// limit before anything is allocated.
//
// Request body:
//   u8  op (Op)
//   u32 number of registers the client has dropped since its last request, then that many i64
//       register ids (freed before the op runs)
//   u32 operand count, then the operands as tagged values (protocol/frame.h's argument encoding;
//       a DRef is its register id, a tensor travels by value)
// Operands per op:
//   kInfo:          int reply limit, int chunk size -> int workers, int groups, int max packet
//   kGetGlobalFunc: string name                     -> DRef
//   kCall:          DRef function, arguments...     -> DRef
//   kCopyTo:        DRef tensor, DataType, Shape, int bytes -> (none); chunks follow the request
//   kCopyFrom:      DRef tensor, DataType, Shape, int bytes -> (none); chunks follow the reply
//   kSyncWorker:    int worker                      -> (none)
//   kSyncAll:       (none)                          -> (none)
//   kDebugGet:      int register, int worker        -> value
//   kDebugSet:      int register, int worker, value -> (none)
//   kDetach:        (none)                          -> (none); the server closes the connection
//   kShutdownJob:   int exit code                   -> (none); the job ends
//
// Reply body:
//   u8 status: 0 ok, then u32 count and the results as tagged values;
//              1 error, then u8 ErrorKind, i32 worker (RemoteError; -1 otherwise), string message
//
// Tensor data (kCopyTo, kCopyFrom) travels as chunk packets after the request (to the server) or
// after an ok reply (to the client): body = u8 kChunkTag, u64 byte offset, then the data, in
// order, each at most the smaller limit of the two ends in all. A kCopyTo the server cannot honour
// (no such register, wrong dtype, shape or byte count) still reads its announced bytes of chunks,
// then answers with the error.
#ifndef DISCO_REMOTE_RPC_H_
#define DISCO_REMOTE_RPC_H_

#include <disco/any.h>
#include <disco/error.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "remote/socket.h"

namespace disco {
namespace remote {

/// Request operations. Values are part of the wire format: never renumber.
enum class Op : uint8_t {
  kInfo = 1,
  kGetGlobalFunc = 2,
  kCall = 3,
  kCopyTo = 4,
  kCopyFrom = 5,
  kSyncWorker = 6,
  kSyncAll = 7,
  kDebugGet = 8,
  kDebugSet = 9,
  kDetach = 10,
  kShutdownJob = 11,
  // Capture and replay: begin [inputs] -> placeholder ids; end [discard] -> [graph id, calls];
  // replay [graph id, inputs...]; free [graph ids...].
  kCaptureBegin = 12,
  kCaptureEnd = 13,
  kReplayGraph = 14,
  kFreeGraph = 15,
};
constexpr uint8_t kMaxOp = 15;
const char* OpName(Op op);

/// The error types of disco/error.h on the wire.
enum class ErrorKind : uint8_t {
  kError = 0,
  kValue = 1,
  kType = 2,
  kProtocol = 3,
  kRuntime = 4,
  kInternal = 5,
  kRemote = 6,
};

constexpr uint8_t kReplyOk = 0;
constexpr uint8_t kReplyError = 1;
constexpr uint8_t kChunkTag = 0xC5;

/// Bytes a chunk packet adds to its data: the length prefix, the tag and the offset (measured by
/// encoding a header, not assumed).
size_t ChunkOverheadBytes();

/// The most values (operands, and the elements of their arrays and maps) a request of
/// `request_bytes` decodes to: kRequestValuesFree, plus one per kRequestBytesPerValue bytes. A
/// decoded value (an Any) takes tens of bytes and may come from one (None), so the server's memory
/// for a request stays within a small multiple of its bytes; a request over the bound is a
/// ProtocolError before its values are made. Bulk data travels in tensors and bytes, which count
/// one value each.
constexpr size_t kRequestValuesFree = 4096;
constexpr size_t kRequestBytesPerValue = 8;
size_t MaxRequestValues(size_t request_bytes);

/// A decoded request.
struct Request {
  Op op = Op::kInfo;
  std::vector<int64_t> frees;
  std::vector<Any> operands;
};
/// Builds a request body in `buf`.
void EncodeRequest(protocol::ByteBuffer* buf, Op op, const std::vector<int64_t>& frees,
                   const Any* operands, size_t num_operands);
/// Parses a request body; malformed bodies (and bodies over MaxRequestValues) raise ProtocolError
/// with the byte offset.
void DecodeRequest(const uint8_t* data, size_t size, Request* out);

/// Builds an ok reply with `results`.
void EncodeOkReply(protocol::ByteBuffer* buf, const Any* results, size_t num_results);
/// Builds an error reply for the exception `e` (its type travels as an ErrorKind).
void EncodeErrorReply(protocol::ByteBuffer* buf, const std::exception& e);
/// Parses a reply: returns its results, or throws the error it carries (with its original type).
std::vector<Any> DecodeReply(const uint8_t* data, size_t size);

/// Sends `n` bytes of `data` as chunk packets of at most `max_packet` bytes each. With `packet`,
/// that packet (a request or reply body) goes first, in the same system call as the first chunk.
void SendChunks(Socket* s, const void* data, size_t n, size_t max_packet, int timeout_ms,
                const protocol::ByteBuffer* packet = nullptr);
/// Receives `n` bytes of chunk packets into `data` (nullptr: read and drop them), each at most
/// `max_packet` bytes and at the offset expected next; anything else raises ProtocolError.
void RecvChunks(Socket* s, void* data, size_t n, size_t max_packet, int timeout_ms);

}  // namespace remote
}  // namespace disco

#endif  // DISCO_REMOTE_RPC_H_
