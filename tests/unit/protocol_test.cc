// The decoder against truncated, mutated and hostile frames: every fault is a ProtocolError with
// a byte offset, never a crash, a hang, another exception type or an allocation a length claims.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "protocol/frame.h"
#include "protocol/serializer.h"
#include "remote/rpc.h"

namespace disco {
namespace protocol {
namespace {

struct Layout {
  std::vector<uint8_t> bytes;
  std::vector<size_t> tag_offsets;     // offsets of every argument's type tag
  std::vector<size_t> length_offsets;  // offsets of u64 length fields (strings, bytes, tensors)
};

std::vector<Any> SampleArgs() {
  Tensor t = Tensor::Empty(Shape{2, 3}, DataType("int16"));
  for (int i = 0; i < 6; ++i) t.data_as<int16_t>()[i] = static_cast<int16_t>(i - 3);
  return {Any(int64_t{7}), Any(DRef::Unowned(3)),
          Any("hello"),    Any(Bytes("\x01\x02", 2)),
          Any(true),       Any(2.5),
          Any(),           Any(DataType("bfloat16")),
          Any(CUDA(1)),    Any(Shape{4, 0, 2}),
          Any(t),          Any(std::string())};
}

Layout BuildFrame(const std::vector<Any>& args, const std::vector<int64_t>& kills) {
  ByteBuffer buf;
  size_t total =
      EncodeCommand(&buf, Action::kCallPacked, 9, kills, nullptr, 0, args.data(), args.size());
  Layout layout;
  layout.bytes.assign(buf.data(), buf.data() + total);
  // Re-walk the payload to find where each tag and length field sits.
  size_t at = kHeaderBytes + 4 + kills.size() * 8 + 4;
  for (const Any& a : args) {
    layout.tag_offsets.push_back(at);
    ByteBuffer one;
    Writer w(&one);
    EncodeAny(&w, a);
    TypeCode code = a.type_code();
    if (code == TypeCode::kStr || code == TypeCode::kBytes) layout.length_offsets.push_back(at + 1);
    if (code == TypeCode::kTensor) {
      const Tensor& t = std::get<Tensor>(a.storage());
      layout.length_offsets.push_back(at + 1 + 4 + 4 + 8 * t.ndim());
    }
    at += one.size();
  }
  EXPECT_EQ(at, total);
  return layout;
}

// Decodes, and reports: 0 = ok, 1 = ProtocolError (with an offset in the message), 2 = anything
// else (a failure of the test).
int Decode(const std::vector<uint8_t>& bytes, std::string* message = nullptr) {
  Command cmd;
  try {
    DecodeCommand(bytes.data(), bytes.size(), 1 << 20, &cmd);
    return 0;
  } catch (const ProtocolError& e) {
    if (message) *message = e.what();
    return std::string(e.what()).find("byte offset") != std::string::npos ? 1 : 2;
  } catch (const std::exception& e) {
    if (message) *message = e.what();
    return 2;
  }
}

void SetPayloadLength(std::vector<uint8_t>* bytes) {
  uint32_t n = static_cast<uint32_t>(bytes->size() - kHeaderBytes);
  std::memcpy(bytes->data() + 16, &n, 4);
}

TEST(ProtocolTest, ValidFrameDecodesToTheSameValues) {
  std::vector<Any> args = SampleArgs();
  Layout layout = BuildFrame(args, {5, 6});
  Command cmd;
  DecodeCommand(layout.bytes.data(), layout.bytes.size(), 1 << 20, &cmd);
  EXPECT_EQ(cmd.action(), Action::kCallPacked);
  EXPECT_EQ(cmd.header.seq, 9u);
  EXPECT_EQ(cmd.kills, (std::vector<int64_t>{5, 6}));
  ASSERT_EQ(cmd.args.size(), args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    EXPECT_EQ(cmd.args[i].type_code(), args[i].type_code()) << i;
    EXPECT_EQ(cmd.args[i].ToString(), args[i].ToString()) << i;
  }
}

TEST(ProtocolTest, EveryTruncationIsAProtocolError) {
  Layout layout = BuildFrame(SampleArgs(), {5});
  int cases = 0;
  for (size_t n = 0; n < layout.bytes.size(); ++n) {
    std::vector<uint8_t> cut(layout.bytes.begin(), layout.bytes.begin() + n);
    std::string msg;
    EXPECT_EQ(Decode(cut, &msg), 1) << "truncated to " << n << ": " << msg;
    ++cases;
    // The same cut with a length field that agrees, so the payload reader itself meets the end.
    if (n >= kHeaderBytes) {
      SetPayloadLength(&cut);
      EXPECT_EQ(Decode(cut, &msg), 1) << "truncated to " << n << " (length fixed): " << msg;
      ++cases;
    }
  }
  EXPECT_GT(cases, 300);
}

TEST(ProtocolTest, StructuralMutationsAreProtocolErrors) {
  Layout layout = BuildFrame(SampleArgs(), {5});
  int cases = 0;
  auto expect_error = [&](std::vector<uint8_t> bytes, const std::string& what) {
    std::string msg;
    EXPECT_EQ(Decode(bytes, &msg), 1) << what << ": " << msg;
    ++cases;
  };
  // Header fields: magic, version, action, flags, payload length.
  for (size_t i = 0; i < 4; ++i) {
    for (uint8_t delta : {1, 0x80, 0xFF}) {
      auto b = layout.bytes;
      b[i] ^= delta;
      expect_error(b, "magic byte " + std::to_string(i));
    }
  }
  for (uint8_t v : {0, 2, 0xFF}) {
    auto b = layout.bytes;
    b[4] = v;
    expect_error(b, "version " + std::to_string(v));
  }
  for (int v = kMaxAction + 1; v < 256; v += 7) {
    auto b = layout.bytes;
    b[5] = static_cast<uint8_t>(v);
    expect_error(b, "action " + std::to_string(v));
  }
  // Flags: only kFlagNextFrameNonblocking and kFlagCollective are known, and only a call frame
  // may carry them.
  for (uint16_t flags : {4, 7, 0x100, 0x8000, 0xFFFF}) {
    auto b = layout.bytes;
    SetFlags(b.data(), flags);
    expect_error(b, "flags " + std::to_string(flags));
  }
  {
    auto b = layout.bytes;
    SetFlags(b.data(), kFlagNextFrameNonblocking);
    EXPECT_EQ(Decode(b), 0) << "a call frame asking for the next frame by MPI_Ibcast";
    b[5] = static_cast<uint8_t>(Action::kSyncWorker);
    expect_error(b, "the nonblocking-next flag on a sync frame");
  }
  {
    auto b = layout.bytes;
    SetFlags(b.data(), kFlagCollective | kFlagNextFrameNonblocking);
    EXPECT_EQ(Decode(b), 0) << "a collective call frame";
    b[5] = static_cast<uint8_t>(Action::kSyncWorker);
    expect_error(b, "the collective flag on a sync frame");
  }
  for (uint32_t len : {0u, 1u, 0xFFFFFFFFu, static_cast<uint32_t>(layout.bytes.size())}) {
    auto b = layout.bytes;
    std::memcpy(b.data() + 16, &len, 4);
    expect_error(b, "payload length " + std::to_string(len));
  }
  // Every argument's tag replaced by every value that is not a sendable tag.
  std::vector<int> unsendable = {static_cast<int>(TypeCode::kFunction),
                                 static_cast<int>(TypeCode::kObject)};
  for (int tag = static_cast<int>(TypeCode::kMap) + 1; tag < 256; tag += 3)
    unsendable.push_back(tag);
  for (size_t off : layout.tag_offsets) {
    for (int tag : unsendable) {
      auto b = layout.bytes;
      b[off] = static_cast<uint8_t>(tag);
      expect_error(b, "tag " + std::to_string(tag) + " at " + std::to_string(off));
    }
  }
  // Length fields that claim more than the frame holds, up to 2^64-1: refused before allocating.
  for (size_t off : layout.length_offsets) {
    for (uint64_t len : {uint64_t{1} << 20, uint64_t{1} << 40, uint64_t{1} << 62,
                         std::numeric_limits<uint64_t>::max()}) {
      auto b = layout.bytes;
      std::memcpy(b.data() + off, &len, 8);
      expect_error(b, "length " + std::to_string(len) + " at " + std::to_string(off));
    }
  }
  // Kill and argument counts that overrun the frame.
  for (uint32_t count : {1000u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    auto b = layout.bytes;
    std::memcpy(b.data() + kHeaderBytes, &count, 4);
    expect_error(b, "kill count " + std::to_string(count));
    b = layout.bytes;
    std::memcpy(b.data() + kHeaderBytes + 4 + 8, &count, 4);
    expect_error(b, "argument count " + std::to_string(count));
  }
  // Trailing garbage after the last argument.
  {
    auto b = layout.bytes;
    b.push_back(0);
    SetPayloadLength(&b);
    expect_error(b, "one trailing byte");
  }
  EXPECT_GT(cases, 300);
}

TEST(ProtocolTest, ArbitraryByteMutationsNeverCrashOrThrowOtherErrors) {
  Layout layout = BuildFrame(SampleArgs(), {5, 7});
  int cases = 0, refused = 0;
  for (size_t i = 0; i < layout.bytes.size(); ++i) {
    for (int kind = 0; kind < 4; ++kind) {
      auto b = layout.bytes;
      uint8_t orig = b[i];
      b[i] = kind == 0 ? 0x00 : kind == 1 ? 0xFF : kind == 2 ? (orig ^ 0x80) : (orig + 1);
      if (b[i] == orig) continue;
      std::string msg;
      int r = Decode(b, &msg);
      EXPECT_NE(r, 2) << "byte " << i << " -> " << int(b[i]) << ": " << msg;
      refused += r == 1;
      ++cases;
    }
  }
  EXPECT_GT(cases, 500);
  EXPECT_GT(refused, 100);
}

TEST(ProtocolTest, HostileTensorsAreRefused) {
  auto tensor_frame = [](DLDataType dtype, std::vector<int64_t> dims, uint64_t nbytes,
                         size_t data_bytes) {
    ByteBuffer buf;
    Writer w(&buf);
    buf.Resize(kHeaderBytes);
    w.Put<uint32_t>(0);
    w.Put<uint32_t>(1);
    w.Put<uint8_t>(static_cast<uint8_t>(TypeCode::kTensor));
    w.Put<uint8_t>(dtype.code);
    w.Put<uint8_t>(dtype.bits);
    w.Put<uint16_t>(dtype.lanes);
    w.Put<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) w.Put<int64_t>(d);
    w.Put<uint64_t>(nbytes);
    std::vector<uint8_t> data(data_bytes, 0);
    w.Append(data.data(), data.size());
    FrameHeader h;
    h.action = static_cast<uint8_t>(Action::kCallPacked);
    h.payload_bytes = static_cast<uint32_t>(buf.size() - kHeaderBytes);
    WriteHeader(buf.data(), h);
    return std::vector<uint8_t>(buf.data(), buf.data() + buf.size());
  };
  std::string msg;
  EXPECT_EQ(Decode(tensor_frame(DataType("float32"), {2}, 8, 8), &msg), 0) << msg;
  // Shape says 2^62 x 2^62 elements: overflow, refused without allocating.
  EXPECT_EQ(Decode(tensor_frame(DataType("float32"), {int64_t{1} << 62, int64_t{1} << 62}, 0, 0)),
            1);
  EXPECT_EQ(Decode(tensor_frame(DataType("float32"), {4}, 8, 8)), 1);       // byte count too small
  EXPECT_EQ(Decode(tensor_frame(DataType("float32"), {-2}, 8, 8)), 1);      // negative extent
  EXPECT_EQ(Decode(tensor_frame(DLDataType{kDLInt, 4, 1}, {2}, 1, 1)), 1);  // 4-bit elements
  EXPECT_EQ(Decode(tensor_frame(DLDataType{kDLFloat, 0, 1}, {2}, 0, 0)), 1);
  EXPECT_EQ(Decode(tensor_frame(DLDataType{99, 32, 1}, {2}, 8, 8)), 1);
  std::vector<int64_t> many(kMaxWireNdim + 1, 1);
  EXPECT_EQ(Decode(tensor_frame(DataType("int8"), many, 1, 1)), 1);
  // Zero extent after huge ones: 0 elements, valid.
  EXPECT_EQ(
      Decode(tensor_frame(DataType("int8"), {int64_t{1} << 62, int64_t{1} << 62, 0}, 0, 0), &msg),
      0)
      << msg;
}

TEST(ProtocolTest, ErrorsNameTheOffset) {
  Layout layout = BuildFrame({Any("abc")}, {});
  auto b = layout.bytes;
  b[layout.tag_offsets[0]] = 200;
  std::string msg;
  ASSERT_EQ(Decode(b, &msg), 1);
  EXPECT_NE(msg.find("byte offset " + std::to_string(layout.tag_offsets[0])), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unknown or unsendable type tag 200"), std::string::npos) << msg;
}

TEST(ProtocolTest, RepliesRoundTripAndRefuseGarbage) {
  ByteBuffer buf;
  ErrorReport report{3, 77, 12, "my.func", "it broke"};
  EncodeErrorReport(&buf, report);
  Reply reply;
  DecodeReply(buf.data(), buf.size(), &reply);
  EXPECT_EQ(reply.kind, ReplyKind::kError);
  EXPECT_EQ(reply.error.worker, 3);
  EXPECT_EQ(reply.error.message, "it broke");
  for (size_t n = 0; n < buf.size(); ++n) {
    EXPECT_THROW(DecodeReply(buf.data(), n, &reply), ProtocolError) << n;
  }
  EncodeDebugValue(&buf, 4, DebugStatus::kValue, Any(Shape{1, 2}));
  DecodeReply(buf.data(), buf.size(), &reply);
  EXPECT_EQ(reply.errors_sent, 4u);
  EXPECT_EQ(reply.value.cast<Shape>(), (Shape{1, 2}));
  uint8_t junk[3] = {9, 0, 0};
  EXPECT_THROW(DecodeReply(junk, 3, &reply), ProtocolError);
}

// A value budget bounds what a message decodes to, nested elements included, and refuses a count
// beyond it before making room for it (an Any takes tens of bytes, a None on the wire one).
TEST(ProtocolTest, AValueBudgetBoundsNestedElements) {
  ByteBuffer buf;
  Writer w(&buf);
  EncodeAny(&w, Any(Array(std::vector<Any>(1000))));  // an array of 1000 Nones: 1009 bytes
  for (size_t budget : {size_t{1001}, size_t{5000}}) {
    Reader r(buf.data(), buf.size());
    size_t left = budget;
    EXPECT_EQ(DecodeAny(&r, nullptr, 0, &left).cast<Array>().size(), 1000u);
    EXPECT_EQ(left, budget - 1001);
  }
  Reader r(buf.data(), buf.size());
  size_t left = 1000;  // the array itself takes one: 999 left for its 1000 elements
  try {
    DecodeAny(&r, nullptr, 0, &left);
    ADD_FAILURE() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("more values than its limit (1000 more at this point, "
                                         "999 left)"),
              std::string::npos)
        << e.what();
  }
}

// A request decodes to at most remote::MaxRequestValues of its size: megabytes of one-byte Nones,
// as operands or in an array, are refused; as many ints (9 bytes each) are not.
TEST(ProtocolTest, RequestsDecodeToBoundedValues) {
  using remote::Op;
  const size_t n = size_t{1} << 20;
  ByteBuffer body;
  Writer w(&body);
  w.Put<uint8_t>(static_cast<uint8_t>(Op::kSyncAll));
  w.Put<uint32_t>(0);  // no frees
  w.Put<uint32_t>(static_cast<uint32_t>(n));
  body.Resize(body.size() + n);
  std::memset(body.data() + body.size() - n, 0, n);  // n Nones
  remote::Request req;
  try {
    remote::DecodeRequest(body.data(), body.size(), &req);
    ADD_FAILURE() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("the operand count 1048576 exceeds the "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(" values this request may decode to"), std::string::npos)
        << e.what();
  }
  Any call[2] = {Any(DRef::Unowned(1)), Any(Array(std::vector<Any>(n)))};
  remote::EncodeRequest(&body, Op::kCall, {}, call, 2);
  EXPECT_THROW(remote::DecodeRequest(body.data(), body.size(), &req), ProtocolError);
  call[1] = Any(Array(std::vector<Any>(n, Any(int64_t{7}))));
  remote::EncodeRequest(&body, Op::kCall, {}, call, 2);
  remote::DecodeRequest(body.data(), body.size(), &req);
  EXPECT_EQ(req.operands.at(1).cast<Array>().size(), n);
  call[1] = Any(Array(std::vector<Any>(2000)));  // a few Nones pass
  remote::EncodeRequest(&body, Op::kCall, {}, call, 2);
  remote::DecodeRequest(body.data(), body.size(), &req);
  EXPECT_EQ(req.operands.size(), 2u);
}

}  // namespace
}  // namespace protocol
}  // namespace disco
