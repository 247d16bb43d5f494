#include "core/process_info.h"

#include <fstream>

namespace disco {

MemoryUse GetMemoryUse() {
  MemoryUse use;
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) use.rss_kib = std::stoll(line.substr(6));
    if (line.rfind("VmHWM:", 0) == 0) use.peak_kib = std::stoll(line.substr(6));
  }
  return use;
}

bool ResetPeakMemory() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear) && GetMemoryUse().peak_kib >= 0;
}

}  // namespace disco
