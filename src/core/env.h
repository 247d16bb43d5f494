// Every DISCO_* environment knob, declared in one place (one grep lists them all; `disco-run
// --help-env` prints this table).
#ifndef DISCO_CORE_ENV_H_
#define DISCO_CORE_ENV_H_

#include <cstdint>
#include <string>
#include <vector>

// X(name, default, help)
#define DISCO_ENV_KNOBS(X)                                                                       \
  X(DISCO_LOG_LEVEL, "error", "log level: error, warn, info (adds a banner per rank) or debug")  \
  X(DISCO_TIMEOUT, "300", "seconds before a stuck command or collective ends the job (0 = off)") \
  X(DISCO_CCL, "auto", "collective library for InitCCL: auto, mpi or nccl")                      \
  X(DISCO_NUM_GROUPS, "1", "number of worker groups (must divide the number of workers)")        \
  X(DISCO_INLINE_BYTES, "256",                                                                   \
    "size of the one-broadcast control frame; larger commands take a second broadcast")          \
  X(DISCO_MAX_FRAME_BYTES, "2147483647", "largest command or reply a rank accepts, in bytes")

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
