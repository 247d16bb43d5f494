// The builtin global functions every worker has (DESIGN.md §2).
#ifndef DISCO_SESSION_BUILTINS_H_
#define DISCO_SESSION_BUILTINS_H_

namespace disco {
/// Registers the builtins (idempotent). Called by disco::Main, so a static libdisco keeps them.
void RegisterBuiltins();
}  // namespace disco

#endif  // DISCO_SESSION_BUILTINS_H_
