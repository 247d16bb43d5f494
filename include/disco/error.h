/// \file disco/error.h
/// \brief The error types every disco call may throw, and the one CHECK family that throws them.
///
/// Every message starts with `[rank R/N host] ` so that a line from a 64-rank job names its origin.
/// `DISCO_CHECK(cond, ValueError) << "..."` is for mistakes a user can make, and its message is the
/// sentence alone; `DISCO_ICHECK*` is for invariants of disco itself: it prints both operands and
/// ends with the file, line and condition, for the bug report.
#ifndef DISCO_ERROR_H_
#define DISCO_ERROR_H_

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace disco {

/// Base class of every error disco throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// A bad argument value: out of range, wrong shape, unknown name.
class ValueError : public Error {
 public:
  using Error::Error;
};

/// A value of the wrong type, e.g. `Any::cast<int64_t>()` of a string.
class TypeError : public Error {
 public:
  using Error::Error;
};

/// A malformed frame or argument buffer: truncated, oversized, unknown tag, wrong magic.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

/// A failure of MPI, CUDA, NCCL, HDF5 or the operating system.
class RuntimeError : public Error {
 public:
  using Error::Error;
};

/// A broken invariant inside disco: a bug, please report it.
class InternalError : public Error {
 public:
  using Error::Error;
};

/// An error raised by a function on a worker, re-raised on the controller at the next
/// `SyncWorker`, `SyncAll` or debug read.
class RemoteError : public Error {
 public:
  RemoteError(const std::string& msg, int worker) : Error(msg), worker_(worker) {}
  /// The (lowest) worker id that reported the failure.
  int worker() const { return worker_; }

 private:
  int worker_;
};

namespace detail {

/// "[rank R/N host] ", computed once MPI is up ("[rank -/- host] " before).
std::string RankPrefix();

/// Collects a message with operator<< and throws `E` from its destructor, at the end of the full
/// expression that created it.
template <typename E>
class ErrorBuilder {
 public:
  ErrorBuilder(const char* file, int line, const char* what) : file_(file), line_(line) {
    if (what != nullptr) condition_ = what;
  }
  ErrorBuilder(const ErrorBuilder&) = delete;
  ErrorBuilder& operator=(const ErrorBuilder&) = delete;
  [[noreturn]] ~ErrorBuilder() noexcept(false) {
    std::string msg = RankPrefix() + stream_.str();
    // A user's error reads as a sentence; only a broken invariant of disco's (a bug to report)
    // says where it broke: " [file.cc:12: internal check `a == b` failed]".
    if constexpr (std::is_same_v<E, InternalError>) {
      msg += " [";
      msg += file_;
      msg += ":" + std::to_string(line_);
      if (!condition_.empty()) msg += ": " + condition_;
      msg += "]";
    }
    throw E(msg);
  }
  std::ostringstream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  std::string condition_;
  std::ostringstream stream_;
};

template <typename A, typename B>
std::string BinaryCheckOperands(const A& a, const B& b) {
  std::ostringstream os;
  os << " (" << a << " vs. " << b << ")";
  return os.str();
}

}  // namespace detail
}  // namespace disco

/// Throws `disco::ErrorType` with a message built by the following `<<` when `cond` is false.
#define DISCO_CHECK(cond, ErrorType)                                              \
  if (__builtin_expect(!!(cond), 1)) {                                            \
  } else                                                                          \
    ::disco::detail::ErrorBuilder<::disco::ErrorType>(__FILE__, __LINE__,         \
                                                      "check `" #cond "` failed") \
        .stream()

/// Throws `disco::ErrorType` unconditionally with the message that follows.
#define DISCO_THROW(ErrorType) \
  ::disco::detail::ErrorBuilder<::disco::ErrorType>(__FILE__, __LINE__, nullptr).stream()

#define DISCO_ICHECK_BINARY_(a, b, op)                                             \
  if (auto disco_icheck_ok_ = ((a)op(b)); __builtin_expect(disco_icheck_ok_, 1)) { \
  } else                                                                           \
    ::disco::detail::ErrorBuilder<::disco::InternalError>(                         \
        __FILE__, __LINE__, "internal check `" #a " " #op " " #b "` failed")       \
            .stream()                                                              \
        << ::disco::detail::BinaryCheckOperands((a), (b)) << " "

/// Invariant checks; a failure is a disco bug and throws `disco::InternalError`.
#define DISCO_ICHECK(cond) DISCO_CHECK(cond, InternalError)
#define DISCO_ICHECK_EQ(a, b) DISCO_ICHECK_BINARY_(a, b, ==)
#define DISCO_ICHECK_NE(a, b) DISCO_ICHECK_BINARY_(a, b, !=)
#define DISCO_ICHECK_LT(a, b) DISCO_ICHECK_BINARY_(a, b, <)
#define DISCO_ICHECK_LE(a, b) DISCO_ICHECK_BINARY_(a, b, <=)
#define DISCO_ICHECK_GE(a, b) DISCO_ICHECK_BINARY_(a, b, >=)

#endif  // DISCO_ERROR_H_
