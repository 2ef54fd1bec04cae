// The mma.sync tensor-core GEMM (sm_80+): Y = X W^T, X fp16 [M][K], W in
// the device layout of its format (kernels/formats/), fp32 accumulators.
// One kernel template, two tile configurations (kernels/gemm_internal.cuh):
//  - CfgLarge (sm_80 / sm_89 prefill, fp16 weights): 128 x 256 block tile,
//    BK = 64, 8 warps of 64 x 64, 3-4 stage cp.async pipeline, activations
//    through ldmatrix, weights decoded in registers straight into B
//    fragments (~330 TFLOPS on the H200).
//  - CfgMedium (too few large tiles, e.g. M = 17..512): 64 x 128 tiles,
//    4 warps, several blocks per SM; on sm_90 the K range is split over a
//    thread-block cluster (up to 8) and reduced through distributed shared
//    memory, so no workspace is needed.
// The per-format part (stage bytes, pipeline depth, smem -> fragments) is
// the format's WTraits; this file knows no format. kernels/gemm.cu picks the
// config and the split (kernels/gemm_plan.h).
#include <cooperative_groups.h>

#include "kernels/formats/formats.cuh"
#include "kernels/gemm_internal.cuh"
#include "kernels/pdl.h"
#include "kernels/per_device.h"
#include "kernels/ptx.cuh"
#include "kernels/qweight.cuh"

namespace qsp {
namespace kern {
namespace {

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
  pdl_wait();  // kernels/pdl.h
  pdl_launch_dependents();
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
        cp_async16(st + row * 128 + qw::swz(row, sl) * 16, a.x + (ok ? off : 0u), ok);
      }
    }
    const uint32_t sb = st + kAStage;
    if constexpr (T::kRowMajor) {
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
        cp_async16(sb + row * 128 + qw::swz(row, sl) * 16, w + (ok ? off : 0u), ok);
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
      constexpr int kSUnitPieces = T::kScaleUnit / 16;  // per tile
      constexpr int kSPieces = kVT * kSUnitPieces;
      static_assert(kSPieces <= kThreads, "one scale piece per thread at most");
      if (tid < kSPieces) {
        const int v = tid / kSUnitPieces, lp = tid % kSUnitPieces;
        const int rt = vt_real(v);
        const bool ok = rt < a.tiles;
        const WLoc L = kDual ? WLoc{wsel(vt_mat(v)), a.scale_off32, rt} : locate(a.grp, rt);
        const uint32_t off = L.soff + (uint32_t(L.tile) * uint32_t(a.KC) + uint32_t(c)) * T::kScaleUnit + lp * 16;
        cp_async16(sb + kVT * T::kUnit + v * T::kScaleUnit + lp * 16, L.base + (ok ? off : 0u), ok);
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
          ldmatrix_x4(af[i][ss], st + row * 128 + qw::swz(row, 2 * (2 * hs + ss) + (lane >> 4)) * 16);
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

// ---- Launch -------------------------------------------------------------------------------

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
cudaError_t launch_cfg(KArgs a, int dev, int ks, int real_cols, cudaStream_t stream) {
  auto kernel = gemm_mma_kernel<F, C, EP>;
  constexpr int kSmem = mma_smem_bytes<F, C>();
  static PerDevice smem_once, cluster_once;
  cudaError_t e = set_smem_once(smem_once, dev, kernel, kSmem);
  if (e != cudaSuccess) return e;
  if (ks > 1 && !(C::kSplit && cluster_capable(cluster_once, dev, kernel))) ks = 1;
  a.chunks_per_split = (a.KC + ks - 1) / ks;
  const dim3 grid((a.o.N + real_cols - 1) / real_cols, (a.o.M + C::BM - 1) / C::BM, ks);
  if (ks == 1) return launch_pdl(PdlKernel::kGemm, kernel, grid, dim3(C::kThreads), kSmem, stream, a);
  const ClusterZLaunch cl(grid, C::kThreads, kSmem, stream, pdl_enabled(stream, PdlKernel::kGemm));
  {
    const prof::Scope timed(pdl_name(PdlKernel::kGemm), grid, dim3(C::kThreads), stream);
    e = cudaLaunchKernelEx(&cl.cfg, kernel, a);
  }
  if (e == cudaSuccess) return cudaGetLastError();
  // A cluster that cannot be scheduled is a launch-configuration error (not
  // sticky): run unsplit instead of failing the whole forward pass.
  (void)cudaGetLastError();
  a.chunks_per_split = a.KC;
  return launch_pdl(PdlKernel::kGemm, kernel, dim3(grid.x, grid.y, 1), dim3(C::kThreads), kSmem, stream, a);
}

}  // namespace

cudaError_t launch_mma(const KArgs& a, WFormat f, Epilogue ep, bool large, int ks, int dev, cudaStream_t stream) {
  return dispatch_format(f, cudaErrorInvalidValue, [&](auto fmt) {
    constexpr WFormat F = decltype(fmt)::kFormat;
    return dispatch_epilogue(ep, [&](auto e) {
      constexpr Epilogue EP = decltype(e)::value;
      constexpr bool kDual = EP == Epilogue::kSwiGLU;
      if (large) return launch_cfg<F, CfgLarge, EP>(a, dev, 1, kDual ? CfgLarge::BN / 2 : CfgLarge::BN, stream);
      return launch_cfg<F, CfgMedium, EP>(a, dev, ks, kDual ? CfgMedium::BN / 2 : CfgMedium::BN, stream);
    });
  });
}

}  // namespace kern
}  // namespace qsp
