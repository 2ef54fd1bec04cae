// The split-KV merge of kernels/attention_mma.cu's partials: one block per
// (token, head) row.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention_internal.cuh"
#include "kernels/pdl.h"
#include "kernels/ptx.cuh"

namespace qsp {
namespace kern {
namespace attn {
namespace {

// Merges the split-KV partials of one (token, head) row per block:
//   out = sum_s 2^(lse_s - max) O_s / sum_s 2^(lse_s - max).
// The splits are spread over the threads (kSplitsPerStep at a time, each
// split's row over kLanesPerSplit threads as float4s) and the loads are
// unrolled, so a row costs a few dependent global round trips rather than
// one per split.

template <int D>
__global__ void __launch_bounds__(kCombineThreads) attn_combine_kernel(const float* o_part,
                                                                       const float* lse_part,
                                                                       __half* out, int rows,
                                                                       int n_splits) {
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
  constexpr int kLanesPerSplit = D / 4;
  constexpr int kSplitsPerStep = kCombineThreads / kLanesPerSplit;
  constexpr int kUnroll = 4;
  static_assert(kCombineThreads % kLanesPerSplit == 0 && 32 % kLanesPerSplit == 0, "splits map to warp slices");
  __shared__ float s_w[kCombineMaxSplits];
  __shared__ float s_red[kCombineThreads / 32];
  __shared__ float4 s_acc[kSplitsPerStep][kLanesPerSplit];

  const int row = int(blockIdx.x);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;

  // 1. max over the splits' log-sum-exps (base 2)
  const float lse = tid < n_splits ? lse_part[size_t(tid) * rows + row] : -INFINITY;
  float mx = lse;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (lane == 0) s_red[warp] = mx;
  __syncthreads();
  mx = s_red[0];
#pragma unroll
  for (int w = 1; w < kCombineThreads / 32; ++w) mx = fmaxf(mx, s_red[w]);
  // Weights; an empty split (lse -inf) gets 0 and its O is never read.
  const float w = lse == -INFINITY ? 0.0f : exp2f(lse - mx);
  if (tid < n_splits) s_w[tid] = w;
  float wsum = w;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) wsum += __shfl_xor_sync(0xffffffffu, wsum, off);
  __syncthreads();  // s_w complete, everyone has read s_red
  if (lane == 0) s_red[warp] = wsum;

  // 2. weighted sum of the partial O rows
  const int sub = tid / kLanesPerSplit, c = tid % kLanesPerSplit;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = sub; s0 < n_splits; s0 += kSplitsPerStep * kUnroll) {
    float4 v[kUnroll];
    float ws[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + u * kSplitsPerStep;
      ws[u] = s < n_splits ? s_w[s] : 0.0f;
      v[u] = ws[u] != 0.0f ? *reinterpret_cast<const float4*>(o_part + (size_t(s) * rows + row) * D + c * 4)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      acc.x += ws[u] * v[u].x;
      acc.y += ws[u] * v[u].y;
      acc.z += ws[u] * v[u].z;
      acc.w += ws[u] * v[u].w;
    }
  }
  s_acc[sub][c] = acc;
  __syncthreads();

  // 3. reduce over the thread slices, normalize, store fp16
  if (tid < kLanesPerSplit) {
    float total = 0.0f;
#pragma unroll
    for (int w2 = 0; w2 < kCombineThreads / 32; ++w2) total += s_red[w2];
    float4 r = s_acc[0][tid];
#pragma unroll
    for (int k = 1; k < kSplitsPerStep; ++k) {
      const float4 t = s_acc[k][tid];
      r.x += t.x, r.y += t.y, r.z += t.z, r.w += t.w;
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    uint2 h;
    h.x = pack_half2(r.x * inv, r.y * inv);
    h.y = pack_half2(r.z * inv, r.w * inv);
    *reinterpret_cast<uint2*>(out + size_t(row) * D + tid * 4) = h;
  }
}

}  // namespace

cudaError_t launch_combine(const float* o_part, const float* lse_part, __half* out, int rows, int n_splits,
                           int head_dim, cudaStream_t stream) {
  return launch_pdl(PdlKernel::kCombine, head_dim == 128 ? attn_combine_kernel<128> : attn_combine_kernel<64>,
                    dim3(unsigned(rows)), dim3(kCombineThreads), 0, stream, o_part, lse_part, out, rows, n_splits);
}

}  // namespace attn
}  // namespace kern
}  // namespace qsp
