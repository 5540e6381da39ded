// GPU tests skip, with the reason, on a machine without a usable GPU (CI, the CPU development
// machines); on the H200 they run. REQUIRE_GPU() goes first in every test of tests/cuda.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/device.h"

#define REQUIRE_GPU()                                      \
  do {                                                     \
    std::string strata_why_;                               \
    if (::strata::cuda::device_count(&strata_why_) == 0)   \
      GTEST_SKIP() << "GPU test skipped: " << strata_why_; \
  } while (0)
