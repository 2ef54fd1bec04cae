// The GEMV's arithmetic, shared by its two kernels: kernels/gemv.cu (weights
// straight from global memory into registers) and kernels/gemv_bulk.cu (sm_90:
// weights through a shared-memory ring that bulk copies keep full). Per
// 16-row tile and 64-column chunk: the activations' B fragments, the tensor
// core products of the chunk, and at the end the reduction of the warps'
// partial sums with the epilogue.
//
// Weights are the mma A operand (16 weight rows per tile), the tokens the
// 8-wide B operand, so M = 1 wastes 7/8 of a tiny tensor-core op instead of
// 15/16. The K-quants (WTraits::kFactored) give exact integer codes and
// per-row fp32 scales: the mma sums code x activation per k step in fp32 and
// the scales are applied to those sums: fewer instructions per weight than
// fp16 weights with split scales (frags), and no fp16 rounding of the
// weights.
#pragma once

#include <type_traits>

#include "kernels/gemm_internal.cuh"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {
namespace gemv {

constexpr int kMaxWarps = 8;
constexpr int kRedLd = 20;  // smem row stride of the reduction: the partial writes of a warp hit 32 banks

// Formats whose GEMV applies the scales after the mma (WTraits::kFactored:
// codes + per-row scales) instead of decoding fp16 weights (frags).
template <class T, class = void>
struct Factored : std::false_type {};
template <class T>
struct Factored<T, std::void_t<decltype(T::kFactored)>> : std::bool_constant<T::kFactored> {};

template <int NM, int MT>
__device__ __forceinline__ void zero(float (&acc)[NM][MT][4]) {
#pragma unroll
  for (int w = 0; w < NM; ++w)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[w][mt][r] = 0.0f;
}

// Tile `tile`'s matrix (a row-group member unless kSwiGLU, whose gate is
// w[0] and up w[1]) and its unit 0.
template <bool kDual>
__device__ __forceinline__ WLoc tile_loc(const KArgs& a, int tile) {
  return kDual ? WLoc{a.w[0], uint32_t(a.scale_off), tile} : locate(a.grp, tile);
}

// The B fragments of chunk c for MT m8 token tiles: xb[mt][s] = X row
// mt * 8 + g, k step s: cols 16s + 2t, +1 and 16s + 2t + 8, +9 (zero past M,
// past K, or for a chunk that is not there: ok = false).
template <int MT>
__device__ __forceinline__ void load_x(uint32_t (&xb)[MT][4][2], const KArgs& a, int c, bool ok, int g, int t) {
  const int M = a.o.M;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = mt * 8 + g;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t* r = xb[mt][s];
      if (ok && m < M && c * 64 + 16 * s < a.K) {
        const __half* xp = a.x + size_t(m) * size_t(a.ldx) + c * 64 + 16 * s + 2 * t;
        ldg32(r[0], xp);
        ldg32(r[1], xp + 8);
      } else {
        r[0] = r[1] = 0u;
      }
    }
  }
}

// The RMSNorm fused into the GEMV (KArgs::xf): inv[m] = 1 / sqrt(mean_k
// (xf[m][k]^2) + eps) for the M rows, every thread of the block striding
// over each row (float4 loads), warp sums through part ([kMaxWarps][16]).
// Called by every thread of the block, after pdl_wait (xf is the previous
// kernel's output); ends with a barrier.
__device__ __forceinline__ void norm_scales(const KArgs& a, float (*part)[16], float* inv) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int n4 = a.K / 4;
  for (int m = 0; m < a.o.M; ++m) {
    const float4* xr = reinterpret_cast<const float4*>(a.xf + size_t(m) * size_t(a.ldx));
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
      const float4 v = xr[i];
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) part[warp][m] = ss;
  }
  __syncthreads();
  if (int(threadIdx.x) < a.o.M) {
    float s = 0.0f;
    for (int w = 0; w < kw; ++w) s += part[w][threadIdx.x];
    inv[threadIdx.x] = 1.0f / sqrtf(s / float(a.K) + a.eps);
  }
  __syncthreads();
}

// load_x's fragments from the fused RMSNorm's fp32 rows: each value
// half(xf * inv[m] * nw), in rmsnorm_f16's order of operations.
template <int MT>
__device__ __forceinline__ void load_x_norm(uint32_t (&xb)[MT][4][2], const KArgs& a, const float* inv, int c,
                                            bool ok, int g, int t) {
  const int M = a.o.M;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = mt * 8 + g;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t* r = xb[mt][s];
      if (ok && m < M && c * 64 + 16 * s < a.K) {
        const int k = c * 64 + 16 * s + 2 * t;
        const float* xp = a.xf + size_t(m) * size_t(a.ldx) + k;
        const float2 v0 = *reinterpret_cast<const float2*>(xp), v1 = *reinterpret_cast<const float2*>(xp + 8);
        const float2 w0 = *reinterpret_cast<const float2*>(a.nw + k);
        const float2 w1 = *reinterpret_cast<const float2*>(a.nw + k + 8);
        const float sc = inv[m];
        const __half2 h0 = __floats2half2_rn(v0.x * sc * w0.x, v0.y * sc * w0.y);
        const __half2 h1 = __floats2half2_rn(v1.x * sc * w1.x, v1.y * sc * w1.y);
        r[0] = *reinterpret_cast<const uint32_t*>(&h0);
        r[1] = *reinterpret_cast<const uint32_t*>(&h1);
      } else {
        r[0] = r[1] = 0u;
      }
    }
  }
}

// acc[w][mt] += the products of one chunk: raw[w], the lane's undecoded
// words of matrix w (W, or gate and up), against the B fragments xb.
template <class T, int NM, int MT>
__device__ __forceinline__ void chunk_mma(float (&acc)[NM][MT][4], const typename T::Raw (&raw)[NM],
                                          const uint32_t (&xb)[MT][4][2]) {
  if constexpr (Factored<T>::value) {
    // x = ds * code + nm per row: the exact codes against the activations
    // on the tensor cores (fp32 sums over the SP k steps that share a
    // scale), then ds times that, plus nm times the same steps' activation
    // sums (an mma with A = 1, shared by the matrices; affine formats).
    constexpr int SP = T::kScaleSteps;
#pragma unroll
    for (int h = 0; h < 4 / SP; ++h) {
      float xs[MT][4];
      if constexpr (T::kAffine) {
        const uint32_t ones[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int r = 0; r < 4; ++r) xs[mt][r] = 0.0f;
#pragma unroll
          for (int k = 0; k < SP; ++k) mma_m16n8k16(xs[mt], ones, xb[mt][SP * h + k][0], xb[mt][SP * h + k][1]);
        }
      }
#pragma unroll
      for (int w = 0; w < NM; ++w) {
        uint32_t A[SP][4];
#pragma unroll
        for (int k = 0; k < SP; ++k) {
          uint32_t f[4];
          T::codes(raw[w], SP * h + k, f);
          A[k][0] = f[0], A[k][1] = f[2], A[k][2] = f[1], A[k][3] = f[3];
        }
        float ds[2], nm[2];
        T::scales(raw[w], SP * h, ds, nm);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int k = 0; k < SP; ++k) mma_m16n8k16(d, A[k], xb[mt][SP * h + k][0], xb[mt][SP * h + k][1]);
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            acc[w][mt][r] = fmaf(ds[r >> 1], d[r], acc[w][mt][r]);
            if constexpr (T::kAffine) acc[w][mt][r] = fmaf(nm[r >> 1], xs[mt][r], acc[w][mt][r]);
          }
        }
      }
    }
  } else {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int w = 0; w < NM; ++w) {
        uint32_t f[4];
        T::frags(raw[w], s, f);
        const uint32_t A[4] = {f[0], f[2], f[1], f[3]};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_m16n8k16(acc[w][mt], A, xb[mt][s][0], xb[mt][s][1]);
      }
    }
  }
}

// The warps' partial sums of tile `tile` through shared memory (red:
// [kMaxWarps][NM][MT * 8][kRedLd] floats), then the epilogue of each output.
// Called by every thread of the block.
template <Epilogue EP, int NM, int MT>
__device__ __forceinline__ void reduce_store(float (*red)[NM][MT * 8][kRedLd], const float (&acc)[NM][MT][4],
                                             const KArgs& a, int tile) {
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int M = a.o.M, N = a.o.N;
  // D[n][m]: c0, c1 = (n = g, m = 2t, 2t+1); c2, c3 = (n = g + 8, same m).
#pragma unroll
  for (int w = 0; w < NM; ++w)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][w][mt * 8 + 2 * t + (r & 1)][g + 8 * (r >> 1)] = acc[w][mt][r];
  __syncthreads();
  for (int e = threadIdx.x; e < MT * 8 * 16; e += blockDim.x) {
    const int m = e / 16, nl = e % 16, n = tile * 16 + nl;
    if (m >= M || n >= N) continue;
    float s0 = 0.0f, s1 = 0.0f;
    for (int w = 0; w < kw; ++w) {
      s0 += red[w][0][m][nl];
      if (kDual) s1 += red[w][NM - 1][m][nl];
    }
    const size_t i = size_t(m) * size_t(a.o.ldo) + size_t(n);
    if (EP == Epilogue::kStoreF16) a.o.out_h[i] = __float2half_rn(s0);
    if (EP == Epilogue::kSwiGLU) a.o.out_h[i] = __float2half_rn(silu(s0) * s1);
    if (EP == Epilogue::kStoreF32) a.o.out_f[i] = s0;
    if (EP == Epilogue::kAddF32) a.o.out_f[i] += s0;
  }
}

}  // namespace gemv
}  // namespace kern
}  // namespace qsp
