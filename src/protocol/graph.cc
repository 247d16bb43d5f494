#include "protocol/graph.h"

#include <disco/error.h>

#include <climits>
#include <optional>

namespace disco {
namespace protocol {

GraphProgram DecodeGraphProgram(const Any* ops, size_t n, uint64_t seq) {
  size_t at = 0;
  auto where = [&] { return "install_graph command #" + std::to_string(seq) + ": "; };
  auto next = [&](const char* what) -> const Any& {
    DISCO_CHECK(at < n, ProtocolError)
        << where() << "truncated at operand " << at << " (" << what << ")";
    return ops[at++];
  };
  auto integer = [&](const char* what, int64_t lo, int64_t hi) {
    std::optional<int64_t> v = next(what).as<int64_t>();
    DISCO_CHECK(v && *v >= lo && *v <= hi, ProtocolError)
        << where() << "operand " << at - 1 << " (" << what << ") is not an integer in [" << lo
        << ", " << hi << "]";
    return *v;
  };
  // Counts are checked against what is left, so a claim never allocates what it merely says.
  auto count = [&](const char* what, int64_t per_item) {
    const int64_t c = integer(what, 0, INT64_MAX / 2);
    DISCO_CHECK(static_cast<uint64_t>(c) * static_cast<uint64_t>(per_item) <= n - at, ProtocolError)
        << where() << what << " " << c << " is more than the " << n - at << " operands left";
    return c;
  };
  GraphProgram p;
  p.id = integer("graph id", 0, INT64_MAX);
  p.num_inputs = integer("input count", 0, kMaxGraphInputs);
  const int64_t reserved = count("reserved register count", 1);
  p.reserved.reserve(static_cast<size_t>(reserved));
  for (int64_t i = 0; i < reserved; ++i) p.reserved.push_back(integer("register", 1, INT64_MAX));
  const int64_t steps = count("step count", 3);
  p.steps.reserve(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    GraphStep step;
    step.kind = static_cast<GraphStep::Kind>(integer("step kind", 0, 2));
    step.result_reg = integer("result register", 1, INT64_MAX);
    if (step.kind == GraphStep::kLookup) {
      std::optional<std::string> name = next("name").as<std::string>();
      DISCO_CHECK(name.has_value(), ProtocolError) << where() << "step " << i << ": no name";
      step.name = std::move(*name);
      p.steps.push_back(std::move(step));
      continue;
    }
    const Any& func = next("function");
    DISCO_CHECK(func.type_code() == TypeCode::kDRef, ProtocolError)
        << where() << "step " << i << ": the function is a " << func.type_name()
        << ", not a register";
    step.func_reg = std::get<DRef>(func.storage()).reg_id();
    step.collective = integer("flags", 0, 1) != 0;
    const uint64_t mask = static_cast<uint64_t>(integer("placeholder mask", INT64_MIN, INT64_MAX));
    const int64_t nargs = integer("argument count", 0, kMaxGraphCallArgs);
    DISCO_CHECK(static_cast<size_t>(nargs) <= n - at, ProtocolError)
        << where() << "step " << i << " claims " << nargs << " arguments past the end";
    DISCO_CHECK(nargs == 64 || (mask >> nargs) == 0, ProtocolError)
        << where() << "step " << i << " marks placeholders past its " << nargs << " arguments";
    step.args.assign(ops + at, ops + at + nargs);
    at += static_cast<size_t>(nargs);
    for (int64_t a = 0; a < nargs; ++a) {
      if ((mask >> a & 1) == 0) continue;
      std::optional<int64_t> input = step.args[a].as<int64_t>();
      DISCO_CHECK(input && *input >= 0 && *input < p.num_inputs, ProtocolError)
          << where() << "step " << i << " argument " << a << " names input "
          << step.args[a].ToString() << " of " << p.num_inputs;
      step.inputs.emplace_back(static_cast<uint32_t>(a), static_cast<uint32_t>(*input));
    }
    DISCO_CHECK(step.kind == GraphStep::kCall || step.inputs.empty(), ProtocolError)
        << where() << "step " << i << ": an install step with placeholders";
    p.steps.push_back(std::move(step));
  }
  DISCO_CHECK(at == n, ProtocolError) << where() << n - at << " operands past the program";
  return p;
}

}  // namespace protocol
}  // namespace disco
