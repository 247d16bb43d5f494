// Writes the seed corpus of frame_fuzz.cc: valid frames, replies, requests and remote replies,
// each prefixed with the selector byte the fuzz target reads first.
//   make_seeds DIR
#include <disco/disco.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "protocol/serializer.h"
#include "remote/rpc.h"

namespace {

using disco::Any;
using disco::protocol::ByteBuffer;

int count = 0;
void Write(const std::string& dir, uint8_t which, const ByteBuffer& buf, size_t size) {
  std::string path = dir + "/seed-" + std::to_string(which) + "-" + std::to_string(count++);
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(which));
  out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(size));
}

std::vector<std::vector<Any>> ArgumentSets() {
  disco::Tensor t = disco::Tensor::Empty(disco::Shape{2, 3}, disco::DataType("int16"));
  for (int i = 0; i < 6; ++i) t.data_as<int16_t>()[i] = static_cast<int16_t>(i);
  return {{},
          {Any(int64_t{7})},
          {Any(disco::DRef::Unowned(3)), Any("disco.allreduce"), Any(true), Any(2.5)},
          {Any(disco::Bytes("\x01\x02", 2)), Any(), Any(disco::DataType("bfloat16"))},
          {Any(disco::CUDA(1)), Any(disco::Shape{4, 0, 2}), Any(t), Any(std::string())},
          // Arrays and maps, nested, with a tensor inside.
          {Any(disco::Array({Any(int64_t{1}), Any(t), Any(disco::Array({Any("x")}))})),
           Any(disco::Map({{"a", Any(2.0)}, {"b", Any(disco::Array())}}))}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  using namespace disco::protocol;  // NOLINT(build/namespaces)
  {
    // A captured graph's install program (protocol/graph.h) and a replay of it.
    std::vector<Any> program = {Any(int64_t{3}),
                                Any(int64_t{1}),
                                Any(int64_t{2}),
                                Any(int64_t{5}),
                                Any(int64_t{6}),
                                Any(int64_t{2}),
                                Any(int64_t{0}),
                                Any(int64_t{5}),
                                Any("my.fn"),
                                Any(int64_t{2}),
                                Any(int64_t{6}),
                                Any(disco::DRef::Unowned(5)),
                                Any(int64_t{1}),
                                Any(int64_t{1}),
                                Any(int64_t{2}),
                                Any(int64_t{0}),
                                Any(disco::DRef::Unowned(4))};
    ByteBuffer buf;
    size_t size = EncodeCommand(&buf, Action::kInstallGraph, 42, {}, nullptr, 0, program.data(),
                                program.size());
    Write(dir, 0, buf, size);
    std::vector<Any> replay = {Any(int64_t{3}), Any(2.5)};
    size =
        EncodeCommand(&buf, Action::kReplayGraph, 43, {}, nullptr, 0, replay.data(), replay.size());
    Write(dir, 0, buf, size);
  }
  for (const auto& args : ArgumentSets()) {
    for (Action action : {Action::kCallPacked, Action::kSyncWorker, Action::kDebugSetRegister}) {
      ByteBuffer buf;
      size_t size = EncodeCommand(&buf, action, 42, {5, 6}, nullptr, 0, args.data(), args.size());
      Write(dir, 0, buf, size);
    }
    ByteBuffer request;
    disco::remote::EncodeRequest(&request, disco::remote::Op::kCall, {1, 2}, args.data(),
                                 args.size());
    Write(dir, 2, request, request.size());
    ByteBuffer ok;
    disco::remote::EncodeOkReply(&ok, args.data(), args.size());
    Write(dir, 3, ok, ok.size());
  }
  ByteBuffer buf;
  EncodeSyncAck(&buf, 3);
  Write(dir, 1, buf, buf.size());
  buf.Clear();
  EncodeErrorReport(&buf, ErrorReport{2, 17, 4, "my.fn", "it failed"});
  Write(dir, 1, buf, buf.size());
  buf.Clear();
  EncodeDebugValue(&buf, 0, DebugStatus::kValue, Any(int64_t{5}));
  Write(dir, 1, buf, buf.size());
  ByteBuffer err;
  disco::remote::EncodeErrorReply(&err, disco::ValueError("bad argument"));
  Write(dir, 3, err, err.size());
  std::printf("%d seeds in %s\n", count, dir.c_str());
  return 0;
}
