// Checks for the benchmarks (programs, not the library: a failed call prints
// where and why and exits 1). Plain C++ with the CUDA runtime, no Catch2;
// the tests use CUDA_REQUIRE (support/cuda.h) instead.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "qsp/qsp.h"

// A CUDA runtime call (or a kern:: launcher, which returns cudaError_t).
#define QSP_CK(x)                                                                                \
  do {                                                                                           \
    const cudaError_t ck_e_ = (x);                                                               \
    if (ck_e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(ck_e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// A qsp C API call.
#define QSP_QK(x)                                                                                       \
  do {                                                                                                  \
    const qsp_status qk_s_ = (x);                                                                       \
    if (qk_s_ != QSP_OK) {                                                                              \
      std::fprintf(stderr, "%s failed: %s: %s\n", #x, qsp_status_string(qk_s_), qsp_last_error());      \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)
