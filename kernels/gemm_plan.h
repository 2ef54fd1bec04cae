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
// A 64-token tile: no faster per chunk than 128 while a stage's weights
// came as one copy per tile (eighth session); with the tensor maps the
// fastest tile at M = 64 and often 128 (fourteenth session, H100: 8B
// 12288 x 4096 at M = 64 269 TFLOPS against 143 for the 128 tile and 167
// for mma.sync). The plan takes it only with the maps. (Its kernel at two
// blocks per SM, GemmArgs::wg_per_sm, the plan takes below a wave: gemm_plan.cpp.)
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
  int per_sm = 1;  // 2: the 64-token tile's kernel at two blocks per SM (wgmma::Args::per_sm)
};
// What the wgmma kernel will run with.
struct WgChoices {
  bool maps = false;     // a stage's weights by tensor maps (wgmma::Args::tma_w): their rates, and the 64-token tile
  bool hybrid = false;   // consider the two-launch hybrid ($QSP_WGMMA_HYBRID; measured no faster, off)
  bool dense64 = false;  // with maps: consider the 64-token tile at two blocks per SM (on unless $QSP_WGMMA_DENSE64=0)
  bool lone_tail = false;  // dense64: a grid or last wave of at most one block per SM at the lone block's rate
                           // (gemm() sets it unless $QSP_WGMMA_LONE_TAIL=0: plan_wgmma)
};
// wave[i]: blocks that run at once with clusters of 2^i blocks (wave[0] = the
// SM count; see wgmma::cluster_wave).
WgPlan plan_wgmma(int64_t M, int64_t real_n, int KC, bool dual, const int (&wave)[4], WgChoices c = {});

// The GEMV (M <= 16) in the same units: it streams the weights once;
// weight_bytes: their device size.
double plan_gemv(size_t weight_bytes);
// One more launch in the same units (a ragged tail run as its own GEMM).
constexpr double kPlanLaunch = 2.0;

}  // namespace kern
}  // namespace qsp
