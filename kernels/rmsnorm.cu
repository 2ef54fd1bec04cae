// RMSNorm to fp16: y[m][i] = half(x[m][i] * w[i] / sqrt(mean_i(x[m][i]^2) + eps)).
//
// One block per row, fp32 math. The common case (dim % 4 == 0, 16-byte
// aligned rows, dim <= kThreads * 4 * kMaxVec) keeps the row in registers
// as float4s between the sum of squares and the scaling, so x is read once;
// anything else takes a scalar two-pass path (the second pass hits L1/L2).
//
// QSP_NORM_PRE=1 (off; thirty-fifth session, not yet measured): the vector
// kernel loads its norm weights (constants of the model) before pdl_wait,
// so they are not a second L2 round trip after the row's reduction. The
// same bits.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/env.h"
#include "kernels/kernels.h"
#include "kernels/pdl.h"

namespace qsp {
namespace kern {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxVec = 8;  // float4s per thread in registers: rows up to 8192

__device__ __forceinline__ float block_sum(float v, float* s_red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (lane == 0) s_red[warp] = v;
  __syncthreads();
  float t = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) t += s_red[w];
  return t;
}

template <int kVec>
__global__ void __launch_bounds__(kThreads) rmsnorm_vec_kernel(const float* x, int ldx,
                                                               const float* w, __half* y,
                                                               int dim, float eps, const int32_t* rows, int pre) {
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const int n4 = dim / 4;
  float4 wv[kVec];
  if (pre) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = int(threadIdx.x) + k * kThreads;
      if (i < n4) wv[k] = w4[i];
    }
  }
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  __shared__ float s_red[kThreads / 32];
  const int row = int(blockIdx.x);
  const float4* xr = reinterpret_cast<const float4*>(x + size_t(rows ? rows[row] : row) * ldx);
  float4 v[kVec];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int i = int(threadIdx.x) + k * kThreads;
    v[k] = i < n4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ss = fmaf(v[k].x, v[k].x, ss);
    ss = fmaf(v[k].y, v[k].y, ss);
    ss = fmaf(v[k].z, v[k].z, ss);
    ss = fmaf(v[k].w, v[k].w, ss);
  }
  const float scale = 1.0f / sqrtf(block_sum(ss, s_red) / float(dim) + eps);
  uint2* yr = reinterpret_cast<uint2*>(y + size_t(row) * dim);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int i = int(threadIdx.x) + k * kThreads;
    if (i < n4) {
      const float4 wk = pre ? wv[k] : w4[i];
      const __half2 lo = __floats2half2_rn(v[k].x * scale * wk.x, v[k].y * scale * wk.y);
      const __half2 hi = __floats2half2_rn(v[k].z * scale * wk.z, v[k].w * scale * wk.w);
      uint2 u;
      u.x = *reinterpret_cast<const uint32_t*>(&lo);
      u.y = *reinterpret_cast<const uint32_t*>(&hi);
      yr[i] = u;
    }
  }
}

__global__ void __launch_bounds__(kThreads) rmsnorm_scalar_kernel(const float* x, int ldx,
                                                                  const float* w,
                                                                  __half* y, int dim, float eps,
                                                                  const int32_t* rows) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  __shared__ float s_red[kThreads / 32];
  const int row = int(blockIdx.x);
  const float* xr = x + size_t(rows ? rows[row] : row) * ldx;
  float ss = 0.0f;
  for (int i = int(threadIdx.x); i < dim; i += kThreads) ss = fmaf(xr[i], xr[i], ss);
  const float scale = 1.0f / sqrtf(block_sum(ss, s_red) / float(dim) + eps);
  __half* yr = y + size_t(row) * dim;
  for (int i = int(threadIdx.x); i < dim; i += kThreads) yr[i] = __float2half_rn(xr[i] * scale * w[i]);
}

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

cudaError_t rmsnorm_f16(const float* x, int32_t ldx, const float* w, __half* y, int32_t M, int32_t dim, float eps,
                        cudaStream_t stream, const int32_t* rows) {
  if (!x || !w || !y || M < 1 || dim < 1 || ldx < dim || !(eps >= 0.0f)) return cudaErrorInvalidValue;
  const int n4 = dim / 4;
  const bool vec = dim % 4 == 0 && ldx % 4 == 0 && aligned(x, 16) && aligned(w, 16) && aligned(y, 8);
  const unsigned grid = unsigned(M);
  if (vec && n4 <= kThreads * kMaxVec) {
    // The fewest registers that hold the row: 1, 2, 4 or 8 float4s per thread.
    const auto kernel = n4 <= kThreads       ? rmsnorm_vec_kernel<1>
                        : n4 <= 2 * kThreads ? rmsnorm_vec_kernel<2>
                        : n4 <= 4 * kThreads ? rmsnorm_vec_kernel<4>
                                             : rmsnorm_vec_kernel<8>;
    static const int pre = env_on("QSP_NORM_PRE") ? 1 : 0;
    return launch_pdl(PdlKernel::kRmsnorm, kernel, grid, dim3(kThreads), 0, stream, x, ldx, w, y, dim, eps, rows,
                      pre);
  }
  return launch_pdl(PdlKernel::kRmsnorm, rmsnorm_scalar_kernel, grid, dim3(kThreads), 0, stream, x, ldx, w, y, dim, eps,
                    rows);
}

}  // namespace kern
}  // namespace qsp
