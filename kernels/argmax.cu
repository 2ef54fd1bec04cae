// Argmax over a logits vector: *out = the lowest index of the maximum; NaN
// never wins; all-NaN (or n == 0 candidates) gives 0.
//
// One launch of one 1024-thread block per row: for a vocabulary of ~150k floats
// (600 KB) a single SM streams it in a few microseconds with float4 loads
// in flight from every thread, and there is no scratch for partial results
// nor a second launch. Each thread scans its indices in increasing order
// and only replaces its candidate on a strictly greater value, so it keeps
// the first of equal maxima; the tree then breaks ties by lower index.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/pdl.h"

namespace qsp {
namespace kern {
namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // independent float4 loads per thread in flight

struct Cand {
  float v;
  int i;  // -1: no candidate yet (only NaNs seen)
};

__device__ __forceinline__ void consider(Cand& c, float v, int i) {
  // v > c.v is false for NaN; the first non-NaN value is taken even if -inf.
  if (v > c.v || (c.i < 0 && v == v)) {
    c.v = v;
    c.i = i;
  }
}

__device__ __forceinline__ Cand better(Cand a, Cand b) {
  if (b.i < 0) return a;
  if (a.i < 0) return b;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* v, int n, int64_t ld,
                                                           int32_t* out) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  // One block per row (a batched pass has one row per piece).
  v += int64_t(blockIdx.x) * ld;
  out += blockIdx.x;
  Cand c{-INFINITY, -1};
  const int tid = int(threadIdx.x);
  int tail = 0;  // first index the scalar loop covers
  if constexpr (kVec) {
    const float4* v4 = reinterpret_cast<const float4*>(v);
    const int n4 = n / 4;
    constexpr int kStep = kThreads * kUnroll;
    int j = tid;
    for (; j + (kUnroll - 1) * kThreads < n4; j += kStep) {
      float4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = v4[j + u * kThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = 4 * (j + u * kThreads);
        consider(c, x[u].x, i);
        consider(c, x[u].y, i + 1);
        consider(c, x[u].z, i + 2);
        consider(c, x[u].w, i + 3);
      }
    }
    for (; j < n4; j += kThreads) {
      const float4 x = v4[j];
      consider(c, x.x, 4 * j);
      consider(c, x.y, 4 * j + 1);
      consider(c, x.z, 4 * j + 2);
      consider(c, x.w, 4 * j + 3);
    }
    tail = 4 * n4;
  }
  for (int i = tail + tid; i < n; i += kThreads) consider(c, v[i], i);

#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    Cand o;
    o.v = __shfl_xor_sync(0xffffffffu, c.v, off);
    o.i = __shfl_xor_sync(0xffffffffu, c.i, off);
    c = better(c, o);
  }
  __shared__ Cand s_c[kThreads / 32];
  const int warp = tid >> 5, lane = tid & 31;
  if (lane == 0) s_c[warp] = c;
  __syncthreads();
  if (warp == 0) {
    c = s_c[lane];  // kThreads / 32 == 32
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      Cand o;
      o.v = __shfl_xor_sync(0xffffffffu, c.v, off);
      o.i = __shfl_xor_sync(0xffffffffu, c.i, off);
      c = better(c, o);
    }
    if (lane == 0) *out = c.i < 0 ? 0 : c.i;
  }
}
static_assert(kThreads / 32 == 32, "the second stage reduces one candidate per lane");

}  // namespace

cudaError_t argmax_rows(const float* v, int32_t n, int64_t ld, int32_t n_rows, int32_t* out, cudaStream_t stream) {
  if (!v || !out || n < 1 || n_rows < 1 || (n_rows > 1 && ld < n)) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(v) % 16 == 0 && (n_rows == 1 || ld % 4 == 0))
    return launch_pdl(PdlKernel::kArgmax, argmax_kernel<true>, dim3(unsigned(n_rows)), dim3(kThreads), 0, stream, v,
                      n, ld, out);
  return launch_pdl(PdlKernel::kArgmax, argmax_kernel<false>, dim3(unsigned(n_rows)), dim3(kThreads), 0, stream, v, n,
                    ld, out);
}

cudaError_t argmax(const float* v, int32_t n, int32_t* out, cudaStream_t stream) {
  return argmax_rows(v, n, n, 1, out, stream);
}

}  // namespace kern
}  // namespace qsp
