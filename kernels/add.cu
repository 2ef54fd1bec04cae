// dst += src over n floats: the sum of the shards' residual streams when the
// ranks of a split context share one GPU (the CUDA backend's
// QSP_TP_LOCAL_RANKS test mode, src/cuda/cuda_pass.cu: its stand-in for
// the NCCL all-reduce, adding the ranks' copies in rank order). Memory
// bound: float4 where the pointers allow, one element per thread otherwise.
// And add_i32, one int (a position computed on the stream).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/launch_profile.h"

namespace qsp {
namespace kern {
namespace {

constexpr int kThreads = 256;

__global__ void add_f32_kernel(float* dst, const float* src, int64_t n, bool vec) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (vec) {
    if (4 * i + 3 < n) {
      float4 d = reinterpret_cast<float4*>(dst)[i];
      const float4 s = reinterpret_cast<const float4*>(src)[i];
      d.x += s.x, d.y += s.y, d.z += s.z, d.w += s.w;
      reinterpret_cast<float4*>(dst)[i] = d;
    } else {
      for (int64_t j = 4 * i; j < n; ++j) dst[j] += src[j];
    }
  } else if (i < n) {
    dst[i] += src[i];
  }
}

__global__ void add_i32_kernel(const int32_t* a, int32_t b, int32_t* out) { *out = *a + b; }

}  // namespace

cudaError_t add_i32(const int32_t* a, int32_t b, int32_t* out, cudaStream_t stream) {
  if (a == nullptr || out == nullptr) return cudaErrorInvalidValue;
  const prof::Scope timed("add_i32", dim3(1), dim3(1), stream);
  add_i32_kernel<<<1, 1, 0, stream>>>(a, b, out);
  return cudaGetLastError();
}

cudaError_t add_f32(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (dst == nullptr || src == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const bool vec = reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const int64_t items = vec ? (n + 3) / 4 : n;
  const dim3 grid(unsigned((items + kThreads - 1) / kThreads));
  const prof::Scope timed("add_f32", grid, dim3(kThreads), stream);
  add_f32_kernel<<<grid, kThreads, 0, stream>>>(dst, src, n, vec);
  return cudaGetLastError();
}

}  // namespace kern
}  // namespace qsp
