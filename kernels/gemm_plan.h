// The GEMM plan model (host only): which kernel and tile configuration
// kern::gemm() runs for a shape, from an estimate of each candidate's time in
// one unit of SM time. The constants are measured; the measurements are in
// the comments of kernels/gemm_plan.cpp and in bench/RESULTS.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qsp {
namespace kern {

namespace wgmma {
// The Hopper GEMM's tiles (kernels/gemm_wgmma.cu), here so that the host-only
// plan model can see them. Token rows per block: 256 (one m64n256
// accumulator tile per warpgroup) or 128 (more blocks for short prompts).
// (A 64-token tile was measured no faster than 128 per block: below 256 a
// K chunk costs the pipeline's latency, ~0.7 of the 256 tile's time, on the
// H200; bench/RESULTS.md, eighth session.)
constexpr int kTokTileLarge = 256, kTokTileSmall = 128;
// A 64-token tile, forced only (GemmArgs::wg_tile): dropped in the eighth
// session (no faster per chunk than 128 then), back on 2026-12-05 to be
// measured with the tensor-map weights (QSP_WGMMA_TMA_W), for the M = 64
// GEMMs of a 64-sequence decode step. The plan model does not choose it.
constexpr int kTokTileTiny = 64;
// Weight rows ("virtual" rows: gate and up count separately) per block.
constexpr int kBlockRows = 128;
}  // namespace wgmma

// The mma.sync kernel: the large config (ks = 1) or the medium one with K
// split ks ways; t in units of one large-tile chunk (128 x 256 x 64) on one SM.
struct Plan {
  bool large;
  int ks;
  double t;
};
// real_n: output columns; KC: 64-column chunks of K; dual: kSwiGLU (gate and
// up rows in one block); sms: the device's SM count.
Plan plan_mma(int64_t M, int64_t real_n, int KC, bool dual, int sms);

// The wgmma kernel in the same units, with its token tile bt and its number
// of clustered K splits ks (1, 2, 4, 8). head > 0: a hybrid of two
// launches, weight-row blocks [0, head) unsplit (whole waves), the ragged
// rest split ks ways.
struct WgPlan {
  int bt;
  int ks;
  double t;
  int head = 0;
};
// wave[i]: blocks that run at once with clusters of 2^i blocks (wave[0] = the
// SM count; see wgmma::cluster_wave).
// hybrid: consider the two-launch hybrid ($QSP_WGMMA_HYBRID; off until measured).
WgPlan plan_wgmma(int64_t M, int64_t real_n, int KC, bool dual, const int (&wave)[4], bool hybrid = false);

// The GEMV (M <= 16) in the same units: it streams the weights once;
// weight_bytes: their device size.
double plan_gemv(size_t weight_bytes);
// One more launch in the same units (a ragged tail run as its own GEMM).
constexpr double kPlanLaunch = 2.0;

}  // namespace kern
}  // namespace qsp
