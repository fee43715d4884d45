// Test-only: REQUIRE_GPU() skips the current GoogleTest test, saying why, on a machine
// where no GPU is usable (kernels/gpu.h ListGpus), so GPU tests report "skipped", never a
// pass, without one.
#ifndef CASCADE_KERNELS_GPU_TEST_UTIL_H_
#define CASCADE_KERNELS_GPU_TEST_UTIL_H_

#include <string>

#include "gtest/gtest.h"
#include "kernels/gpu.h"

#define REQUIRE_GPU()                                                        \
  do {                                                                       \
    std::string why_no_gpu;                                                  \
    if (::cascade::ListGpus(&why_no_gpu).empty()) {                          \
      GTEST_SKIP() << "no GPU: " << why_no_gpu;                              \
    }                                                                        \
  } while (0)

#endif  // CASCADE_KERNELS_GPU_TEST_UTIL_H_
