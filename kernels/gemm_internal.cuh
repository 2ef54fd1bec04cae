// What kernels/gemm.cu (dispatch), kernels/gemm_mma.cu (the mma.sync kernel)
// and kernels/gemv.cu (the GEMV) share: the kernel arguments, the tile
// configurations of the mma.sync kernel, and the launchers' entry points.
// Internal to those three files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gemm_epilogue.cuh"
#include "kernels/kernels.h"

namespace qsp {
namespace kern {

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
  int32_t tma_w;             // the wgmma kernel's weights by tensor-map copies: wgmma::Args::tma_w
  int32_t wg_epi_batch;      // the wgmma kernel's epilogue loads in batches: wgmma::Args::epi_batch
  // GemmArgs::norm_in_*: the GEMV's input formed from these (xin != nullptr).
  const float* xin;
  int32_t xin_ld;
  const float* xin_w;
  float xin_eps;
  int32_t stage_x;  // the GEMV's activations staged in shared memory (GemmArgs::gemv_stage_x)
  int32_t i8;       // the integer GEMV (M = 1; GemmArgs::gemv_i8)
  uint32_t* i8s;    // i8: its activations formed once into this (GemmArgs::i8_stage), or null
  int32_t i8_wide;  // i8: up to 16 warps a block; 1: where the tiles are few, 2: wherever it runs (GemvI8Wide)
  int32_t resid_early;  // kAddF32 GEMV: the residual loaded before pdl_wait ($QSP_GEMV_RESID_EARLY; gemv::early_resid)
};

// ---- Tile configurations of the mma.sync kernel --------------------------------------------
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

// ---- Launchers ------------------------------------------------------------------------------
// The mma.sync kernel (kernels/gemm_mma.cu) on device `dev`: the large
// config, or the medium one with K split `ks` ways over a cluster (1 = no
// split; falls back to 1 where clusters cannot run).
cudaError_t launch_mma(const KArgs& a, WFormat f, Epilogue ep, bool large, int ks, int dev, cudaStream_t stream);
// The GEMV (kernels/gemv.cu), M <= 16.
cudaError_t launch_gemv(const KArgs& a, WFormat f, Epilogue ep, cudaStream_t stream);
// Whether the integer GEMV (kernels/gemv_i8.cuh) decodes format f.
bool gemv_i8_runs(WFormat f);

}  // namespace kern
}  // namespace qsp
