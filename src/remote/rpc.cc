#include "remote/rpc.h"

#include <algorithm>
#include <cstring>

#include "protocol/serializer.h"

namespace disco {
namespace remote {

const char* OpName(Op op) {
  switch (op) {
    case Op::kInfo:
      return "Info";
    case Op::kGetGlobalFunc:
      return "GetGlobalFunc";
    case Op::kCall:
      return "CallPacked";
    case Op::kCopyTo:
      return "CopyToWorker0";
    case Op::kCopyFrom:
      return "CopyFromWorker0";
    case Op::kSyncWorker:
      return "SyncWorker";
    case Op::kSyncAll:
      return "SyncAll";
    case Op::kDebugGet:
      return "DebugGetFromRemote";
    case Op::kDebugSet:
      return "DebugSetRegister";
    case Op::kCaptureBegin:
      return "Capture";
    case Op::kCaptureEnd:
      return "Capture (end)";
    case Op::kReplayGraph:
      return "Graph::Replay";
    case Op::kFreeGraph:
      return "Graph (free)";
    case Op::kDetach:
      return "Detach";
    case Op::kShutdownJob:
      return "ShutdownJob";
  }
  return "unknown";
}

namespace {

void EncodeHeader(protocol::ByteBuffer* buf, uint64_t offset) {
  protocol::Writer w(buf);
  w.Put<uint8_t>(kChunkTag);
  w.Put<uint64_t>(offset);
}

void EncodeValues(protocol::Writer* w, const Any* values, size_t n) {
  w->Put<uint32_t>(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) protocol::EncodeAny(w, values[i]);
}

// `values_left` (null: no bound) bounds the values decoded, nested ones included (DecodeAny).
std::vector<Any> DecodeValues(protocol::Reader* r, const char* what,
                              size_t* values_left = nullptr) {
  const size_t at = r->offset();
  uint32_t n = r->GetCount(what, 1);  // every value takes at least its one-byte tag
  if (values_left != nullptr && n > *values_left) {
    r->Fail(std::string(what) + " " + std::to_string(n) + " exceeds the " +
                std::to_string(*values_left) + " values this request may decode to",
            at);
  }
  std::vector<Any> out;
  out.reserve(static_cast<size_t>(n));
  for (uint32_t i = 0; i < n; ++i) out.push_back(protocol::DecodeAny(r, nullptr, 0, values_left));
  return out;
}

}  // namespace

size_t MaxRequestValues(size_t request_bytes) {
  return kRequestValuesFree + request_bytes / kRequestBytesPerValue;
}

size_t ChunkOverheadBytes() {
  protocol::ByteBuffer buf;
  EncodeHeader(&buf, 0);
  return sizeof(uint64_t) + buf.size();
}

void EncodeRequest(protocol::ByteBuffer* buf, Op op, const std::vector<int64_t>& frees,
                   const Any* operands, size_t num_operands) {
  buf->Clear();
  protocol::Writer w(buf);
  w.Put<uint8_t>(static_cast<uint8_t>(op));
  w.PutI64List(frees);
  EncodeValues(&w, operands, num_operands);
}

void DecodeRequest(const uint8_t* data, size_t size, Request* out) {
  protocol::Reader r(data, size);
  uint8_t op = r.Get<uint8_t>("the request's operation");
  if (op == 0 || op > kMaxOp) r.Fail("unknown request operation " + std::to_string(op), 0);
  out->op = static_cast<Op>(op);
  r.GetI64List("the freed-register count", &out->frees);
  size_t values_left = MaxRequestValues(size);
  out->operands = DecodeValues(&r, "the operand count", &values_left);
  if (r.remaining() != 0) {
    r.Fail(std::to_string(r.remaining()) + " bytes trail the request", r.offset());
  }
}

void EncodeOkReply(protocol::ByteBuffer* buf, const Any* results, size_t num_results) {
  buf->Clear();
  protocol::Writer w(buf);
  w.Put<uint8_t>(kReplyOk);
  EncodeValues(&w, results, num_results);
}

void EncodeErrorReply(protocol::ByteBuffer* buf, const std::exception& e) {
  ErrorKind kind = ErrorKind::kError;
  int32_t worker = -1;
  if (auto* re = dynamic_cast<const RemoteError*>(&e)) {
    kind = ErrorKind::kRemote;
    worker = re->worker();
  } else if (dynamic_cast<const ValueError*>(&e)) {
    kind = ErrorKind::kValue;
  } else if (dynamic_cast<const TypeError*>(&e)) {
    kind = ErrorKind::kType;
  } else if (dynamic_cast<const ProtocolError*>(&e)) {
    kind = ErrorKind::kProtocol;
  } else if (dynamic_cast<const InternalError*>(&e)) {
    kind = ErrorKind::kInternal;
  } else if (dynamic_cast<const RuntimeError*>(&e) || !dynamic_cast<const Error*>(&e)) {
    kind = ErrorKind::kRuntime;
  }
  buf->Clear();
  protocol::Writer w(buf);
  w.Put<uint8_t>(kReplyError);
  w.Put<uint8_t>(static_cast<uint8_t>(kind));
  w.Put<int32_t>(worker);
  std::string msg = e.what();
  w.PutString(msg.data(), msg.size());
}

std::vector<Any> DecodeReply(const uint8_t* data, size_t size) {
  protocol::Reader r(data, size);
  uint8_t status = r.Get<uint8_t>("the reply status");
  if (status == kReplyOk) {
    std::vector<Any> out = DecodeValues(&r, "the result count");
    if (r.remaining() != 0) {
      r.Fail(std::to_string(r.remaining()) + " bytes trail the reply", r.offset());
    }
    return out;
  }
  if (status != kReplyError) r.Fail("unknown reply status " + std::to_string(status), 0);
  uint8_t kind = r.Get<uint8_t>("the error kind");
  int32_t worker = r.Get<int32_t>("the failed worker");
  std::string msg = r.GetString("the error message");
  switch (static_cast<ErrorKind>(kind)) {
    case ErrorKind::kValue:
      throw ValueError(msg);
    case ErrorKind::kType:
      throw TypeError(msg);
    case ErrorKind::kProtocol:
      throw ProtocolError(msg);
    case ErrorKind::kRuntime:
      throw RuntimeError(msg);
    case ErrorKind::kInternal:
      throw InternalError(msg);
    case ErrorKind::kRemote:
      throw RemoteError(msg, worker);
    case ErrorKind::kError:
      break;
  }
  throw Error(msg);
}

void SendChunks(Socket* s, const void* data, size_t n, size_t max_packet, int timeout_ms,
                const protocol::ByteBuffer* packet) {
  size_t overhead = ChunkOverheadBytes();
  DISCO_CHECK(max_packet > overhead, ValueError)
      << "a packet limit of " << max_packet << " bytes leaves no room for chunk data";
  size_t per = max_packet - overhead;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t packet_len = packet != nullptr ? packet->size() : 0;
  protocol::ByteBuffer head;
  size_t off = 0;
  do {
    size_t k = std::min(per, n - off);
    head.Clear();
    protocol::Writer w(&head);
    w.Put<uint64_t>(k + overhead - sizeof(uint64_t));
    EncodeHeader(&head, off);
    iovec iov[4];
    int count = 0;
    if (packet != nullptr) {  // the leading packet: its length, then its body
      iov[count++] = {&packet_len, sizeof packet_len};
      iov[count++] = {const_cast<uint8_t*>(packet->data()), packet->size()};
      packet = nullptr;
    }
    if (n > 0) {
      iov[count++] = {head.data(), head.size()};
      iov[count++] = {const_cast<uint8_t*>(p + off), k};
    }
    s->SendAllV(iov, count, timeout_ms);
    off += k;
  } while (off < n);
}

void RecvChunks(Socket* s, void* data, size_t n, size_t max_packet, int timeout_ms) {
  const size_t header = ChunkOverheadBytes() - sizeof(uint64_t);
  uint8_t* p = static_cast<uint8_t*>(data);
  std::vector<uint8_t> scratch;
  for (size_t off = 0; off < n;) {
    uint64_t len = 0;
    s->RecvAll(&len, sizeof len, timeout_ms, "a chunk length");
    DISCO_CHECK(len > header && len + sizeof len <= max_packet, ProtocolError)
        << "a chunk packet of " << len << " bytes at offset " << off
        << " is outside the limits (more than " << header << ", at most " << max_packet
        << " with its length)";
    uint8_t head[16];
    s->RecvAll(head, header, timeout_ms, "a chunk header");
    uint64_t at;
    std::memcpy(&at, head + 1, sizeof at);
    DISCO_CHECK(head[0] == kChunkTag, ProtocolError)
        << "expected a chunk packet (tag " << static_cast<int>(kChunkTag) << "), got tag "
        << static_cast<int>(head[0]) << " at offset " << off;
    size_t k = static_cast<size_t>(len) - header;
    DISCO_CHECK(at == off && k <= n - off, ProtocolError)
        << "a chunk of " << k << " bytes at offset " << at << " does not continue a copy of " << n
        << " bytes at offset " << off;
    if (p != nullptr) {
      s->RecvAll(p + off, k, timeout_ms, "chunk data");
    } else {
      scratch.resize(std::min<size_t>(k, size_t{1} << 20));
      for (size_t done = 0; done < k;) {
        size_t step = std::min(scratch.size(), k - done);
        s->RecvAll(scratch.data(), step, timeout_ms, "chunk data");
        done += step;
      }
    }
    off += k;
  }
}

}  // namespace remote
}  // namespace disco
