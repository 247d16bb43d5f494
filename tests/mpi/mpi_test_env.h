#ifndef DISCO_TESTS_MPI_MPI_TEST_ENV_H_
#define DISCO_TESTS_MPI_MPI_TEST_ENV_H_

#include <disco/disco.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "ccl/reduce.h"

namespace disco {
namespace testing {
/// The controller's session while the tests run (rank 0 only).
extern Session* g_session;

/// The message of the RemoteError `f` raises, or "" (and a test failure) when it raises none.
template <typename F>
std::string RemoteErrorOf(F&& f, int* worker = nullptr) {
  try {
    f();
  } catch (const RemoteError& e) {
    if (worker) *worker = e.worker();
    return e.what();
  }
  ADD_FAILURE() << "expected a RemoteError";
  return "";
}
/// A new directory for files every worker reads or writes: under DISCO_TEST_SHARED_DIR, else
/// under the build tree's tests directory (a file system every node of a cluster sees, as the
/// build does; /tmp is private to each node). Says where, once.
inline std::string SharedTempDir(const std::string& name) {
  const char* env = std::getenv("DISCO_TEST_SHARED_DIR");
  std::string base = env != nullptr && *env != '\0' ? env : DISCO_TEST_BINARY_DIR "/tmp";
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  std::string tmpl = base + "/" + name + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "cannot make a directory under " << base << ": " << std::strerror(errno)
                  << " (set DISCO_TEST_SHARED_DIR to a directory every node sees)";
    return base;
  }
  static bool said = false;
  if (!said) {
    std::printf("test files shared by every worker go under %s (DISCO_TEST_SHARED_DIR)\n",
                base.c_str());
    said = true;
  }
  return tmpl;
}
/// Element i of a host tensor of any collective dtype, as a double.
inline double Load(const Tensor& t, int64_t i) {
  DLDataType d = t.dtype();
  const void* p = t.data();
  switch (d.code) {
    case kDLInt:
      if (d.bits == 8) return static_cast<const int8_t*>(p)[i];
      if (d.bits == 16) return static_cast<const int16_t*>(p)[i];
      if (d.bits == 32) return static_cast<const int32_t*>(p)[i];
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case kDLUInt:
      if (d.bits == 8) return static_cast<const uint8_t*>(p)[i];
      if (d.bits == 16) return static_cast<const uint16_t*>(p)[i];
      if (d.bits == 32) return static_cast<const uint32_t*>(p)[i];
      return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case kDLFloat:
      if (d.bits == 16) return ccl::HalfToFloat(static_cast<const uint16_t*>(p)[i]);
      if (d.bits == 32) return static_cast<const float*>(p)[i];
      return static_cast<const double*>(p)[i];
    case kDLBfloat:
      return ccl::BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

/// Stores v into element i (rounded to nearest even for float16 and bfloat16).
inline void Store(const Tensor& t, int64_t i, double v) {
  DLDataType d = t.dtype();
  void* p = t.data();
  switch (d.code) {
    case kDLInt:
      if (d.bits == 8) static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      if (d.bits == 16) static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      if (d.bits == 32) static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      if (d.bits == 64) static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
    case kDLUInt:
      if (d.bits == 8) static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      if (d.bits == 16) static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
      if (d.bits == 32) static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v);
      if (d.bits == 64) static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v);
      return;
    case kDLFloat:
      if (d.bits == 16) static_cast<uint16_t*>(p)[i] = ccl::FloatToHalf(static_cast<float>(v));
      if (d.bits == 32) static_cast<float*>(p)[i] = static_cast<float>(v);
      if (d.bits == 64) static_cast<double*>(p)[i] = v;
      return;
    case kDLBfloat:
      static_cast<uint16_t*>(p)[i] = ccl::FloatToBFloat16(static_cast<float>(v));
      return;
  }
}

/// The value formula (tests/mpi/ccl_test.cc) whose reductions stay exact for `op`.
inline std::string FillKindFor(const std::string& op) {
  if (op == "prod") return "prod";
  if (op == "min" || op == "max") return "minmax";
  return "sum";
}

/// SyncAll, turning a RemoteError into a test failure labelled `what`.
inline void ExpectNoRemoteError(Session& s, const std::string& what) {
  try {
    s.SyncAll();
  } catch (const RemoteError& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
}
}  // namespace testing
}  // namespace disco

#endif  // DISCO_TESTS_MPI_MPI_TEST_ENV_H_
