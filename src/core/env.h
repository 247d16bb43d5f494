// Every DISCO_* environment knob, declared in one place: core/env_knobs.def (one grep lists them
// all; `disco-run --help-env` prints that table).
#ifndef DISCO_CORE_ENV_H_
#define DISCO_CORE_ENV_H_

#include <cstdint>
#include <string>
#include <vector>

namespace disco {
namespace env {

struct Knob {
  const char* name;
  const char* default_value;
  const char* help;
};

/// The table of knobs above.
const std::vector<Knob>& AllKnobs();
/// The value of knob `name` from the environment, or its default. `name` must be declared above.
std::string GetString(const char* name);
/// As GetString, parsed as an integer; throws ValueError naming the variable when it is not one or
/// lies outside [min, max].
int64_t GetInt(const char* name, int64_t min, int64_t max);

}  // namespace env
}  // namespace disco

#endif  // DISCO_CORE_ENV_H_
