// libFuzzer target for everything disco decodes from another process: command frames with their
// arguments, replies to rank 0, and the remote-session request and reply bodies. The first input
// byte picks the decoder, the rest is its input. The contract under test: malformed input raises
// ProtocolError (remote replies may also carry any disco error, which they rethrow) and never
// crashes, leaks, reads out of bounds or hits undefined behaviour; anything else escapes as an
// uncaught exception, which libFuzzer reports as a crash.
//
// Built with -DDISCO_BUILD_FUZZ=ON by clang (tests/fuzz/CMakeLists.txt); seeds in corpus/, written
// by make_seeds.cc. ./launch/test runs it for 60 s under AddressSanitizer and UBSan.
#include <disco/error.h>

#include <cstddef>
#include <cstdint>

#include "protocol/graph.h"
#include "protocol/serializer.h"
#include "remote/rpc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace disco;  // NOLINT(build/namespaces)
  if (size == 0) return 0;
  const uint8_t which = data[0] % 4;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  constexpr size_t kMaxPayload = 1 << 20;  // what a rank would accept, kept small for the fuzzer
  try {
    switch (which) {
      case 0: {
        protocol::Command cmd;
        protocol::DecodeCommand(body, n, kMaxPayload, &cmd);
        if (cmd.action() == protocol::Action::kInstallGraph) {
          protocol::DecodeGraphProgram(cmd.args.data(), cmd.args.size(), 1);
        }
        break;
      }
      case 1: {
        protocol::Reply reply;
        protocol::DecodeReply(body, n, &reply);
        break;
      }
      case 2: {
        remote::Request request;
        remote::DecodeRequest(body, n, &request);
        break;
      }
      default:
        try {
          remote::DecodeReply(body, n);
        } catch (const ProtocolError&) {
          throw;
        } catch (const Error&) {
          // An error reply decoded: it rethrows the error it carries, as designed.
        }
        break;
    }
  } catch (const ProtocolError&) {
    // Malformed input, refused as it must be.
  }
  return 0;
}
