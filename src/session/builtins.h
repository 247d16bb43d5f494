// The builtin global functions every worker has (docs/design.md#builtins).
#ifndef DISCO_SESSION_BUILTINS_H_
#define DISCO_SESSION_BUILTINS_H_

#include <cstddef>

namespace disco {
class Any;

/// Registers the builtins (idempotent). Called by disco::Main, so a static libdisco keeps them.
void RegisterBuiltins();

/// The builtin whose results collectives may trust without an agreement round.
inline constexpr const char kEmptyFunctionName[] = "disco.empty";
/// True when a call of disco.empty with these (unresolved) arguments makes a tensor whose metadata
/// is the command's on every worker: every argument by value (none a register, whose content may
/// differ between workers), worker0_only false, and host memory or each worker's own GPU
/// (ThisWorkerGpu()). Reads the command only, so every worker decides alike.
bool IsUniformEmptyCall(const Any* args, size_t num_args);
}  // namespace disco

#endif  // DISCO_SESSION_BUILTINS_H_
