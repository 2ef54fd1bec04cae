// CUDA helpers for the GPU tests (Catch2): skip loudly without a device,
// check CUDA calls, device buffers that free themselves and can be poisoned.
// Without a CUDA device a GPU test prints "SKIPPED: no CUDA device" and
// returns; it never passes quietly.
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "qsp/qsp.h"

// Use at the top of a GPU TEST_CASE.
#define QSP_REQUIRE_GPU()                                                                                \
  do {                                                                                                   \
    if (!qsp_backend_available(QSP_BACKEND_CUDA)) {                                                      \
      std::printf("SKIPPED: no CUDA device (%s)\n", Catch::getResultCapture().getCurrentTestName().c_str()); \
      WARN("SKIPPED: no CUDA device");                                                                   \
      return;                                                                                            \
    }                                                                                                    \
  } while (0)

// REQUIRE that a CUDA call succeeded, naming the call and the error.
#define CUDA_REQUIRE(expr)                                                   \
  do {                                                                       \
    const cudaError_t cuda_e_ = (expr);                                      \
    INFO(#expr << " -> " << cudaGetErrorString(cuda_e_));                    \
    REQUIRE(cuda_e_ == cudaSuccess);                                         \
  } while (0)

namespace qsp_test {

// The NaN pattern of poisoned fp16 memory (0xFF bytes; also NaN in fp32).
constexpr uint16_t kPoison16 = 0xffff;
inline bool h_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
inline bool h_is_finite(uint16_t h) { return (h & 0x7c00) != 0x7c00; }

// Device memory of `bytes` bytes that frees itself.
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) { CUDA_REQUIRE(cudaMalloc(&p, n ? n : 1)); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  // 0xFF bytes: NaN in fp16 and fp32, so an element a kernel forgets shows.
  void poison() { CUDA_REQUIRE(cudaMemset(p, 0xff, bytes)); }
  template <class T>
  void upload(const std::vector<T>& v, size_t offset_elems = 0) {
    REQUIRE((offset_elems + v.size()) * sizeof(T) <= bytes);
    CUDA_REQUIRE(cudaMemcpy(as<T>() + offset_elems, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> v(bytes / sizeof(T));
    CUDA_REQUIRE(cudaMemcpy(v.data(), p, v.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

// The device int that kernels read `past` from.
inline void set_past(DevBuf& d_past, int32_t past) {
  CUDA_REQUIRE(cudaMemcpy(d_past.p, &past, sizeof(past), cudaMemcpyHostToDevice));
}

// The current device's compute capability major (9 = Hopper).
inline int device_major() {
  int dev = 0, major = 0;
  CUDA_REQUIRE(cudaGetDevice(&dev));
  CUDA_REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

inline size_t device_free_bytes() {
  size_t free_b = 0, total = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free_b, &total));
  return free_b;
}

}  // namespace qsp_test
