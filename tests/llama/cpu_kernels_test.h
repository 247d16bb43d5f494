// The fixture of the CPU kernels' tests (q8_test.cc, kernels_test.cc): each test runs under the
// kernel set DISCO_CPU_KERNELS names (CTest runs the binary once per set), and is skipped, saying
// why, where this CPU or build lacks it.
#ifndef DISCO_TESTS_LLAMA_CPU_KERNELS_TEST_H_
#define DISCO_TESTS_LLAMA_CPU_KERNELS_TEST_H_

#include <disco/error.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "llama/kernels.h"

class CpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string kernels;
    try {
      kernels = llama::CpuKernels();
    } catch (const disco::ValueError& e) {
      GTEST_SKIP() << e.what();
    }
    std::printf("kernels: %s\n", kernels.c_str());
  }
};

#endif  // DISCO_TESTS_LLAMA_CPU_KERNELS_TEST_H_
