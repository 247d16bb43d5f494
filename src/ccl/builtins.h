// Registration of the collective builtins (disco.allreduce, ...; see disco/ccl.h).
#ifndef DISCO_CCL_BUILTINS_H_
#define DISCO_CCL_BUILTINS_H_

#include <cstddef>

namespace disco {
namespace ccl {
/// The agreement round before a collective moves data (Communicator::HostMax, one maximum over
/// the ranks) agrees on this many int64: failed, count, -count, dtype, -dtype, location, -location.
constexpr int kAgreementValues = 7;
/// Keys agreed before that a context remembers; past this many it forgets them all.
constexpr size_t kMaxAgreedKeys = 4096;

/// Registers the collective builtins (idempotent; called with the session builtins).
void RegisterCclBuiltins();
}  // namespace ccl
}  // namespace disco

#endif  // DISCO_CCL_BUILTINS_H_
