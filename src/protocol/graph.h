// The program of a captured graph as the install frame carries it (Action::kInstallGraph), and
// its validation. The operands, after the frame's header:
//
//   graph id (int, >= 0; 0: install steps only, no graph kept), input count (int, 0..64),
//   reserved register count R, R register ids (the registers the capture allocated, in order:
//   each worker makes room for them before any step stores one), step count S, then S steps:
//     kind 0 (lookup):       0, result register, name (string)
//     kind 1 (install call): 1, result register, function register (DRef), flags, mask, n, n args
//     kind 2 (replay call):  2, the same
//   flags: 1 = the function is a collective on worker 0 (kFlagCollective of a call frame); mask:
//   bit i set = argument i is a placeholder, and the argument is the input index (int). Install
//   calls have no placeholders. A replay frame (Action::kReplayGraph) carries [graph id, inputs].
#ifndef DISCO_PROTOCOL_GRAPH_H_
#define DISCO_PROTOCOL_GRAPH_H_

#include <disco/any.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace disco {
namespace protocol {

constexpr int kMaxGraphInputs = 64;
constexpr int kMaxGraphCallArgs = 64;

struct GraphStep {
  enum Kind : int64_t { kLookup = 0, kInstallCall = 1, kCall = 2 };
  Kind kind = kLookup;
  int64_t result_reg = 0;
  std::string name;  // kLookup
  int64_t func_reg = 0;
  bool collective = false;
  std::vector<Any> args;                              // placeholders hold their input index
  std::vector<std::pair<uint32_t, uint32_t>> inputs;  // (argument position, input index)
};

struct GraphProgram {
  int64_t id = 0;
  int64_t num_inputs = 0;
  std::vector<int64_t> reserved;
  std::vector<GraphStep> steps;
};

/// Decodes and checks the install operands of command `seq`; malformed ones raise ProtocolError
/// naming the operand.
GraphProgram DecodeGraphProgram(const Any* operands, size_t n, uint64_t seq);

}  // namespace protocol
}  // namespace disco

#endif  // DISCO_PROTOCOL_GRAPH_H_
