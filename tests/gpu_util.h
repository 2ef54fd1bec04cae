// Helpers for the GPU tests: they build everywhere and, on a machine without
// a CUDA device, report themselves skipped loudly instead of passing quietly.
#pragma once

#include <cstdio>

#include "qsp/qsp.h"

// Use at the top of a GPU TEST_CASE.
#define QSP_REQUIRE_GPU()                                                    \
  do {                                                                       \
    if (!qsp_backend_available(QSP_BACKEND_CUDA)) {                          \
      std::printf("SKIPPED: no CUDA device (%s)\n", Catch::getResultCapture().getCurrentTestName().c_str()); \
      WARN("SKIPPED: no CUDA device");                                       \
      return;                                                                \
    }                                                                        \
  } while (0)
