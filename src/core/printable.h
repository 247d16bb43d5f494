// Text from programs and peers (function names, file paths, a rank's state) shown in one line of
// the log: every byte that is not printable ASCII reads '?', so that a newline or a terminal's
// escape codes in a name cannot split or forge a line. Async-signal-safe.
#ifndef DISCO_CORE_PRINTABLE_H_
#define DISCO_CORE_PRINTABLE_H_

#include <cstddef>

namespace disco {

inline char PrintableChar(char c) { return c < 0x20 || c > 0x7e ? '?' : c; }

/// Makes the NUL-terminated text in `text` (`cap` bytes) printable in place, and terminates it
/// at `cap` - 1 at the latest.
inline void MakePrintable(char* text, size_t cap) {
  if (cap == 0) return;
  text[cap - 1] = '\0';
  for (size_t i = 0; text[i] != '\0'; ++i) text[i] = PrintableChar(text[i]);
}

}  // namespace disco

#endif  // DISCO_CORE_PRINTABLE_H_
