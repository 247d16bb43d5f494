#include "protocol/serializer.h"

#include <disco/error.h>

#include <cmath>
#include <limits>
#include <map>

#include "core/device_memory.h"

namespace disco {
namespace protocol {
namespace {

// The encoders refuse, as ValueErrors on the sending side, every value the decoders below would
// refuse as malformed: a worker that cannot decode a command ends the job, a sender that cannot
// encode one sends nothing.
void EncodeDataType(Writer* w, DLDataType t) {
  DISCO_CHECK(t.code <= kDLComplex && t.bits != 0 && t.lanes != 0, ValueError)
      << "invalid data type (code " << int{t.code} << ", bits " << int{t.bits} << ", lanes "
      << t.lanes << ") cannot be sent";
  w->Put<uint8_t>(t.code);
  w->Put<uint8_t>(t.bits);
  w->Put<uint16_t>(t.lanes);
}

void EncodeShape(Writer* w, const Shape& s) {
  DISCO_CHECK(s.size() <= kMaxWireNdim, ValueError)
      << "a shape of rank " << s.size() << " cannot be sent (limit " << kMaxWireNdim << ")";
  for (size_t i = 0; i < s.size(); ++i) {
    DISCO_CHECK(s[i] >= 0, ValueError)
        << "shape " << s.ToString() << " has the negative extent " << s[i] << " at axis " << i;
  }
  w->Put<uint32_t>(static_cast<uint32_t>(s.size()));
  w->Append(s.data(), s.size() * sizeof(int64_t));
}

DLDataType DecodeDataType(Reader* r) {
  size_t at = r->offset();
  DLDataType t;
  t.code = r->Get<uint8_t>("dtype code");
  t.bits = r->Get<uint8_t>("dtype bits");
  t.lanes = r->Get<uint16_t>("dtype lanes");
  if (t.code > kDLComplex || t.bits == 0 || t.lanes == 0) {
    r->Fail("invalid data type (code " + std::to_string(t.code) + ", bits " +
                std::to_string(t.bits) + ", lanes " + std::to_string(t.lanes) + ")",
            at);
  }
  return t;
}

Shape DecodeShape(Reader* r) {
  size_t at = r->offset();
  uint32_t ndim = r->Get<uint32_t>("shape rank");
  if (ndim > kMaxWireNdim) {
    r->Fail("shape rank " + std::to_string(ndim) + " exceeds " + std::to_string(kMaxWireNdim), at);
  }
  const uint8_t* p = r->Take(static_cast<size_t>(ndim) * sizeof(int64_t), "shape extents");
  std::vector<int64_t> dims(ndim);
  if (ndim != 0) std::memcpy(dims.data(), p, ndim * sizeof(int64_t));
  for (uint32_t i = 0; i < ndim; ++i) {
    if (dims[i] < 0) {
      r->Fail("negative extent " + std::to_string(dims[i]) + " at axis " + std::to_string(i),
              at + 4 + i * 8);
    }
  }
  return Shape(std::move(dims));
}

}  // namespace

namespace {
// Arrays and maps nest; deeper values than this are refused on both ends (no stack overflow).
constexpr int kMaxNesting = 32;

void EncodeAnyAt(Writer* w, const Any& value, std::vector<BulkSegment>* bulk, size_t bulk_min,
                 int depth);
// The length of a bytes or tensor value; an out-of-line one is bounded by the limit, not by the
// bytes left.
uint64_t DataLength(Reader* r, bool out_of_line, size_t max_bulk, const char* what) {
  if (!out_of_line) return r->GetLength(what, 1);
  size_t len_at = r->offset();
  uint64_t n = r->Get<uint64_t>(what);
  if (n > max_bulk) {
    r->Fail(std::string(what) + " " + std::to_string(n) + " exceeds the limit of " +
                std::to_string(max_bulk) + " bytes",
            len_at);
  }
  return n;
}

// A tensor whose tag is at `at`: its data inline, or a slot for the bulk data that follows.
Any DecodeTensor(Reader* r, std::vector<BulkSlot>* bulk, size_t max_bulk, bool out_of_line,
                 size_t at) {
  DLDataType dtype = DecodeDataType(r);
  if ((dtype.bits * dtype.lanes) % 8 != 0) {
    r->Fail("tensor data type " + DataTypeToString(dtype) + " is not byte-addressable", at + 1);
  }
  Shape shape = DecodeShape(r);
  size_t count_at = r->offset();
  uint64_t nbytes = DataLength(r, out_of_line, max_bulk, "tensor byte count");
  // Check extents against the byte count without overflow, before allocating anything.
  uint64_t expect = DataTypeBytes(dtype);
  bool overflow = false;
  for (int64_t d : shape) {
    uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && expect > std::numeric_limits<uint64_t>::max() / ud) overflow = true;
    expect *= ud;
  }
  for (int64_t d : shape) {
    if (d == 0) overflow = false, expect = 0;  // a zero extent makes the product 0
  }
  if (overflow || expect != nbytes) {
    r->Fail("tensor shape " + shape.ToString() + " of " + DataTypeToString(dtype) + " needs " +
                (overflow ? std::string("more than 2^64") : std::to_string(expect)) +
                " bytes, byte count says " + std::to_string(nbytes),
            count_at);
  }
  Tensor t = Tensor::Empty(shape, dtype, CPU());
  if (out_of_line) {
    bulk->push_back(BulkSlot{t.data(), nbytes});
  } else if (nbytes != 0) {
    std::memcpy(t.data(), r->Take(nbytes, "tensor data"), nbytes);
  }
  return Any(std::move(t));
}

Any DecodeAnyAt(Reader* r, std::vector<BulkSlot>* bulk, size_t max_bulk, size_t* values_left,
                int depth);
}  // namespace

void EncodeAny(Writer* w, const Any& value, std::vector<BulkSegment>* bulk, size_t bulk_min) {
  EncodeAnyAt(w, value, bulk, bulk_min, 0);
}

Any DecodeAny(Reader* r, std::vector<BulkSlot>* bulk, size_t max_bulk, size_t* values_left) {
  return DecodeAnyAt(r, bulk, max_bulk, values_left, 0);
}

namespace {
// Takes `n` values from the message's budget (none without one), or fails before they are made.
void TakeValues(Reader* r, size_t* values_left, uint64_t n, size_t at) {
  if (values_left == nullptr) return;
  if (n > *values_left) {
    r->Fail("the message decodes to more values than its limit (" + std::to_string(n) +
                " more at this point, " + std::to_string(*values_left) + " left)",
            at);
  }
  *values_left -= static_cast<size_t>(n);
}

void EncodeAnyAt(Writer* w, const Any& value, std::vector<BulkSegment>* bulk, size_t bulk_min,
                 int depth) {
  DISCO_CHECK(depth <= kMaxNesting, ValueError)
      << "arrays and maps nested more than " << kMaxNesting << " deep cannot be sent";
  const Any::Storage& v = value.storage();
  size_t tag_at = w->size();
  w->Put<uint8_t>(static_cast<uint8_t>(value.type_code()));
  // Marks the argument out of line when it qualifies; returns true when its data must not follow.
  auto out_of_line = [&](const void* data, size_t n) {
    if (bulk == nullptr || n < bulk_min || n == 0) return false;
    w->buffer()->data()[tag_at] |= kOutOfLine;
    bulk->push_back(BulkSegment{data, n});
    return true;
  };
  switch (value.type_code()) {
    case TypeCode::kNone:
      return;
    case TypeCode::kBool:
      w->Put<uint8_t>(std::get<bool>(v) ? 1 : 0);
      return;
    case TypeCode::kInt:
      w->Put<int64_t>(std::get<int64_t>(v));
      return;
    case TypeCode::kFloat:
      w->Put<double>(std::get<double>(v));
      return;
    case TypeCode::kStr: {
      const std::string& s = std::get<std::string>(v);
      w->PutString(s.data(), s.size());
      return;
    }
    case TypeCode::kBytes: {
      const Bytes& b = std::get<Bytes>(v);
      w->Put<uint64_t>(b.size());
      if (!out_of_line(b.data(), b.size())) w->Append(b.data(), b.size());
      return;
    }
    case TypeCode::kDataType:
      EncodeDataType(w, std::get<DLDataType>(v));
      return;
    case TypeCode::kDevice: {
      DLDevice d = std::get<DLDevice>(v);
      w->Put<int32_t>(static_cast<int32_t>(d.device_type));
      w->Put<int32_t>(d.device_id);
      return;
    }
    case TypeCode::kShape:
      EncodeShape(w, std::get<Shape>(v));
      return;
    case TypeCode::kTensor: {
      const Tensor& t = std::get<Tensor>(v);
      DISCO_CHECK(t.defined(), ValueError) << "an undefined Tensor cannot be sent";
      DISCO_CHECK(memory::IsHost(t.device()), ValueError)
          << "a " << t.ToString()
          << " cannot be sent by value; only host tensors travel in commands (keep device "
             "tensors in registers, or use CopyToWorker0)";
      DISCO_CHECK(t.ndim() <= static_cast<int>(kMaxWireNdim), ValueError)
          << "a tensor of rank " << t.ndim() << " cannot be sent (limit " << kMaxWireNdim << ")";
      EncodeDataType(w, t.dtype());
      EncodeShape(w, t.shape());
      w->Put<uint64_t>(t.nbytes());
      if (!out_of_line(t.data(), t.nbytes())) w->Append(t.data(), t.nbytes());
      return;
    }
    case TypeCode::kDRef: {
      const DRef& ref = std::get<DRef>(v);
      DISCO_CHECK(ref.defined(), ValueError) << "an empty DRef cannot be sent";
      DISCO_CHECK(ref.reg_id() > 0, ValueError)
          << "DRef(" << ref.reg_id() << ") names no register (ids are positive)";
      w->Put<int64_t>(ref.reg_id());
      return;
    }
    case TypeCode::kArray: {
      const Array& a = std::get<Array>(v);
      w->Put<uint64_t>(a.size());
      for (const Any& x : a.items()) EncodeAnyAt(w, x, bulk, bulk_min, depth + 1);
      return;
    }
    case TypeCode::kMap: {
      const Map& m = std::get<Map>(v);
      w->Put<uint64_t>(m.size());
      for (const auto& kv : m.items()) {
        w->PutString(kv.first.data(), kv.first.size());
        EncodeAnyAt(w, kv.second, bulk, bulk_min, depth + 1);
      }
      return;
    }
    case TypeCode::kFunction:
    case TypeCode::kObject:
      break;
  }
  DISCO_THROW(ValueError) << "a value of type " << value.type_name()
                          << " cannot be sent to workers; it lives in one process only (keep it "
                             "in a register and pass its DRef)";
}

Any DecodeAnyAt(Reader* r, std::vector<BulkSlot>* bulk, size_t max_bulk, size_t* values_left,
                int depth) {
  size_t at = r->offset();
  if (depth > kMaxNesting) {
    r->Fail("arrays and maps nested more than " + std::to_string(kMaxNesting) + " deep", at);
  }
  if (depth == 0) TakeValues(r, values_left, 1, at);  // elements are taken with their count
  uint8_t tag = r->Get<uint8_t>("type tag");
  const bool out_of_line = (tag & kOutOfLine) != 0;
  if (out_of_line) {
    TypeCode code = static_cast<TypeCode>(tag & ~kOutOfLine);
    if (code != TypeCode::kBytes && code != TypeCode::kTensor) {
      r->Fail("unknown or unsendable type tag " + std::to_string(tag), at);
    }
    if (bulk == nullptr) r->Fail("out-of-line data is not allowed in this message", at);
    tag &= ~kOutOfLine;
  }
  auto data_length = [&](const char* what) { return DataLength(r, out_of_line, max_bulk, what); };
  switch (static_cast<TypeCode>(tag)) {
    case TypeCode::kNone:
      return Any();
    case TypeCode::kBool: {
      uint8_t b = r->Get<uint8_t>("bool");
      if (b > 1) r->Fail("bool byte " + std::to_string(b) + " is neither 0 nor 1", at + 1);
      return Any(b == 1);
    }
    case TypeCode::kInt:
      return Any(r->Get<int64_t>("int"));
    case TypeCode::kFloat:
      return Any(r->Get<double>("float"));
    case TypeCode::kStr:
      return Any(r->GetString("string length"));
    case TypeCode::kBytes: {
      uint64_t n = data_length("bytes length");
      if (out_of_line) {
        char* dst = nullptr;
        Bytes b = Bytes::Allocate(n, &dst);
        bulk->push_back(BulkSlot{dst, n});
        return Any(std::move(b));
      }
      const uint8_t* p = r->Take(n, "bytes");
      return Any(Bytes(p, n));
    }
    case TypeCode::kDataType:
      return Any(DecodeDataType(r));
    case TypeCode::kDevice: {
      DLDevice d;
      d.device_type = static_cast<DLDeviceType>(r->Get<int32_t>("device type"));
      d.device_id = r->Get<int32_t>("device id");
      return Any(d);
    }
    case TypeCode::kShape:
      return Any(DecodeShape(r));
    case TypeCode::kTensor:
      return DecodeTensor(r, bulk, max_bulk, out_of_line, at);
    case TypeCode::kDRef: {
      int64_t reg = r->Get<int64_t>("register id");
      if (reg <= 0) r->Fail("register id " + std::to_string(reg) + " is not positive", at + 1);
      return Any(DRef::Unowned(reg));
    }
    case TypeCode::kArray: {
      // Each element takes at least its tag byte: the count is bounded by the bytes left.
      uint64_t n = r->GetLength("array length", 1);
      TakeValues(r, values_left, n, at + 1);  // before the room for them is reserved
      std::vector<Any> items;
      items.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) {
        items.push_back(DecodeAnyAt(r, bulk, max_bulk, values_left, depth + 1));
      }
      return Any(Array(std::move(items)));
    }
    case TypeCode::kMap: {
      // Each entry takes at least a key length and a tag.
      uint64_t n = r->GetLength("map length", sizeof(uint64_t) + 1);
      TakeValues(r, values_left, n, at + 1);
      std::map<std::string, Any> items;
      for (uint64_t i = 0; i < n; ++i) {
        size_t key_at = r->offset();
        std::string key = r->GetString("map key length");
        Any value = DecodeAnyAt(r, bulk, max_bulk, values_left, depth + 1);
        if (!items.emplace(std::move(key), std::move(value)).second) {
          r->Fail("map key repeated", key_at);
        }
      }
      return Any(Map(std::move(items)));
    }
    case TypeCode::kFunction:
    case TypeCode::kObject:
      break;
  }
  r->Fail("unknown or unsendable type tag " + std::to_string(tag), at);
}
}  // namespace

size_t EncodeCommand(ByteBuffer* buf, Action action, uint64_t seq,
                     const std::vector<int64_t>& kills, const Any* head, size_t num_head,
                     const Any* args, size_t num_args, std::vector<BulkSegment>* bulk,
                     size_t bulk_min) {
  buf->Clear();
  if (bulk != nullptr) bulk->clear();
  Writer w(buf);
  buf->Resize(kHeaderBytes);
  w.PutI64List(kills);
  w.Put<uint32_t>(static_cast<uint32_t>(num_head + num_args));
  for (size_t i = 0; i < num_head; ++i) EncodeAny(&w, head[i], bulk, bulk_min);
  for (size_t i = 0; i < num_args; ++i) EncodeAny(&w, args[i], bulk, bulk_min);
  size_t payload = buf->size() - kHeaderBytes;
  DISCO_CHECK(payload <= std::numeric_limits<uint32_t>::max(), ValueError)
      << "command " << ActionName(action) << " carries " << payload
      << " bytes of arguments; the limit is 4 GiB (use CopyToWorker0 or a file for bulk data)";
  FrameHeader h;
  h.action = static_cast<uint8_t>(action);
  h.seq = seq;
  h.payload_bytes = static_cast<uint32_t>(payload);
  WriteHeader(buf->data(), h);
  return buf->size();
}

void DecodeCommand(const uint8_t* data, size_t size, size_t max_payload, Command* out) {
  DecodeCommand(ParseHeader(data, size, max_payload), data, size, max_payload, out);
}

void DecodeCommand(const FrameHeader& header, const uint8_t* data, size_t size, size_t max_payload,
                   Command* out) {
  out->header = header;
  size_t payload = out->header.payload_bytes;
  if (payload != size - kHeaderBytes) {
    Reader(data, size)
        .Fail("payload length field says " + std::to_string(payload) + " bytes, the frame holds " +
                  std::to_string(size - kHeaderBytes),
              16);
  }
  Reader r(data + kHeaderBytes, payload, kHeaderBytes);
  r.GetI64List("kill count", &out->kills);
  uint32_t argc = r.GetCount("argument count", 1);  // every argument takes its tag byte
  out->args.clear();
  out->bulk.clear();
  out->args.reserve(argc);
  // Out-of-line data is bounded in total, not only per value, before anything is allocated.
  size_t bulk_budget = max_payload;
  for (uint32_t i = 0; i < argc; ++i) {
    size_t slots = out->bulk.size();
    out->args.push_back(DecodeAny(&r, &out->bulk, bulk_budget));
    if (out->bulk.size() != slots) bulk_budget -= out->bulk.back().size;
  }
  if (r.remaining() != 0) {
    r.Fail(std::to_string(r.remaining()) + " trailing bytes after " + std::to_string(argc) +
               " arguments",
           r.offset());
  }
}

void EncodeErrorReport(ByteBuffer* buf, const ErrorReport& report) {
  buf->Clear();
  Writer w(buf);
  w.Put<uint8_t>(static_cast<uint8_t>(ReplyKind::kError));
  w.Put<int32_t>(report.worker);
  w.Put<uint64_t>(report.seq);
  w.Put<int64_t>(report.reg);
  w.PutString(report.function.data(), report.function.size());
  w.PutString(report.message.data(), report.message.size());
}

void EncodeSyncAck(ByteBuffer* buf, uint64_t errors_sent) {
  buf->Clear();
  Writer w(buf);
  w.Put<uint8_t>(static_cast<uint8_t>(ReplyKind::kSyncAck));
  w.Put<uint64_t>(errors_sent);
  DISCO_ICHECK_EQ(buf->size(), kSyncAckBytes);  // what SyncWorker receives without a probe
}

void EncodeDebugValue(ByteBuffer* buf, uint64_t errors_sent, DebugStatus status, const Any& value) {
  buf->Clear();
  Writer w(buf);
  w.Put<uint8_t>(static_cast<uint8_t>(ReplyKind::kDebugValue));
  w.Put<uint64_t>(errors_sent);
  w.Put<uint8_t>(static_cast<uint8_t>(status));
  EncodeAny(&w, value);
}

void DecodeReply(const uint8_t* data, size_t size, Reply* out) {
  Reader r(data, size);
  uint8_t kind = r.Get<uint8_t>("reply kind");
  switch (static_cast<ReplyKind>(kind)) {
    case ReplyKind::kSyncAck:
      out->kind = ReplyKind::kSyncAck;
      out->errors_sent = r.Get<uint64_t>("error count");
      break;
    case ReplyKind::kDebugValue: {
      out->kind = ReplyKind::kDebugValue;
      out->errors_sent = r.Get<uint64_t>("error count");
      size_t at = r.offset();
      uint8_t status = r.Get<uint8_t>("debug status");
      if (status > static_cast<uint8_t>(DebugStatus::kUnsendable)) {
        r.Fail("unknown debug status " + std::to_string(status), at);
      }
      out->status = static_cast<DebugStatus>(status);
      out->value = DecodeAny(&r);
      break;
    }
    case ReplyKind::kError:
      out->kind = ReplyKind::kError;
      out->error.worker = r.Get<int32_t>("worker id");
      out->error.seq = r.Get<uint64_t>("sequence number");
      out->error.reg = r.Get<int64_t>("register id");
      out->error.function = r.GetString("function name length");
      out->error.message = r.GetString("message length");
      break;
    default:
      r.Fail("unknown reply kind " + std::to_string(kind), 0);
  }
  if (r.remaining() != 0)
    r.Fail(std::to_string(r.remaining()) + " trailing bytes in reply", r.offset());
}

}  // namespace protocol
}  // namespace disco
