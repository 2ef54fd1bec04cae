// The GEMV (M <= 16): decode and the LM head. Memory bound: every weight
// byte is read once with 16-byte streaming loads. One block per 16-row tile;
// its warps split K and reduce through shared memory. The per-format part
// (global -> raw words -> fragments) is the format's WTraits; the arithmetic
// per 64-column chunk (namespace gemv below): the activations' B fragments,
// the tensor core products of the chunk, and at the end the reduction of the
// warps' partial sums with the epilogue.
//
// Weights are the mma A operand (16 weight rows per tile), the tokens the
// 8-wide B operand, so M = 1 wastes 7/8 of a tiny tensor-core op instead of
// 15/16. The K-quants (WTraits::kFactored) give exact integer codes and
// per-row fp32 scales: the mma sums code x activation per k step in fp32 and
// the scales are applied to those sums: fewer instructions per weight than
// fp16 weights with split scales (frags), and no fp16 rounding of the
// weights.
#include <algorithm>
#include <type_traits>

#include "kernels/env.h"
#include "kernels/formats/formats.cuh"
#include "kernels/gemm_internal.cuh"
#include "kernels/gemv_i8.cuh"
#include "kernels/pdl.h"
#include "kernels/per_device.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {
namespace {

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
// past K, or for a chunk that is not there: ok = false). x: rows ld apart,
// in global memory (the previous kernel's output: coherent loads), or
// kShared, the block's normed rows (GemmArgs::norm_in_x), zero from K to
// KC * 64 so that K needs no check.
template <int MT, bool kShared>
__device__ __forceinline__ void load_x(uint32_t (&xb)[MT][4][2], const __half* x, size_t ld, int M, int K, int c,
                                       bool ok, int g, int t) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = mt * 8 + g;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t* r = xb[mt][s];
      if (ok && m < M && (kShared || c * 64 + 16 * s < K)) {
        const __half* xp = x + size_t(m) * ld + c * 64 + 16 * s + 2 * t;
        if constexpr (kShared) {
          r[0] = *reinterpret_cast<const uint32_t*>(xp);
          r[1] = *reinterpret_cast<const uint32_t*>(xp + 8);
        } else {
          ldg32_dep(r[0], xp);
          ldg32_dep(r[1], xp + 8);
        }
      } else {
        r[0] = r[1] = 0u;
      }
    }
  }
}

// The permuted layout (kPerm, $QSP_GEMV_XSMEM): row m at m * perm_row(KC)
// bytes, then per 64-column chunk c and fragment column t the 8 words lane
// (g, t) needs, in order (word 2s: cols 16s + 2t, +1; word 2s + 1: cols
// 16s + 2t + 8, +9): two lds.128 a chunk, no predicates. The row stride's
// extra 16 bytes put rows g and g + 1 on other banks.
__host__ __device__ constexpr int perm_row(int KC) { return KC * 128 + 16; }
// Byte offset of the word holding cols j, j + 1 (j even) of row m.
__device__ __forceinline__ int perm_word(int row_bytes, int m, int j) {
  const int c = j >> 6, jj = j & 63, s = jj >> 4, r = jj & 15;
  return m * row_bytes + c * 128 + ((r & 7) >> 1) * 32 + (2 * s + (r >> 3)) * 4;
}

// Stores cols j, j + 1 (j even) of row m of the staged activations.
template <bool kPerm>
__device__ __forceinline__ void put_pair(__half* xs, int KP, int m, int j, __half2 v) {
  if constexpr (kPerm)
    *reinterpret_cast<__half2*>(reinterpret_cast<char*>(xs) + perm_word(perm_row(KP / 64), m, j)) = v;
  else
    *reinterpret_cast<__half2*>(xs + m * KP + j) = v;
}

// kPerm: the block's M rows of x (fp16, the previous kernel's output) into
// the permuted layout, zero from K to KP. Ends with them visible.
__device__ __forceinline__ void stage_x(const KArgs& a, __half* xs, int KP) {
  const int K = a.K;
  for (int m = 0; m < a.o.M; ++m) {
    const __half* xr = a.x + size_t(m) * size_t(a.ldx);
    for (int i = threadIdx.x; i < KP / 8; i += blockDim.x) {
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (8 * i < K) v = *reinterpret_cast<const uint4*>(xr + 8 * i);  // K % 8 == 0 (gemm())
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        __half2 h;
        memcpy(&h, &w[p], 4);
        put_pair<true>(xs, KP, m, 8 * i + 2 * p, h);
      }
    }
  }
  __syncthreads();
}

// load_x's fragments from the permuted layout: lanes past M read row 0
// (their token columns are never stored) and a chunk past KC reads the last
// (it is never multiplied), so no predicate.
template <int MT>
__device__ __forceinline__ void load_x_perm(uint32_t (&xb)[MT][4][2], const __half* xs, int KC, int M, int c,
                                            int g, int t) {
  static_assert(MT == 1, "the permuted activations are for M <= 8");
  const int m = g < M ? g : 0;
  const uint32_t at = smem_u32(xs) + uint32_t(m * perm_row(KC) + min(c, KC - 1) * 128 + t * 32);
  uint32_t w[8];
  lds128(w[0], w[1], w[2], w[3], at);
  lds128(w[4], w[5], w[6], w[7], at + 16);
#pragma unroll
  for (int s = 0; s < 4; ++s) xb[0][s][0] = w[2 * s], xb[0][s][1] = w[2 * s + 1];
}

// 1 / rms of row m of a.xin (GemmArgs::norm_in_x), rmsnorm_f16's sums in
// its order (its 256 threads as virtual warps). Called by every thread of
// the block; part[] may be reused only after a barrier.
__device__ __forceinline__ float norm_scale(const KArgs& a, int m) {
  constexpr int kNormThreads = 256;  // rmsnorm.cu's kThreads
  __shared__ float part[kNormThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int K = a.K, n4 = K / 4;
  const float4* xr = reinterpret_cast<const float4*>(a.xin + size_t(m) * size_t(a.xin_ld));
  for (int vw = warp; vw < kNormThreads / 32; vw += kw) {
    float ss = 0.0f;
    for (int i = vw * 32 + lane; i < n4; i += kNormThreads) {
      const float4 v = xr[i];
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) part[vw] = ss;
  }
  __syncthreads();
  float t = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) t += part[w];
  return 1.0f / sqrtf(t / float(K) + a.xin_eps);
}

template <bool kPerm>
__device__ __forceinline__ void norm_prologue(const KArgs& a, __half* xs, int KP) {
  const int K = a.K, n4 = K / 4;
  const float4* w4 = reinterpret_cast<const float4*>(a.xin_w);
  for (int m = 0; m < a.o.M; ++m) {
    const float4* xr = reinterpret_cast<const float4*>(a.xin + size_t(m) * size_t(a.xin_ld));
    const float scale = norm_scale(a, m);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
      const float4 v = xr[i], wk = w4[i];
      const __half2 lo = __floats2half2_rn(v.x * scale * wk.x, v.y * scale * wk.y);
      const __half2 hi = __floats2half2_rn(v.z * scale * wk.z, v.w * scale * wk.w);
      put_pair<kPerm>(xs, KP, m, 4 * i, lo);
      put_pair<kPerm>(xs, KP, m, 4 * i + 2, hi);
    }
    if constexpr (kPerm) {
      for (int i = K / 2 + threadIdx.x; i < KP / 2; i += blockDim.x)
        put_pair<true>(xs, KP, m, 2 * i, __floats2half2_rn(0.0f, 0.0f));
    } else {
      __half* yr = xs + m * KP;
      for (int i = K + threadIdx.x; i < KP; i += blockDim.x) yr[i] = __float2half_rn(0.0f);
    }
    __syncthreads();  // part[] is reused by the next row; the last: xs complete
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

// Output element i of the epilogue EP from its sums (s1: up's, kSwiGLU).
template <Epilogue EP>
__device__ __forceinline__ void store_one(const KArgs& a, size_t i, float s0, float s1) {
  if (EP == Epilogue::kStoreF16) a.o.out_h[i] = __float2half_rn(s0);
  if (EP == Epilogue::kSwiGLU) a.o.out_h[i] = __float2half_rn(silu(s0) * s1);
  if (EP == Epilogue::kStoreF32) a.o.out_f[i] = s0;
  if (EP == Epilogue::kAddF32) a.o.out_f[i] += s0;
}

// kAddF32: the residual that output e = threadIdx.x of reduce_store's loop
// adds to, loaded at the kernel's start, before pdl_wait, so that its L2
// round trip is not the epilogue's. Allowed although a kernel of the pass
// wrote it (kernels/pdl.h): in the decode step its last writer is at least
// two launches back (the down GEMV before Q | K | V, qk_rope and the
// attention, for O; O before gate | up, for down), so it completed before
// this grid was launched: its predecessor launches its dependents only
// after its own wait. Read from L2 (ld.global.cg): no L1 line of an older
// value can answer. Other outputs of the thread (M > 8) load in the epilogue.
struct Resid {
  float v = 0.0f;
};
template <Epilogue EP, int MT>
__device__ __forceinline__ Resid early_resid(const KArgs& a, int tile) {
  Resid r;
  if constexpr (EP == Epilogue::kAddF32) {
    const int e = threadIdx.x, m = e / 16, n = tile * 16 + e % 16;
    if (a.resid_early && e < MT * 8 * 16 && m < a.o.M && n < a.o.N)
      asm volatile("ld.global.cg.f32 %0, [%1];\n"
                   : "=f"(r.v)
                   : "l"(a.o.out_f + size_t(m) * size_t(a.o.ldo) + size_t(n)));
  }
  return r;
}

// The warps' partial sums of tile `tile` through shared memory (red:
// [kMaxWarps][NM][MT * 8][kRedLd] floats), then the epilogue of each output
// (kAddF32: the first one's residual from early_resid).
// Called by every thread of the block.
template <Epilogue EP, int NM, int MT>
__device__ __forceinline__ void reduce_store(float (*red)[NM][MT * 8][kRedLd], const float (&acc)[NM][MT][4],
                                             const KArgs& a, int tile, Resid resid) {
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
    if (EP == Epilogue::kAddF32 && a.resid_early && e == int(threadIdx.x))
      a.o.out_f[i] = resid.v + s0;
    else
      store_one<EP>(a, i, s0, s1);
  }
}

// The integer GEMV (kernels/gemv_i8.cuh): stages 256-column group j of the
// (M = 1) input into this warp's words `st` (i8::kGroupWords: the words and
// the step sums, the warp's after a __syncwarp) and returns its scale sx. The
// input is x (the previous kernel's fp16 output) or, kNormIn, the RMSNorm of
// a.xin with 1 / rms `nscale`, rounded to fp16 as norm_prologue does.
template <class I, bool kNormIn>
__device__ __forceinline__ float stage_i8(const KArgs& a, int j, float nscale, const i8::StageLane& sl, uint32_t* st) {
  float v[8];
  // Columns i, i + 1 (adjacent) of the lane's eight; K % 32 == 0: a pair is
  // in or out, and only a last group of Q4_0's may be partial.
  auto pair = [&](int i) {
    const int col = j * i8::kGroupCols + i8::stage_col(sl, i);
    if constexpr (kNormIn) {
      const float2 x = *reinterpret_cast<const float2*>(a.xin + col);
      const float2 w = *reinterpret_cast<const float2*>(a.xin_w + col);
      return __half22float2(__floats2half2_rn(x.x * nscale * w.x, x.y * nscale * w.y));
    } else {
      uint32_t r;
      ldg32_dep(r, a.x + col);
      __half2 h;
      memcpy(&h, &r, 4);
      return __half22float2(h);
    }
  };
  if ((j + 1) * i8::kGroupCols <= a.K) {  // warp-uniform
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const float2 f = pair(i);
      v[i] = f.x, v[i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      float2 f = make_float2(0.0f, 0.0f);
      if (j * i8::kGroupCols + i8::stage_col(sl, i) < a.K) f = pair(i);
      v[i] = f.x, v[i + 1] = f.y;
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  // An approximate quotient (2 ulp; IEEE division is a ~10-instruction
  // subroutine per group): |x inv| <= kXMax (1 + 2^-22) still rounds to at
  // most kXMax, and the scale applied afterwards is sx, not 1 / inv.
  const float inv = amax > 0.0f ? __fdividef(i8::kXMax, amax) : 0.0f;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const uint32_t b[4] = {i8::qbits(v[4 * k], inv), i8::qbits(v[4 * k + 1], inv), i8::qbits(v[4 * k + 2], inv),
                           i8::qbits(v[4 * k + 3], inv)};
    uint32_t hi, lo;
    int32_t sum;
    i8::words(b, hi, lo, sum);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int s = sl.s0 + 2 * k;
    st[sl.q * i8::kChunkWords + i8::word_of(sl.t, 0, s)] = hi;
    st[sl.q * i8::kChunkWords + i8::word_of(sl.t, 1, s)] = lo;
    if (sl.t == 0) st[i8::kSumWord + 4 * sl.q + I::sum_pos(s)] = uint32_t(sum);
  }
  return amax / i8::kXMax;
}

// kSigned: s8 codes in A (I8<F>::kSignedA), else u8.
template <bool kSigned>
__device__ __forceinline__ void mma_i8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kSigned)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// GemmArgs::i8_stage: group j's staged words (i8::kStagedWords: the
// warp's words, then sx) from the stage kernel's output into this warp's
// words `st`; returns sx. Coherent loads: the previous kernel's output.
__device__ __forceinline__ float copy_staged(const KArgs& a, int j, int lane, uint32_t* st) {
  const uint32_t* src = a.i8s + size_t(j) * i8::kStagedWords;
  static_assert(i8::kGroupWords % 4 == 0 && i8::kGroupWords / 4 <= 64, "two 16-byte rounds a lane");
  for (int i = lane; i < i8::kGroupWords / 4; i += 32) {
    uint4 v;
    ldg128_dep(v.x, v.y, v.z, v.w, src + 4 * i);
    *reinterpret_cast<uint4*>(st + 4 * i) = v;
  }
  uint32_t sx;
  ldg32_dep(sx, src + i8::kGroupWords);
  return __uint_as_float(sx);
}

}  // namespace gemv

// GemmArgs::i8_stage: the integer GEMV's activations formed once, for every
// block of the GEMV that follows to copy (gemv::copy_staged), instead of by
// every block (2026-12-05 profile: ~100 instructions per lane and
// 256-column group, a quarter of Q4_0's per unit, repeated per 16-row
// tile; with the prologue norm every block also read the whole row for
// its RMS). Warp w of block b stages group 8 b + w exactly as
// gemv_i8_kernel's warps do (the same stage_i8), into a.i8s, and its sx
// after the words. Launched with PDL: it waits for the previous kernel
// before it reads x or writes the buffer (which the previous GEMV may
// still read until then).
template <WFormat F, bool kNormIn>
__global__ void __launch_bounds__(gemv::kMaxWarps * 32) stage_i8_kernel(const KArgs a) {
  using I = i8::I8<F>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  pdl_wait();
  pdl_launch_dependents();
  float nscale = 0.0f;
  if constexpr (kNormIn) nscale = gemv::norm_scale(a, 0);  // every thread of the block
  const int groups = (a.KC + 3) / 4, j = int(blockIdx.x) * gemv::kMaxWarps + warp;
  if (j >= groups) return;
  uint32_t* st = a.i8s + size_t(j) * i8::kStagedWords;
  const float sx = gemv::stage_i8<I, kNormIn>(a, j, nscale, i8::stage_lane(lane), st);
  if (lane == 0) st[i8::kGroupWords] = __float_as_uint(sx);
}

// The integer GEMV (M = 1; kernels/gemv_i8.cuh). grid = (tiles); block = 32
// * kw threads, warp w taking the 256-column groups w, w + kw, ...: it
// issues the weight loads of U chunks, stages the group's activations
// (warp-private words), then runs each chunk through the format's mmas.
// Measured slower (H100, seventeenth session): all of a warp's groups
// staged up front with the next round's weights in flight during the
// current one's compute (double-buffered raw words: 2 blocks per SM
// instead of 3; 8B decode step +7-16%). So was a ring of chunks in shared
// memory per warp, the next 2-8 chunks in flight by cp.async during the
// current one's math (commit 8345a71; H100, twenty-second session: the 8B
// decode step +12%, Q2_K +24%, 12288 x 4096 Q4_0 2069 -> 1549 GB/s): the
// copies, waits, warp barriers and the shared-memory round trip per chunk
// cost more than the latency they hid; more bytes in flight alone is not
// what this kernel lacks (bench/RESULTS.md).
// kPre: the activations come formed by stage_i8_kernel (a.i8s), the norm
// too: never with kNormIn.
//
// kWarps: the most warps a block runs. 8 (three blocks an SM, <= 80
// registers) everywhere, or 16 (two blocks an SM, <= 64 registers) for the
// matrices of few tiles and many groups (KArgs::i8_wide, i8_wide_ok).
template <WFormat F, Epilogue EP, bool kNormIn, bool kPre, int kWarps = gemv::kMaxWarps>
__global__ void __launch_bounds__(kWarps * 32, kWarps == gemv::kMaxWarps ? 3 : 2) gemv_i8_kernel(const KArgs a) {
  static_assert(!(kNormIn && kPre), "the stage kernel forms the norm");
  using T = WTraits<F>;
  using I = i8::I8<F>;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  constexpr int NM = kDual ? 2 : 1;
  constexpr int U = kDual ? 2 : 4;  // chunks whose weights are in flight at once
  __shared__ float red[kWarps][NM][8][gemv::kRedLd];
  __shared__ __align__(16) uint32_t stage[kWarps][i8::kGroupWords];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x;
  const WLoc loc = gemv::tile_loc<kDual>(a, tile);
  const typename I::Lane L = I::lane(g, t);
  const i8::StageLane sl = i8::stage_lane(lane);
  uint32_t* st = stage[warp];
  const uint32_t xw_at = smem_u32(st) + 4u * uint32_t(I::word_base(g, t));
  const uint32_t s_at = smem_u32(st) + 4u * uint32_t(i8::kSumWord + 2 * (t >> 1));  // the lane's pair
  float out[NM][2] = {};
  float nscale = 0.0f;
  bool first = true;
  const gemv::Resid resid = gemv::early_resid<EP, 1>(a, tile);
  const int groups = (a.KC + 3) / 4;
  for (int j = warp; j < groups; j += kw) {
    typename I::Acc acc[NM] = {};
    float sx = 0.0f;
#pragma unroll
    for (int q0 = 0; q0 < 4; q0 += U) {
      if (4 * j + q0 >= a.KC) break;  // warp-uniform
      typename T::Raw raw[U][NM];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = 4 * j + q0 + u;
        if (c >= a.KC) break;
#pragma unroll
        for (int w = 0; w < NM; ++w) {
          const uint8_t* base = w == 0 ? loc.base : a.w[1];
          const size_t soff = w == 0 ? size_t(loc.soff) : a.scale_off;
          T::ldg_raw(raw[u][w], base, soff, size_t(w == 0 ? loc.tile : tile) * size_t(a.KC) + size_t(c), lane);
        }
      }
      if (q0 == 0) {
        // The first weights are in flight; the activations are the previous
        // kernel's output (kernels/pdl.h). Every warp has a group (kw <=
        // groups), so all of them reach norm_scale's barrier.
        if (first) {
          pdl_wait();
          pdl_launch_dependents();
          if constexpr (kNormIn) nscale = gemv::norm_scale(a, 0);
          first = false;
        }
        __syncwarp();  // the previous group's words are read
        if constexpr (kPre)
          sx = gemv::copy_staged(a, j, lane, st);
        else
          sx = gemv::stage_i8<I, kNormIn>(a, j, nscale, sl, st);
        __syncwarp();
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int q = q0 + u;
        if (4 * j + q >= a.KC) break;
        uint32_t xw[I::kWords];
        if constexpr (I::kWords == 4)
          lds128(xw[0], xw[1], xw[2], xw[3], xw_at + 4u * uint32_t(q * i8::kChunkWords));
        else if constexpr (I::kWords == 2)
          lds64(xw[0], xw[1], xw_at + 4u * uint32_t(q * i8::kChunkWords));
        else
          lds32(xw[0], xw_at + 4u * uint32_t(q * i8::kChunkWords));
        uint32_t s2[2];
        lds64(s2[0], s2[1], s_at + 16u * uint32_t(q));
        int32_t S[2];
        I::lane_sums(s2[0], s2[1], t, S);
#pragma unroll
        for (int w = 0; w < NM; ++w) {
          uint32_t A[I::kMmas][4], B[I::kMmas][2];
          int32_t D[I::kChains][4];
          I::prep(raw[u][w], xw, S, L, A, B, D);
#pragma unroll
          for (int m = 0; m < I::kMmas; ++m) gemv::mma_i8<I::kSignedA>(D[I::chain_of(m)], A[m], B[m][0], B[m][1]);
          I::combine(raw[u][w], D, S, L, acc[w]);
        }
      }
      if (q0 + U >= 4 || 4 * j + q0 + U >= a.KC) {  // the group's last round: its d / dmin are in raw[0]
#pragma unroll
        for (int w = 0; w < NM; ++w) I::flush(raw[0][w], L, sx, acc[w], out[w]);
      }
    }
  }

  pdl_wait();
  // The quad's lanes hold parts of the same rows: their sum in lane t = 0,
  // as the fp16 kernel's token column 0 (c0: row g, c2: row g + 8).
  float accs[NM][1][4];
#pragma unroll
  for (int w = 0; w < NM; ++w) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      float v = out[w][p];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      accs[w][0][2 * p] = v;
      accs[w][0][2 * p + 1] = 0.0f;
    }
  }
  gemv::reduce_store<EP, NM, 1>(red, accs, a, tile, resid);
}

// grid = (tiles); block = 32 * kw threads, kw <= MaxW warps that split the
// K chunks round-robin (warp w: chunks w, w + kw, ...).
template <WFormat F,
          int MT,        // m8 token tiles: 1 (M <= 8) or 2 (M <= 16)
          int U,         // chunks a warp has in flight per round (loads issued before any use)
          Epilogue EP,
          bool kNormIn,  // the input is GemmArgs::norm_in_x's RMSNorm (MT == 1): gemv::norm_prologue
          bool kPerm>    // the activations staged in shared memory in the fragments' order (MT == 1;
                         // GemmArgs::gemv_stage_x): gemv::perm_word
__global__ void __launch_bounds__(gemv::kMaxWarps * 32, MT == 1 ? 3 : 2) gemv_kernel(const KArgs a) {
  using T = WTraits<F>;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  constexpr int NM = kDual ? 2 : 1;  // weight matrices
  __shared__ float red[gemv::kMaxWarps][NM][MT * 8][gemv::kRedLd];
  extern __shared__ __align__(16) __half xs[];  // kNormIn / kPerm: the staged activations

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x;
  const int N = a.o.N;

  float acc[NM][MT][4];
  gemv::zero(acc);
  const WLoc loc = gemv::tile_loc<kDual>(a, tile);
  const gemv::Resid resid = gemv::early_resid<EP, MT>(a, tile);

  for (int c0 = warp; c0 < a.KC; c0 += kw * U) {
    typename T::Raw raw[U][NM];
    uint32_t xb[U][MT][4][2];  // X row mt*8+g, k step s: cols 16s+2t, +1 and 16s+2t+8, +9
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kw;
      const bool ok = c < a.KC;
#pragma unroll
      for (int w = 0; w < NM; ++w) {
        if constexpr (T::kRowMajor) {
          const __half* wb = reinterpret_cast<const __half*>(a.w[w]);
          const int n = tile * 16 + g;
          const __half* rg = ok && n < N ? wb + size_t(n) * size_t(a.K) + c * 64 : nullptr;
          const __half* rg8 = ok && n + 8 < N ? wb + size_t(n + 8) * size_t(a.K) + c * 64 : nullptr;
          T::ldg_rows(raw[u][w], rg, rg8, t, c * 64 + 32 < a.K);
        } else if (ok) {
          const uint8_t* base = w == 0 ? loc.base : a.w[1];
          const size_t soff = w == 0 ? size_t(loc.soff) : a.scale_off;
          T::ldg_raw(raw[u][w], base, soff, size_t(w == 0 ? loc.tile : tile) * size_t(a.KC) + size_t(c), lane);
        }
      }
    }
    // The first round's weight loads are in flight; the activations are the
    // previous kernel's output (kernels/pdl.h).
    // Every warp has a first round (kw <= KC), so the prologue's barriers
    // are reached by all of them.
    if (c0 == warp) {
      pdl_wait();
      pdl_launch_dependents();
      if constexpr (kNormIn)
        gemv::norm_prologue<kPerm>(a, xs, a.KC * 64);
      else if constexpr (kPerm)
        gemv::stage_x(a, xs, a.KC * 64);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kw;
      if constexpr (kPerm)
        gemv::load_x_perm<MT>(xb[u], xs, a.KC, a.o.M, c, g, t);
      else if constexpr (kNormIn)
        gemv::load_x<MT, true>(xb[u], xs, size_t(a.KC) * 64, a.o.M, a.K, c, c < a.KC, g, t);
      else
        gemv::load_x<MT, false>(xb[u], a.x, size_t(a.ldx), a.o.M, a.K, c, c < a.KC, g, t);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + u * kw >= a.KC) break;  // warp-uniform
      gemv::chunk_mma<T, NM, MT>(acc, raw[u], xb[u]);
    }
  }

  pdl_wait();  // a warp with no chunk (kw <= KC / U: none today) still waits before the epilogue
  gemv::reduce_store<EP, NM, MT>(red, acc, a, tile, resid);
}

// Registers counted per chunk of each of the two matrices of the SwiGLU
// GEMV: WTraits::kGemvDualRawRegs where a format declares it (its decode's
// temporaries spill there otherwise), else kGemvRawRegs.
template <class T, class = void>
struct DualRawRegs {
  static constexpr int value = T::kGemvRawRegs;
};
template <class T>
struct DualRawRegs<T, std::void_t<decltype(T::kGemvDualRawRegs)>> {
  static constexpr int value = T::kGemvDualRawRegs;
};

// Chunks a GEMV warp keeps in flight: as many as fit ~56 registers of
// undecoded weights + activations (Q4_0, M <= 8: 4 chunks = 2 KB per warp).
template <WFormat F>
constexpr int gemv_unroll(int mt, bool dual) {
  const int per = dual ? 2 * DualRawRegs<WTraits<F>>::value + mt * 8 : WTraits<F>::kGemvRawRegs + mt * 8;
  return 56 / per < 1 ? 1 : 56 / per > 4 ? 4 : 56 / per;
}

template <WFormat F, int MT, Epilogue EP, bool kNormIn = false, bool kPerm = false>
cudaError_t launch_mt(const KArgs& a, cudaStream_t stream) {
  constexpr int U = gemv_unroll<F>(MT, EP == Epilogue::kSwiGLU);
  // Enough warps to cover K with U chunks each, at most kMaxWarps; the
  // registers allow 3 blocks of 8 warps per SM (85 registers) for M <= 8,
  // 2 for M <= 16 (the kernel's __launch_bounds__).
  const int kw = std::max(1, std::min(gemv::kMaxWarps, a.KC / U));
  const size_t smem = kPerm     ? size_t(a.o.M) * size_t(gemv::perm_row(a.KC))
                      : kNormIn ? size_t(a.o.M) * size_t(a.KC) * 64 * sizeof(__half)
                                : 0;
  // The weights it streams decide its PDL family (kernels/pdl.h).
  const size_t bytes = dweight_bytes(F, int64_t(a.tiles) * 16, a.K) * (EP == Epilogue::kSwiGLU ? 2 : 1);
  const PdlKernel family = bytes <= kPdlGemvSmallBytes ? PdlKernel::kGemv : PdlKernel::kGemvLarge;
  return launch_pdl(family, gemv_kernel<F, MT, U, EP, kNormIn, kPerm>, dim3(unsigned(a.tiles)),
                    dim3(unsigned(kw * 32)), smem, stream, a);
}

// The formats whose integer GEMV fits 64 registers without the norm
// prologue and the second matrix, so a block of 16 warps runs two to an SM
// (gemv_i8_kernel's kWarps): all of them (ptxas: Q2_K / Q3_K 56, Q4_0 61,
// the rest 63-64, no spills).
template <WFormat F>
constexpr bool kI8Wide = i8::HasI8<F>::value;

// KArgs::i8_wide (GemvI8Wide): blocks of up to 16 warps for the matrices
// of few tiles and many groups (the 8B's O and down projections: 256 tiles
// on 132 SMs, 16 / 48 groups), so twice the warps have weights in flight
// without a cluster (QSP_GEMV_I8_SPLIT, removed) or a second tile a block
// (fewer blocks: the parked two-tile GEMV). 1: where the tiles are fewer
// than two blocks an SM; 2: wherever the kernel may run.
bool i8_wide_ok(const KArgs& a, int groups) {
  if (!a.i8_wide || a.i8s || groups <= gemv::kMaxWarps) return false;
  if (a.i8_wide == 2) return true;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.tiles < 2 * sm_count(dev);
}

template <WFormat F, Epilogue EP, bool kNormIn>
cudaError_t launch_i8(const KArgs& a, cudaStream_t stream) {
  const int groups = (a.KC + 3) / 4;
  const int kw = std::max(1, std::min(gemv::kMaxWarps, groups));
  const size_t bytes = dweight_bytes(F, int64_t(a.tiles) * 16, a.K) * (EP == Epilogue::kSwiGLU ? 2 : 1);
  const PdlKernel family = bytes <= kPdlGemvSmallBytes ? PdlKernel::kGemv : PdlKernel::kGemvLarge;
  if constexpr (kI8Wide<F> && !kNormIn && EP != Epilogue::kSwiGLU) {
    if (i8_wide_ok(a, groups)) {
      constexpr int kWide = 2 * gemv::kMaxWarps;
      return launch_pdl(family, gemv_i8_kernel<F, EP, false, false, kWide>, dim3(unsigned(a.tiles)),
                        dim3(unsigned(std::min(kWide, groups) * 32)), 0, stream, a);
    }
  }
  if (a.i8s) {
    const int blocks = (groups + gemv::kMaxWarps - 1) / gemv::kMaxWarps;
    // The staging is an RMSNorm-sized kernel: its PDL family (kernels/pdl.h).
    cudaError_t e = launch_pdl(PdlKernel::kRmsnorm, stage_i8_kernel<F, kNormIn>, dim3(unsigned(blocks)),
                               dim3(unsigned(gemv::kMaxWarps * 32)), 0, stream, a);
    if (e != cudaSuccess) return e;
    return launch_pdl(family, gemv_i8_kernel<F, EP, false, true>, dim3(unsigned(a.tiles)), dim3(unsigned(kw * 32)),
                      0, stream, a);
  }
  return launch_pdl(family, gemv_i8_kernel<F, EP, kNormIn, false>, dim3(unsigned(a.tiles)), dim3(unsigned(kw * 32)),
                    0, stream, a);
}

}  // namespace

bool gemv_i8_runs(WFormat f) {
  return dispatch_format(f, false, [](auto fmt) { return i8::HasI8<decltype(fmt)::kFormat>::value; });
}

cudaError_t launch_gemv(const KArgs& a, WFormat f, Epilogue ep, cudaStream_t stream) {
  return dispatch_format(f, cudaErrorInvalidValue, [&](auto fmt) {
    constexpr WFormat F = decltype(fmt)::kFormat;
    return dispatch_epilogue(ep, [&](auto e) {
      constexpr Epilogue EP = decltype(e)::value;
      if constexpr (i8::HasI8<F>::value) {
        if (a.i8) {
          if (a.o.M != 1) return cudaErrorInvalidValue;
          if constexpr (EP == Epilogue::kStoreF32 || EP == Epilogue::kSwiGLU)
            if (a.xin) return launch_i8<F, EP, true>(a, stream);
          if (a.xin) return cudaErrorInvalidValue;
          return launch_i8<F, EP, false>(a, stream);
        }
      }
      if (a.i8) return cudaErrorInvalidValue;
      // The input's RMSNorm in the prologue: the decode step's epilogues
      // only (Q | K | V to fp32, gate | up to SwiGLU); gemm() checked M <= 8.
      // The staged activations where gemm() asked for them (M x K fits).
      if constexpr (EP == Epilogue::kStoreF32 || EP == Epilogue::kSwiGLU)
        if (a.xin) return a.stage_x ? launch_mt<F, 1, EP, true, true>(a, stream) : launch_mt<F, 1, EP, true>(a, stream);
      if (a.xin) return cudaErrorInvalidValue;
      if (a.stage_x) return launch_mt<F, 1, EP, false, true>(a, stream);
      return a.o.M <= 8 ? launch_mt<F, 1, EP>(a, stream) : launch_mt<F, 2, EP>(a, stream);
    });
  });
}

}  // namespace kern
}  // namespace qsp
