// What the attention files share: kernels/attention.cu (the launcher and
// its plan), kernels/attention_mma.cu (the mma.sync flash kernel) and
// kernels/attention_combine.cu (the split-KV merge). Internal to those files.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"

namespace qsp {
namespace kern {
namespace attn {

// ---- Tile configurations of the mma.sync kernel --------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kMinBlocksPerSm_>
struct FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // rows (token x head) per block
  static constexpr int kBlockN = kBlockN_;  // keys per K/V tile
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kNThreads = 32 * kNWarps;

  static constexpr int kRowsPerWarp = kBlockM / kNWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kNTiles = kBlockN / 8;        // n8 tiles of S
  static constexpr int kDTiles = kHeadDim / 8;       // n8 tiles of O
  static constexpr int kKSteps = kHeadDim / 16;      // k16 steps of Q K^T
  static constexpr int kPSteps = kBlockN / 16;       // k16 steps of P V
  // One m-tile per warp: Q fragments (kKSteps x 4 regs) fit in registers;
  // with two they would not, and are re-read from shared memory per tile.
  static constexpr bool kQInRegs = kMTiles == 1;

  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kRowsPerPass = kNThreads / kChunksPerRow;
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kSmemQ = kBlockM * kRowBytes;
  static constexpr int kSmemKV = kBlockN * kRowBytes;      // one stage of K (or V)
  static constexpr int kSmemBytes = kSmemQ + 4 * kSmemKV;  // Q, K x2, V x2

  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kBlockM % (16 * kNWarps) == 0, "whole m16 tiles per warp");
  static_assert(kBlockN % 16 == 0 && kNTiles % 2 == 0, "K tiles feed ldmatrix.x4 in pairs of n8");
  static_assert(kDTiles % 2 == 0, "V tiles feed ldmatrix.x4.trans in pairs of n8");
  static_assert(kNThreads % kChunksPerRow == 0, "a thread keeps one chunk column");
  static_assert(kBlockM % kRowsPerPass == 0 && kBlockN % kRowsPerPass == 0, "whole load passes");
  static_assert(32 % kChunksPerRow == 0 && kRowsPerWarp % (32 / kChunksPerRow) == 0, "whole store passes");
  static_assert(kRowsPerWarp % (32 * 4 / kHeadDim) == 0, "whole fp32 store passes");
  static_assert(kBlockM * kHeadDim * 4 <= 4 * kSmemKV, "fp32 split-KV partials fit in the K/V tiles");
};

enum Config : int { kSmall = 0, kMid = 1, kBig = 2 };

//                                                  D  rows keys warps CTAs/SM
template <int D> using SmallTraits = FwdTraits<D, 16, 32, 1, 4>;
template <int D> using MidTraits = FwdTraits<D, 64, 64, 4, 2>;
// kBig: 4 warps of 32 rows (2 CTAs/SM, 255 registers, every K/V fragment
// feeds two MMAs). Build with -DQSP_ATTN_BIG_WARPS=8 for the alternative
// 8 warps of 16 rows (Q in registers, ~194 registers, 1 CTA/SM) to compare.
#ifndef QSP_ATTN_BIG_WARPS
#define QSP_ATTN_BIG_WARPS 4
#endif
static_assert(QSP_ATTN_BIG_WARPS == 4 || QSP_ATTN_BIG_WARPS == 8, "kBig runs 4 or 8 warps");
template <int D> using BigTraits = FwdTraits<D, 128, 64, QSP_ATTN_BIG_WARPS, 8 / QSP_ATTN_BIG_WARPS>;

// ---- The plan: which configuration, grid and split-KV (kernels/attention.cu) -----------------
struct Plan {
  Config cfg = kBig;
  int gp = 1, tokens = 1, m_blocks = 1, head_blocks = 1, n_splits = 1;
};

// ---- Launchers ------------------------------------------------------------------------------
// The combine kernel holds one split's lse per thread.
constexpr int kCombineThreads = 256;
constexpr int kCombineMaxSplits = kCombineThreads;  // one lse per thread

// The mma.sync kernel of plan pl (and the combine when it splits the keys);
// kernels/attention_mma.cu.
cudaError_t run_mma(const AttnArgs& a, const Plan& pl, cudaStream_t stream);
// The decode step's cluster kernel (kernels/attention_decode.cu): whether it
// runs these arguments (M = 1, not batched, group 1 / 2 / 4 / 8, head_dim
// 64 / 128, sm_90+, the GPU holding a cluster of 8 blocks a KV head at
// once), and its launch (cudaErrorNotSupported where it does not).
bool cluster_decode_runs(const AttnArgs& a);
cudaError_t run_cluster_decode(const AttnArgs& a, cudaStream_t stream);
// out[row] = the merge of n_splits partials (o_part [n_splits][rows][D],
// lse_part [n_splits][rows], base 2); D = head_dim; kernels/attention_combine.cu.
cudaError_t launch_combine(const float* o_part, const float* lse_part, __half* out, int rows, int n_splits,
                           int head_dim, cudaStream_t stream);

}  // namespace attn
}  // namespace kern
}  // namespace qsp
