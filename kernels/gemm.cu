// Quantized GEMM / GEMV with fused epilogues: Y = X W^T, X fp16 [M][K],
// W [N][K] in the tiled layout of kernels/qweight.cuh (Q4_0, Q8_0 or fp16),
// fp32 accumulation on tensor cores (mma.sync.m16n8k16, sm_80+).
//
// Four kernels, picked by gemm() from M, N, K, the format and the device:
//  1. gemv_kernel (M <= 16): decode / LM head. Memory bound: every weight
//     byte is read once with 16-byte streaming loads. Weights are the mma A
//     operand (16 weight rows per tile), the tokens the 8-wide B operand, so
//     M = 1 wastes 7/8 of a tiny tensor-core op instead of 15/16. One block
//     per 16-row tile; its warps split K and reduce through shared memory.
//  2. wgmma::run (kernels/gemm_wgmma.cu; sm_90a, Q4_0 / Q8_0): the Hopper
//     prefill path, ~650 TFLOPS at M = 2048 on the H200.
//  3. gemm_mma_kernel<CfgLarge> (sm_80 / sm_89 prefill, fp16 weights):
//     128 x 256 block tile, BK = 64, 8 warps of 64 x 64, 3-4 stage cp.async
//     pipeline, activations through ldmatrix, weights dequantized in
//     registers straight into B fragments (~330 TFLOPS on the H200).
//  4. gemm_mma_kernel<CfgMedium> (too few large tiles, e.g. M = 17..512):
//     64 x 128 tiles, 4 warps, several blocks per SM; on sm_90 the K range is
//     split over a thread-block cluster (up to 8) and reduced through
//     distributed shared memory, so no workspace is needed.
// plan_mma / plan_wgmma estimate each in one unit of SM time; measured
// figures are in bench/RESULTS.md.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "common/quant.h"
#include "kernels/kernels.h"
#include "kernels/ptx.cuh"
#include "kernels/gemm_epilogue.cuh"
#include "kernels/gemm_wgmma.h"
#include "kernels/per_device.h"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {
namespace {

// ---- PTX wrappers ---------------------------------------------------------------

// 16-byte global -> shared copy; zero-fills when !pred (src is not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void lds128(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d, uint32_t addr) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
__device__ __forceinline__ void lds32(uint32_t& a, uint32_t addr) {
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(a) : "r"(addr));
}
__device__ __forceinline__ void lds64(uint32_t& a, uint32_t& b, uint32_t addr) {
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(a), "=r"(b) : "r"(addr));
}

// Streaming weight loads: read once, keep them out of L1 (X lives there).
__device__ __forceinline__ void ldg128_stream(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d, const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
               : "l"(p));
}
__device__ __forceinline__ void ldg32_stream(uint32_t& a, const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(a) : "l"(p));
}
__device__ __forceinline__ void ldg64_stream(uint32_t& a, uint32_t& b, const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(a), "=r"(b) : "l"(p));
}
// Activation loads: re-read by every block, cached.
__device__ __forceinline__ void ldg32(uint32_t& a, const void* p) {
  asm volatile("ld.global.nc.u32 %0, [%1];\n" : "=r"(a) : "l"(p));
}

// Swizzled 16-byte column slot of a 128-byte smem row (64 fp16 of one chunk):
// ldmatrix reads one slot of 8 consecutive rows, which then hit 8 distinct
// bank groups.
__device__ __forceinline__ int swz(int row, int slot) { return slot ^ (row & 7); }

// ---- Weight format traits -----------------------------------------------------------
// Each format provides:
//   kTileStageBytes  smem bytes one 16-row tile takes in one BK = 64 stage
//   kStages          pipeline depth of the mma kernel (smem budget)
//   Raw              a lane's undecoded words for one tile and one chunk
//   lds_raw()        smem -> Raw for half-stage hs (k steps 2hs, 2hs+1)
//   ldg_raw()        global -> Raw for the GEMV
//   frags()          Raw, k step s -> four decoded f16x2 (see qweight.cuh)
//   issue_stage()    the cp.async of one tile's stage data
template <WFormat F>
struct WTraits;

template <>
struct WTraits<WFormat::kQ4_0> {
  static constexpr int kUnit = qw::kQ4UnitBytes;
  static constexpr int kTileStageBytes = kUnit + qw::kScaleUnitBytes;
  static constexpr int kStages = 4;
  struct Raw {
    uint32_t q[4];  // lane word per k step
    uint32_t s[2];  // scales of blocks 2c, 2c+1 (lo = row g, hi = row g+8)
  };
  // Stage smem: [tiles][kUnit] quants, then [tiles][64] scales.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    if (hs != 0) return;  // one conflict-free LDS.128 holds all four k steps
    lds128(r.q[0], r.q[1], r.q[2], r.q[3], sb + v * kUnit + lane * 16);
    lds64(r.s[0], r.s[1], sb + tiles * kUnit + v * qw::kScaleUnitBytes + (lane >> 2) * 8);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0], r.q[1], r.q[2], r.q[3], w + unit * kUnit + lane * 16);
    ldg64_stream(r.s[0], r.s[1], w + soff + unit * qw::kScaleUnitBytes + (lane >> 2) * 8);
  }
  __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) { qw::dq_q4(r.q[s], r.s[s >> 1], f); }
};

template <>
struct WTraits<WFormat::kQ8_0> {
  static constexpr int kUnit = qw::kQ8UnitBytes;
  static constexpr int kTileStageBytes = kUnit + qw::kScaleUnitBytes;
  static constexpr int kStages = 4;
  struct Raw {
    uint32_t q[2][4];  // [half-stage][rows g: steps 2hs, 2hs+1; rows g+8: same]
    uint32_t s[2];
  };
  // Loaded per half-stage (20 registers for 4 tiles instead of 40): the unit
  // keeps each half-stage's 16 bytes per lane contiguous, so still LDS.128.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int tiles, int v, int lane, int hs) {
    lds128(r.q[hs][0], r.q[hs][1], r.q[hs][2], r.q[hs][3], sb + v * kUnit + hs * 512 + lane * 16);
    lds32(r.s[hs], sb + tiles * kUnit + v * qw::kScaleUnitBytes + (lane >> 2) * 8 + 4 * hs);
  }
  __device__ static void ldg_raw(Raw& r, const uint8_t* w, size_t soff, size_t unit, int lane) {
    ldg128_stream(r.q[0][0], r.q[0][1], r.q[0][2], r.q[0][3], w + unit * kUnit + lane * 16);
    ldg128_stream(r.q[1][0], r.q[1][1], r.q[1][2], r.q[1][3], w + unit * kUnit + 512 + lane * 16);
    ldg64_stream(r.s[0], r.s[1], w + soff + unit * qw::kScaleUnitBytes + (lane >> 2) * 8);
  }
  __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) {
    qw::dq_q8(r.q[s >> 1][s & 1], r.q[s >> 1][2 + (s & 1)], r.s[s >> 1], f);
  }
};

template <>
struct WTraits<WFormat::kF16> {
  static constexpr int kTileStageBytes = qw::kTileRows * 128;  // 16 rows x 64 fp16, swizzled like A
  static constexpr int kStages = 3;                           // 48 KB per stage in the large config
  struct Raw {
    uint32_t w[4][4];  // [k step][f0..f3] (see qweight.cuh's fragment order)
  };
  // ldmatrix.x4 per k step: matrix i = rows 8 (i >> 1).. of the tile, k half i & 1.
  __device__ static void lds_raw(Raw& r, uint32_t sb, int, int v, int lane, int hs) {
    const int mi = lane >> 3;
    const int row = v * 16 + (lane & 7) + 8 * (mi >> 1);
#pragma unroll
    for (int ss = 0; ss < 2; ++ss) {
      const int s = 2 * hs + ss;
      ldmatrix_x4(r.w[s], sb + row * 128 + swz(row, 2 * s + (mi & 1)) * 16);
    }
  }
  // rows: the two row pointers (already offset to the chunk), null = zero;
  // hi_ok: k steps 2, 3 exist (K may end half way through the chunk).
  __device__ static void ldg_rows(Raw& r, const __half* row_g, const __half* row_g8, int t, bool hi_ok) {
    const __half* rows[2] = {row_g, row_g8};
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t& d = r.w[s][2 * p + h];
          if (rows[p] && (s < 2 || hi_ok)) {
            ldg32_stream(d, rows[p] + 16 * s + 2 * t + 8 * h);
          } else {
            d = 0u;
          }
        }
  }
  __device__ static void frags(const Raw& r, int s, uint32_t (&f)[4]) {
    f[0] = r.w[s][0];
    f[1] = r.w[s][1];
    f[2] = r.w[s][2];
    f[3] = r.w[s][3];
  }
};

// ---- Kernel arguments ---------------------------------------------------------------------
struct KArgs {
  const __half* x;
  int32_t ldx;
  int32_t K;
  int32_t KC;                // 64-column chunks: ceil(K / 64)
  int32_t tiles;             // 16-row tiles of W: ceil(N / 16)
  const uint8_t* w[2];       // W (or gate, up for kSwiGLU)
  size_t scale_off;          // Q formats: byte offset of the scale array (of w[0] / w[1])
  uint32_t scale_off32;      // the same (weights are < 4 GiB)
  WGroup grp;                // non-kSwiGLU: the row groups of W (w[0] alone, or Q | K | V)
  int32_t chunks_per_split;  // mma kernel: K chunks per cluster rank
  OutArgs o;
};

// ---- The tensor-core GEMM ------------------------------------------------------------------
template <int BM_,      // block rows (tokens)
          int BN_,      // block "virtual" columns: weight rows it computes (gate + up rows for kSwiGLU)
          int WM_,      // warps along M
          int WN_,      // warps along N
          int MINB_,    // __launch_bounds__ min blocks per SM (register budget)
          bool SPLIT_>  // may split K over a cluster (needs a BM x (BN + 8) fp32 smem tile)
struct TileCfg {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, kMinBlocks = MINB_;
  static constexpr bool kSplit = SPLIT_;
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int WTM = BM / WM, WTN = BN / WN;  // warp tile
  static constexpr int MI = WTM / 16;                 // m16 tiles per warp
  static constexpr int NJ = WTN / 16;                 // 16-row weight tiles per warp (2 n8 each)
  static constexpr int kVT = BN / 16;                 // weight tiles per block
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile is a multiple of the mma shape");
  static_assert(NJ % 2 == 0, "kSwiGLU splits a warp's tiles into gate / up halves");
  static_assert((kThreads / 8) % 2 == 0, "loader row step keeps the swizzle parity");
  static_assert((BM * 8) % kThreads == 0, "A stage is an exact number of 16-byte pieces per thread");
};
// 8 warps of 64 x 64: 128 fp32 accumulators per thread, 1 block per SM.
using CfgLarge = TileCfg<128, 256, 2, 4, 1, false>;
// 4 warps of 32 x 64, 3 blocks per SM (<= 170 registers; at 128 it spills).
using CfgMedium = TileCfg<64, 128, 2, 2, 3, true>;

template <WFormat F, class C>
constexpr int mma_stage_bytes() {
  return C::BM * 128 + C::kVT * WTraits<F>::kTileStageBytes;
}
template <WFormat F, class C>
constexpr int mma_smem_bytes() {
  constexpr int pipe = WTraits<F>::kStages * mma_stage_bytes<F, C>();
  constexpr int red = C::kSplit ? C::BM * (C::BN + 8) * 4 : 0;
  return pipe > red ? pipe : red;
}

// grid = (ceil(N / real block columns), ceil(M / BM), K splits); block = C::kThreads.
template <WFormat F, class C, Epilogue EP>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) gemm_mma_kernel(const KArgs a) {
  using T = WTraits<F>;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  constexpr int kS = T::kStages;
  constexpr int kVT = C::kVT, NJ = C::NJ, MI = C::MI;
  constexpr int kAStage = C::BM * 128;
  constexpr int kStage = mma_stage_bytes<F, C>();
  constexpr int kThreads = C::kThreads;
  static_assert(kS >= 2, "pipeline needs two stages");

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t s0 = smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::WN, wn = warp % C::WN;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * C::BM;
  const int M = a.o.M;
  const int tile0 = blockIdx.x * (kDual ? kVT / 2 : kVT);  // first real weight tile of the block

  // Virtual tile v of the block -> weight matrix and real tile. For kSwiGLU a
  // warp's NJ tiles are NJ/2 gate tiles followed by the same NJ/2 up tiles,
  // so each thread ends up holding gate and up accumulators of one column.
  auto vt_mat = [&](int v) { return kDual ? (v % NJ) / (NJ / 2) : 0; };
  auto vt_real = [&](int v) { return kDual ? tile0 + (v / NJ) * (NJ / 2) + (v % NJ) % (NJ / 2) : tile0 + v; };
  // A select, not a.w[i]: a runtime index into a kernel parameter array
  // makes the compiler copy the parameters to local memory.
  auto wsel = [&](int mat) { return mat ? a.w[1] : a.w[0]; };

  const int c_begin = blockIdx.z * a.chunks_per_split;
  const int nk = max(0, min(a.KC, c_begin + a.chunks_per_split) - c_begin);

  // Issues the cp.async of chunk `c` into pipeline slot `slot`. Offsets are
  // 32-bit (gemm() checks M * ldx < 2^31 and weights < 4 GiB): the hot loop
  // then keeps no 64-bit pointers per piece alive.
  auto load_stage = [&](int slot, int c) {
    const uint32_t st = s0 + slot * kStage;
    // A: BM rows x 8 pieces; piece (row, slot) = thread tid + i * kThreads.
    {
      constexpr int kPer = C::BM * 8 / kThreads, kRowStep = kThreads / 8;
      const int r0 = tid / 8, sl = tid % 8;
      const bool k_ok = c * 64 + sl * 8 < a.K;
      const uint32_t off0 = uint32_t(m0 + r0) * uint32_t(a.ldx) + uint32_t(c * 64 + sl * 8);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int row = r0 + i * kRowStep;
        const bool ok = k_ok && m0 + row < M;
        const uint32_t off = off0 + uint32_t(i * kRowStep) * uint32_t(a.ldx);
        cp_async16(st + row * 128 + swz(row, sl) * 16, a.x + (ok ? off : 0u), ok);
      }
    }
    const uint32_t sb = st + kAStage;
    if constexpr (F == WFormat::kF16) {
      // BN rows x 8 pieces.
      constexpr int kPer = C::BN * 8 / kThreads, kRowStep = kThreads / 8;
      static_assert((C::BN * 8) % kThreads == 0, "B stage pieces per thread");
      const int r0 = tid / 8, sl = tid % 8;
      const bool k_ok = c * 64 + sl * 8 < a.K;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int row = r0 + i * kRowStep;
        const int v = row / 16;
        const int n = vt_real(v) * 16 + row % 16;
        const bool ok = k_ok && n < a.o.N;
        const uint32_t off = uint32_t(n) * uint32_t(a.K) + uint32_t(c * 64 + sl * 8);
        const __half* w = reinterpret_cast<const __half*>(wsel(vt_mat(v)));
        cp_async16(sb + row * 128 + swz(row, sl) * 16, w + (ok ? off : 0u), ok);
      }
    } else {
      constexpr int kPieces = T::kUnit / 16;  // per tile
      constexpr int kTotal = kVT * kPieces;
      constexpr int kPer = (kTotal + kThreads - 1) / kThreads;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int p = tid + i * kThreads;
        if (kTotal % kThreads == 0 || p < kTotal) {
          const int v = p / kPieces, lp = p % kPieces;
          const int rt = vt_real(v);
          const bool ok = rt < a.tiles;
          const WLoc L = kDual ? WLoc{wsel(vt_mat(v)), a.scale_off32, rt} : locate(a.grp, rt);
          const uint32_t off = (uint32_t(L.tile) * uint32_t(a.KC) + uint32_t(c)) * T::kUnit + lp * 16;
          cp_async16(sb + v * T::kUnit + lp * 16, L.base + (ok ? off : 0u), ok);
        }
      }
      constexpr int kSPieces = kVT * (qw::kScaleUnitBytes / 16);
      static_assert(kSPieces <= kThreads, "one scale piece per thread at most");
      if (tid < kSPieces) {
        const int v = tid / 4, lp = tid % 4;
        const int rt = vt_real(v);
        const bool ok = rt < a.tiles;
        const WLoc L = kDual ? WLoc{wsel(vt_mat(v)), a.scale_off32, rt} : locate(a.grp, rt);
        const uint32_t off = L.soff + (uint32_t(L.tile) * uint32_t(a.KC) + uint32_t(c)) * qw::kScaleUnitBytes + lp * 16;
        cp_async16(sb + kVT * T::kUnit + v * qw::kScaleUnitBytes + lp * 16, L.base + (ok ? off : 0u), ok);
      }
    }
  };

  float acc[MI][2 * NJ][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < 2 * NJ; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

#pragma unroll
  for (int st = 0; st < kS - 1; ++st) {
    if (st < nk) load_stage(st, c_begin + st);
    cp_async_commit();
  }

  for (int kt = 0; kt < nk; ++kt) {
    cp_async_wait<kS - 2>();
    __syncthreads();  // stage kt landed for all threads; slot (kt - 1) % kS is free
    {
      const int nx = kt + kS - 1;
      if (nx < nk) load_stage(nx % kS, c_begin + nx);
      cp_async_commit();
    }
    const uint32_t st = s0 + (kt % kS) * kStage;
    const uint32_t sb = st + kAStage;

    typename T::Raw raw[NJ];
#pragma unroll
    for (int hs = 0; hs < 2; ++hs) {
      // A fragments of k steps 2hs, 2hs+1 (ldmatrix.x4: lane l addresses
      // row l % 16 of the m16 tile at k half l / 16).
      uint32_t af[MI][2][4];
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int ss = 0; ss < 2; ++ss) {
          const int row = wm * C::WTM + i * 16 + (lane & 15);
          ldmatrix_x4(af[i][ss], st + row * 128 + swz(row, 2 * (2 * hs + ss) + (lane >> 4)) * 16);
        }
      // One weight tile at a time. Q4_0 fills raw[] once per stage (hs 0: one
      // LDS.128 = four k steps); Q8_0 and fp16 load per half-stage (their raw
      // words for a whole stage would not fit next to 128 accumulators).
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        T::lds_raw(raw[j], sb, kVT, wn * NJ + j, lane, hs);
#pragma unroll
        for (int ss = 0; ss < 2; ++ss) {
          uint32_t f[4];
          T::frags(raw[j], 2 * hs + ss, f);
#pragma unroll
          for (int i = 0; i < MI; ++i) {
            mma_m16n8k16(acc[i][2 * j], af[i][ss], f[0], f[1]);
            mma_m16n8k16(acc[i][2 * j + 1], af[i][ss], f[2], f[3]);
          }
        }
      }
    }
  }

  if constexpr (C::kSplit) {
    if (gridDim.z > 1) {
      // Launched with a (1, 1, gridDim.z) cluster only where the binary has
      // sm_90 code (see launch_mma). Reduce-scatter: every rank sums BM /
      // ranks rows of all ranks' partial tiles and stores them.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      constexpr int kLd = C::BN + 8;  // float2 writes of a half warp hit 32 distinct banks
      cp_async_wait<0>();
      __syncthreads();  // the pipeline smem becomes the partial tile
      float* red = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < 2 * NJ; ++j)
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            const int row = wm * C::WTM + i * 16 + 8 * p + g;
            const int col = wn * C::WTN + j * 8 + 2 * t;
            *reinterpret_cast<float2*>(red + row * kLd + col) = make_float2(acc[i][j][2 * p], acc[i][j][2 * p + 1]);
          }
      cluster.sync();
      const int ranks = gridDim.z, rank = blockIdx.z;
      const int rows = C::BM / ranks;
      constexpr int kRealCols = kDual ? C::BN / 2 : C::BN;
      constexpr int kQuads = kRealCols / 4;
      for (int e = tid; e < rows * kQuads; e += kThreads) {
        const int lr = rank * rows + e / kQuads, nq = (e % kQuads) * 4;
        const int m = m0 + lr;
        if (m >= M) continue;
        // Real column nq -> virtual columns of gate (and up).
        const int vg = kDual ? (nq / (C::WTN / 2)) * C::WTN + nq % (C::WTN / 2) : nq;
        float4 sg = make_float4(0.f, 0.f, 0.f, 0.f), su = sg;
        for (int r = 0; r < ranks; ++r) {
          const float* peer = cluster.map_shared_rank(red, r);
          const float4 x = *reinterpret_cast<const float4*>(peer + lr * kLd + vg);
          sg.x += x.x, sg.y += x.y, sg.z += x.z, sg.w += x.w;
          if (kDual) {
            const float4 y = *reinterpret_cast<const float4*>(peer + lr * kLd + vg + C::WTN / 2);
            su.x += y.x, su.y += y.y, su.z += y.z, su.w += y.w;
          }
        }
        if (kDual) {
          sg.x = silu(sg.x) * su.x, sg.y = silu(sg.y) * su.y, sg.z = silu(sg.z) * su.z, sg.w = silu(sg.w) * su.w;
        }
        const int n = tile0 * 16 + nq;
        store2<EP>(a.o, m, n, sg.x, sg.y);
        store2<EP>(a.o, m, n + 2, sg.z, sg.w);
      }
      cluster.sync();  // peers' smem stays alive until everyone has read it
#endif
      return;
    }
  }

#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int m = m0 + wm * C::WTM + i * 16 + 8 * p + g;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < (kDual ? NJ / 2 : NJ); ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int n = vt_real(wn * NJ + j) * 16 + 8 * h + 2 * t;
          float v0 = acc[i][2 * j + h][2 * p], v1 = acc[i][2 * j + h][2 * p + 1];
          if (kDual) {
            v0 = silu(v0) * acc[i][2 * (j + NJ / 2) + h][2 * p];
            v1 = silu(v1) * acc[i][2 * (j + NJ / 2) + h][2 * p + 1];
          }
          store2<EP>(a.o, m, n, v0, v1);
        }
    }
}

// ---- The GEMV (M <= 16) ------------------------------------------------------------------
constexpr int kGemvMaxWarps = 8;

// grid = (tiles); block = 32 * kw threads, kw <= kGemvMaxWarps warps that
// split the K chunks round-robin (warp w: chunks w, w + kw, ...).
template <WFormat F,
          int MT,  // m8 token tiles: 1 (M <= 8) or 2 (M <= 16)
          int U,   // chunks a warp has in flight per round (loads issued before any use)
          Epilogue EP>
__global__ void __launch_bounds__(kGemvMaxWarps * 32, MT == 1 ? 3 : 2) gemv_kernel(const KArgs a) {
  using T = WTraits<F>;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  constexpr int NM = kDual ? 2 : 1;  // weight matrices
  constexpr int kLd = 20;            // smem row stride: the partial writes of a warp hit 32 banks
  __shared__ float red[kGemvMaxWarps][NM][MT * 8][kLd];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x;
  const int M = a.o.M, N = a.o.N;

  float acc[NM][MT][4];
#pragma unroll
  for (int w = 0; w < NM; ++w)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[w][mt][r] = 0.0f;
  // The tile's matrix (a group member unless kSwiGLU) and unit 0.
  const WLoc loc = kDual ? WLoc{a.w[0], uint32_t(a.scale_off), tile} : locate(a.grp, tile);

  for (int c0 = warp; c0 < a.KC; c0 += kw * U) {
    typename T::Raw raw[U][NM];
    uint32_t xb[U][MT][4][2];  // X row mt*8+g, k step s: cols 16s+2t, +1 and 16s+2t+8, +9
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kw;
      const bool ok = c < a.KC;
#pragma unroll
      for (int w = 0; w < NM; ++w) {
        if constexpr (F == WFormat::kF16) {
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
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int m = mt * 8 + g;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          uint32_t* r = xb[u][mt][s];
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
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + u * kw >= a.KC) break;  // warp-uniform
#pragma unroll
      for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int w = 0; w < NM; ++w) {
          uint32_t f[4];
          T::frags(raw[u][w], s, f);
          const uint32_t A[4] = {f[0], f[2], f[1], f[3]};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) mma_m16n8k16(acc[w][mt], A, xb[u][mt][s][0], xb[u][mt][s][1]);
        }
      }
    }
  }

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

// ---- Launchers ----------------------------------------------------------------------------

int sm_count(int dev) {
  static PerDevice cache;
  return cache.get(dev, [dev] {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) return 1;
    return n;
  });
}

template <class Kernel>
cudaError_t set_smem_once(PerDevice& once, int dev, Kernel k, int bytes) {
  const int r = once.get(dev, [&] {
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess ? 1 : -1;
  });
  return r == 1 ? cudaSuccess : cudaErrorInvalidValue;
}

// Whether this kernel's loaded binary can run the cluster split-K (sm_90 code).
template <class Kernel>
bool cluster_capable(PerDevice& once, int dev, Kernel k) {
  return once.get(dev, [&] {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, k) != cudaSuccess) return 0;
    return major >= 9 && fa.binaryVersion >= 90 ? 1 : 0;
  }) == 1;
}

template <WFormat F, class C, Epilogue EP>
cudaError_t launch_mma(KArgs a, int dev, int ks, int real_cols, cudaStream_t stream) {
  auto kernel = gemm_mma_kernel<F, C, EP>;
  constexpr int kSmem = mma_smem_bytes<F, C>();
  static PerDevice smem_once, cluster_once;
  cudaError_t e = set_smem_once(smem_once, dev, kernel, kSmem);
  if (e != cudaSuccess) return e;
  if (ks > 1 && !(C::kSplit && cluster_capable(cluster_once, dev, kernel))) ks = 1;
  a.chunks_per_split = (a.KC + ks - 1) / ks;
  const dim3 grid((a.o.N + real_cols - 1) / real_cols, (a.o.M + C::BM - 1) / C::BM, ks);
  if (ks == 1) {
    kernel<<<grid, C::kThreads, kSmem, stream>>>(a);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(C::kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = unsigned(ks);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, kernel, a);
  if (e == cudaSuccess) return cudaGetLastError();
  // A cluster that cannot be scheduled is a launch-configuration error (not
  // sticky): run unsplit instead of failing the whole forward pass.
  (void)cudaGetLastError();
  a.chunks_per_split = a.KC;
  kernel<<<dim3(grid.x, grid.y, 1), C::kThreads, kSmem, stream>>>(a);
  return cudaGetLastError();
}

// Chunks a GEMV warp keeps in flight: as many as fit ~56 registers of
// undecoded weights + activations (Q4_0, M <= 8: 4 chunks = 2 KB per warp).
constexpr int gemv_unroll(WFormat f, int mt, bool dual) {
  const int raw = f == WFormat::kQ4_0 ? 6 : f == WFormat::kQ8_0 ? 10 : 16;
  const int per = (dual ? 2 : 1) * raw + mt * 8;
  return 56 / per < 1 ? 1 : 56 / per > 4 ? 4 : 56 / per;
}

template <WFormat F, int MT, Epilogue EP>
cudaError_t launch_gemv(const KArgs& a, cudaStream_t stream) {
  constexpr int U = gemv_unroll(F, MT, EP == Epilogue::kSwiGLU);
  // Enough warps to cover K with U chunks each, at most kGemvMaxWarps.
  const int kw = std::max(1, std::min(kGemvMaxWarps, a.KC / U));
  gemv_kernel<F, MT, U, EP><<<a.tiles, kw * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

// Which tensor-core config and how many K splits: a wave model in units of
// SM time. The large tile runs one block per SM at rate 1; medium blocks
// (4 warps, up to 3 resident) need two co-resident blocks to saturate an SM
// and reach ~0.8 of the large tile's rate; each block pays ~3 chunks of
// pipeline fill, a split block ~2 more for the cluster reduction. Checked
// with plan_wgmma below against bench_gemm on the H200: the model picks the
// faster forced path on all 64 shape / M points (bench/RESULTS.md); other
// GPUs have not been measured.
struct Plan {
  bool large;
  int ks;
  double t;  // estimated time, in units of one large-tile chunk (128 x 256 x 64) on one SM
};
Plan plan_mma(int64_t M, int64_t real_n, int KC, bool dual, int sms) {
  const double chunk_l = 128.0 * 256 * 64, chunk_m = 64.0 * 128 * 64;  // elements per chunk
  const int64_t bl = ((M + 127) / 128) * ((real_n + (dual ? 127 : 255)) / (dual ? 128 : 256));
  const double t_large = double((bl + sms - 1) / sms) * (KC + 3);
  const int64_t bm = ((M + 63) / 64) * ((real_n + (dual ? 63 : 127)) / (dual ? 64 : 128));
  Plan best{true, 1, t_large};
  double t_best = t_large;
  for (int ks = 1; ks <= 8; ks *= 2) {
    if (ks > 1 && KC / ks < 4) break;
    const int64_t blocks = bm * ks;
    const int64_t per_sm = (blocks + sms - 1) / sms;
    const int64_t conc = std::min<int64_t>(per_sm, 3);
    const double rate = std::min(1.0, conc * 4 / 8.0) * 0.8;
    const double work = ((KC + ks - 1) / ks + 3 + (ks > 1 ? 2 : 0)) * chunk_m;
    const double tm = double((per_sm + conc - 1) / conc) * conc * work / rate / chunk_l;
    if (tm < t_best) {
      t_best = tm;
      best = Plan{false, ks, tm};
    }
  }
  return best;
}

// The wgmma kernel (kernels/gemm_wgmma.cu) in the same units: 128 weight
// rows x BT tokens per block, one block per SM, its rate relative to the
// large mma.sync tile: BT = 256 measured 1.94-1.96x at M = 2048 on the H200
// (bench/RESULTS.md); BT = 128 is still a guess. Each block pays kWgFill
// chunks of fill: its TMA / mbarrier pipeline, prologue and transposing
// epilogue cost more than mma.sync's 3 (a K = 1024 GEMM takes ~15 us from
// one block per SM up to a full wave: bench_gemm, fifth session). With 3,
// auto took wgmma where mma.sync split-K is 1.3-2x faster (0.6B shapes,
// M = 128-512).
struct WgPlan {
  int bt;
  double t;
};
WgPlan plan_wgmma(int64_t M, int64_t real_n, int KC, bool dual, int sms) {
  constexpr double kRate[2] = {1.95, 1.7};  // BT = 256, 128
  constexpr int kWgFill = 8;
  WgPlan best{0, 1e300};
  const int bts[2] = {wgmma::kTokTileLarge, wgmma::kTokTileSmall};
  for (int i = 0; i < 2; ++i) {
    const int bt = bts[i];
    const int64_t rows = dual ? wgmma::kBlockRows / 2 : wgmma::kBlockRows;
    const int64_t blocks = ((M + bt - 1) / bt) * ((real_n + rows - 1) / rows);
    const double t = double((blocks + sms - 1) / sms) * (KC + kWgFill) * (bt * 128.0) / (128.0 * 256.0) / kRate[i];
    if (t < best.t) best = WgPlan{bt, t};
  }
  return best;
}

cudaError_t launch_wgmma(const KArgs& k, WFormat f, Epilogue ep, int bt, cudaStream_t stream) {
  wgmma::Args a;
  a.x = k.x;
  a.ldx = k.ldx;
  a.K = k.K;
  a.KC = k.KC;
  a.tiles = k.tiles;
  a.w[0] = k.w[0];
  a.w[1] = k.w[1];
  a.scale_off = k.scale_off32;
  a.grp = k.grp;
  a.o = k.o;
  return wgmma::run(a, f, ep, bt, stream);
}

template <WFormat F, Epilogue EP>
cudaError_t run_gemm(KArgs& a, GemmPath path, cudaStream_t stream) {
  const int M = a.o.M;
  if (path == GemmPath::kWgmma && (F == WFormat::kF16 || M <= 16)) return cudaErrorNotSupported;
  if (M <= 8) return launch_gemv<F, 1, EP>(a, stream);
  if (M <= 16) return launch_gemv<F, 2, EP>(a, stream);
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  constexpr bool kDual = EP == Epilogue::kSwiGLU;
  const Plan p = plan_mma(M, a.o.N, a.KC, kDual, sm_count(dev));
  if (F != WFormat::kF16 && path != GemmPath::kMma) {
    if (wgmma::available(dev)) {
      const WgPlan w = plan_wgmma(M, a.o.N, a.KC, kDual, sm_count(dev));
      if (path == GemmPath::kWgmma || w.t < p.t) return launch_wgmma(a, F, EP, w.bt, stream);
    } else if (path == GemmPath::kWgmma) {
      return cudaErrorNotSupported;
    }
  }
  if (p.large) return launch_mma<F, CfgLarge, EP>(a, dev, 1, kDual ? CfgLarge::BN / 2 : CfgLarge::BN, stream);
  return launch_mma<F, CfgMedium, EP>(a, dev, p.ks, kDual ? CfgMedium::BN / 2 : CfgMedium::BN, stream);
}

template <WFormat F>
cudaError_t run_format(KArgs& a, Epilogue ep, GemmPath path, cudaStream_t stream) {
  switch (ep) {
    case Epilogue::kStoreF16: return run_gemm<F, Epilogue::kStoreF16>(a, path, stream);
    case Epilogue::kStoreF32: return run_gemm<F, Epilogue::kStoreF32>(a, path, stream);
    case Epilogue::kAddF32: return run_gemm<F, Epilogue::kAddF32>(a, path, stream);
    case Epilogue::kSwiGLU: return run_gemm<F, Epilogue::kSwiGLU>(a, path, stream);
  }
  return cudaErrorInvalidValue;
}

// ---- Host repacking -----------------------------------------------------------------------

// Runs fn(begin, end) over [0, n) on up to hardware_concurrency threads when
// the work is large; serially otherwise or when threads cannot be started.
template <class Fn>
void parallel_for(int64_t n, int64_t work, Fn fn) {
  unsigned nt = std::thread::hardware_concurrency();
  nt = std::min<unsigned>(nt == 0 ? 1 : nt, 16);
  if (work < (int64_t(1) << 22) || nt <= 1 || n < 2) {
    fn(int64_t(0), n);
    return;
  }
  nt = unsigned(std::min<int64_t>(nt, n));
  const int64_t step = (n + nt - 1) / nt;
  std::vector<std::thread> pool;
  int64_t b = step;
  for (; b < n; b += step) {
    try {
      pool.emplace_back(fn, b, std::min(n, b + step));
    } catch (...) {
      break;  // no more threads: the rest runs here
    }
  }
  for (; b < n; b += step) fn(b, std::min(n, b + step));
  fn(int64_t(0), std::min(n, step));
  for (auto& th : pool) th.join();
}

// Where column j (0..63) of a chunk goes: lane quad t, k step s, element e
// (qweight.cuh's coord_of, tabulated once).
struct ChunkMap {
  uint8_t t[64], s[64], e[64];
  ChunkMap() {
    for (int j = 0; j < 64; ++j) {
      const qw::Coord c = qw::coord_of(0, j, 64);
      t[j] = uint8_t(c.lane & 3);
      s[j] = uint8_t(c.s);
      e[j] = uint8_t(c.e);
    }
  }
};

void repack_q4_0(const BlockQ4_0* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t KC = qw::n_chunks(cols), nb = cols / kQBlock;
  const size_t soff = qw::scales_offset(WFormat::kQ4_0, rows, cols);
  static const ChunkMap map;
  parallel_for(qw::n_tiles(rows), rows * cols, [=](int64_t t0, int64_t t1) {
    uint8_t nib[32];
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t unit = tile * KC + c;
        uint32_t* q = reinterpret_cast<uint32_t*>(dst + unit * qw::kQ4UnitBytes);  // [lane][s]
        uint16_t* sc = reinterpret_cast<uint16_t*>(dst + soff + unit * qw::kScaleUnitBytes);
        std::memset(q, 0, qw::kQ4UnitBytes);
        for (int rr = 0; rr < 16; ++rr) {
          const int64_t row = tile * 16 + rr;
          const int g = rr & 7, p = rr >> 3;
          for (int h = 0; h < 2; ++h) {
            // Block 2c+h is chunk cols 32h .. 32h+31.
            const int64_t b = 2 * c + h;
            const bool ok = row < rows && b < nb;
            if (ok) {
              const BlockQ4_0& blk = src[row * nb + b];
              for (int j = 0; j < 16; ++j) {
                nib[j] = blk.qs[j] & 15u;
                nib[j + 16] = blk.qs[j] >> 4;
              }
              sc[4 * g + 2 * h + p] = blk.d;
            } else {
              std::memset(nib, 8, sizeof nib);  // decodes to 0 (and d = 0)
              sc[4 * g + 2 * h + p] = 0;
            }
            for (int i = 0; i < 32; ++i) {
              const int j = 32 * h + i;
              q[(4 * g + map.t[j]) * 4 + map.s[j]] |= uint32_t(nib[i]) << qw::q4_shift(p, map.e[j]);
            }
          }
        }
      }
    }
  });
}

void repack_q8_0(const BlockQ8_0* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t KC = qw::n_chunks(cols), nb = cols / kQBlock;
  const size_t soff = qw::scales_offset(WFormat::kQ8_0, rows, cols);
  static const ChunkMap map;
  parallel_for(qw::n_tiles(rows), rows * cols, [=](int64_t t0, int64_t t1) {
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int64_t c = 0; c < KC; ++c) {
        const int64_t unit = tile * KC + c;
        uint8_t* q = dst + unit * qw::kQ8UnitBytes;
        uint16_t* sc = reinterpret_cast<uint16_t*>(dst + soff + unit * qw::kScaleUnitBytes);
        for (int rr = 0; rr < 16; ++rr) {
          const int64_t row = tile * 16 + rr;
          const int g = rr & 7, p = rr >> 3;
          for (int h = 0; h < 2; ++h) {
            const int64_t b = 2 * c + h;
            const bool ok = row < rows && b < nb;
            sc[4 * g + 2 * h + p] = ok ? src[row * nb + b].d : uint16_t(0);
            for (int i = 0; i < 32; ++i) {
              const int j = 32 * h + i;
              q[qw::q8_byte(4 * g + map.t[j], map.s[j], p, map.e[j])] =
                  ok ? uint8_t(int(src[row * nb + b].qs[i]) + 128) : uint8_t(128);
            }
          }
        }
      }
    }
  });
}

}  // namespace

size_t dweight_bytes(WFormat fmt, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  if (fmt == WFormat::kF16) return size_t(rows) * size_t(cols) * 2;
  return size_t(qw::n_tiles(rows)) * size_t(qw::n_chunks(cols)) *
         size_t(qw::unit_bytes(fmt) + qw::kScaleUnitBytes);
}

WFormat format_for(int32_t gguf_dtype) {
  switch (gguf_dtype) {
    case QSP_DTYPE_Q4_0: return WFormat::kQ4_0;
    case QSP_DTYPE_Q8_0: return WFormat::kQ8_0;
    default: return WFormat::kF16;  // F16, BF16, F32 (others are rejected before upload)
  }
}

void repack_weight(int32_t gguf_dtype, const void* src, int64_t rows, int64_t cols, void* dst) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  const WFormat f = format_for(gguf_dtype);
  if (rows <= 0 || cols <= 0) return;
  if ((gguf_dtype == QSP_DTYPE_Q4_0 || gguf_dtype == QSP_DTYPE_Q8_0) && cols % kQBlock != 0) {
    std::memset(out, 0, dweight_bytes(f, rows, cols));  // not a valid GGUF tensor; gemm_supported says no
    return;
  }
  switch (gguf_dtype) {
    case QSP_DTYPE_Q4_0: repack_q4_0(static_cast<const BlockQ4_0*>(src), rows, cols, out); return;
    case QSP_DTYPE_Q8_0: repack_q8_0(static_cast<const BlockQ8_0*>(src), rows, cols, out); return;
    case QSP_DTYPE_F16: std::memcpy(out, src, size_t(rows) * size_t(cols) * 2); return;
    case QSP_DTYPE_BF16:
    case QSP_DTYPE_F32: {
      const int64_t n = rows * cols;
      uint16_t* o = reinterpret_cast<uint16_t*>(out);
      parallel_for(rows, n, [=](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * cols; i < r1 * cols; ++i) {
          const float v = gguf_dtype == QSP_DTYPE_F32 ? static_cast<const float*>(src)[i]
                                                      : bf16_to_fp32(static_cast<const uint16_t*>(src)[i]);
          o[i] = fp32_to_fp16(v);
        }
      });
      return;
    }
    default: std::memset(out, 0, dweight_bytes(f, rows, cols)); return;
  }
}

bool gemm_supported(WFormat fmt, int64_t rows, int64_t cols, const char** why) {
  const char* r = nullptr;
  if (fmt != WFormat::kQ4_0 && fmt != WFormat::kQ8_0 && fmt != WFormat::kF16) {
    r = "unknown weight format";
  } else if (rows < 1 || cols < 1) {
    r = "empty matrix";
  } else if (cols % 32 != 0) {
    r = "K (cols) must be a multiple of 32: the kernels move K in 32-column halves of 64-column chunks";
  } else if (rows > (int64_t(1) << 30) || cols > (int64_t(1) << 24) ||
             dweight_bytes(fmt, rows, cols) >= (size_t(1) << 32)) {
    r = "matrix too large: the kernels address weights with 32-bit offsets (< 4 GiB)";
  }
  if (why) *why = r;
  return r == nullptr;
}

cudaError_t gemm(const GemmArgs& g, cudaStream_t stream) {
  const int64_t K = g.w.cols;
  const bool dual = g.ep == Epilogue::kSwiGLU;
  if (!gemm_supported(g.w.fmt, g.w.rows, K, nullptr) || g.w.data == nullptr || g.x == nullptr || g.M < 1) {
    return cudaErrorInvalidValue;
  }
  // Row groups: w, then wcat[0], wcat[1] where present (in that order).
  const DWeight* parts[3] = {&g.w, nullptr, nullptr};
  int n_parts = 1;
  for (const DWeight& c : g.wcat) {
    if (c.data == nullptr) continue;
    const DWeight& prev = *parts[n_parts - 1];
    if (dual || g.w.fmt == WFormat::kF16 || c.fmt != g.w.fmt || c.cols != K || prev.rows % qw::kTileRows != 0 ||
        !gemm_supported(c.fmt, c.rows, K, nullptr)) {
      return cudaErrorInvalidValue;
    }
    parts[n_parts++] = &c;
  }
  int64_t N = 0;
  for (int i = 0; i < n_parts; ++i) N += parts[i]->rows;
  if (N > (int64_t(1) << 30)) return cudaErrorInvalidValue;
  // 16-byte activation loads: x and ldx aligned to 8 fp16.
  if (g.ldx < K || g.ldx % 8 != 0 || reinterpret_cast<uintptr_t>(g.x) % 16 != 0) return cudaErrorInvalidValue;
  if (g.ldo < N) return cudaErrorInvalidValue;
  if (g.path != GemmPath::kAuto && g.path != GemmPath::kMma && g.path != GemmPath::kWgmma) return cudaErrorInvalidValue;
  if (int64_t(g.M) * g.ldx >= (int64_t(1) << 31)) return cudaErrorInvalidValue;  // 32-bit activation offsets
  if (dual && (g.w2.data == nullptr || g.w2.fmt != g.w.fmt || g.w2.rows != g.w.rows || g.w2.cols != g.w.cols)) {
    return cudaErrorInvalidValue;
  }
  const bool half_out = g.ep == Epilogue::kStoreF16 || dual;
  if (g.ep != Epilogue::kStoreF16 && g.ep != Epilogue::kStoreF32 && g.ep != Epilogue::kAddF32 && !dual) {
    return cudaErrorInvalidValue;
  }
  if (half_out ? g.out_h == nullptr : g.out_f == nullptr) return cudaErrorInvalidValue;

  KArgs a;
  a.x = g.x;
  a.ldx = g.ldx;
  a.K = int32_t(K);
  a.KC = int32_t(qw::n_chunks(K));
  a.tiles = int32_t(qw::n_tiles(N));
  a.w[0] = static_cast<const uint8_t*>(g.w.data);
  a.w[1] = static_cast<const uint8_t*>(dual ? g.w2.data : g.w.data);
  a.scale_off = g.w.fmt == WFormat::kF16 ? 0 : qw::scales_offset(g.w.fmt, N, K);
  a.scale_off32 = uint32_t(a.scale_off);
  {
    int32_t tile = 0;
    for (int i = 0; i < 3; ++i) {
      const DWeight& d = *parts[std::min(i, n_parts - 1)];
      a.grp.w[i] = static_cast<const uint8_t*>(d.data);
      a.grp.soff[i] = d.fmt == WFormat::kF16 ? 0u : uint32_t(qw::scales_offset(d.fmt, d.rows, K));
      if (i < n_parts) tile += int32_t(qw::n_tiles(d.rows));
      if (i < 2) a.grp.tend[i] = i + 1 < n_parts ? tile : a.tiles;
    }
  }
  a.chunks_per_split = a.KC;
  a.o.out_h = g.out_h;
  a.o.out_f = g.out_f;
  a.o.ldo = g.ldo;
  a.o.M = g.M;
  a.o.N = int32_t(N);
  const uintptr_t base = half_out ? reinterpret_cast<uintptr_t>(g.out_h) : reinterpret_cast<uintptr_t>(g.out_f);
  a.o.vec = g.ldo % 2 == 0 && base % (half_out ? 4 : 8) == 0;

  switch (g.w.fmt) {
    case WFormat::kQ4_0: return run_format<WFormat::kQ4_0>(a, g.ep, g.path, stream);
    case WFormat::kQ8_0: return run_format<WFormat::kQ8_0>(a, g.ep, g.path, stream);
    case WFormat::kF16: return run_format<WFormat::kF16>(a, g.ep, g.path, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kern
}  // namespace qsp
