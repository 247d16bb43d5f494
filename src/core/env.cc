#include "core/env.h"

#include <disco/error.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace disco {
namespace env {

const std::vector<Knob>& AllKnobs() {
#define X(name, def, help) Knob{#name, def, help},
  static const std::vector<Knob> knobs = {
#include "core/env_knobs.def"
  };
#undef X
  return knobs;
}

std::string GetString(const char* name) {
  for (const Knob& knob : AllKnobs()) {
    if (std::strcmp(knob.name, name) == 0) {
      const char* value = std::getenv(name);
      return (value != nullptr && *value != '\0') ? value : knob.default_value;
    }
  }
  DISCO_THROW(InternalError) << "environment knob " << name << " is not declared in core/env.h";
}

int64_t GetInt(const char* name, int64_t min, int64_t max) {
  std::string text = GetString(name);
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);  // NOLINT(runtime/int)
  DISCO_CHECK(errno == 0 && end != text.c_str() && *end == '\0', ValueError)
      << name << "='" << text << "' is not an integer";
  DISCO_CHECK(value >= min && value <= max, ValueError)
      << name << "=" << value << " is outside [" << min << ", " << max << "]";
  return value;
}

}  // namespace env
}  // namespace disco
