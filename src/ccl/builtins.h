// Registration of the collective builtins (disco.allreduce, ...; see disco/ccl.h).
#ifndef DISCO_CCL_BUILTINS_H_
#define DISCO_CCL_BUILTINS_H_

namespace disco {
namespace ccl {
/// Registers the collective builtins (idempotent; called with the session builtins).
void RegisterCclBuiltins();
}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_BUILTINS_H_
