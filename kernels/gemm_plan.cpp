// The GEMM plan model: a wave model of each kernel in units of SM time,
// with the measurements that set its constants.
#include "kernels/gemm_plan.h"

#include <algorithm>

namespace qsp {
namespace kern {

// Which tensor-core config and how many K splits: a wave model in units of
// SM time. The large tile runs one block per SM at rate 1; medium blocks
// (4 warps, up to 3 resident) need two co-resident blocks to saturate an SM
// and reach ~0.8 of the large tile's rate; each block pays ~3 chunks of
// pipeline fill, a split block ~2 more for the cluster reduction. Checked
// with plan_wgmma below against bench_gemm on the H200: the model picks the
// faster forced path on all 64 shape / M points (bench/RESULTS.md); other
// GPUs have not been measured.
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
// large mma.sync tile. Measured with every tile / split forced
// (bench_gemm --sweep, H200, eighth session; bench/RESULTS.md): per block, a
// 256-token K chunk takes 1 / 1.95 of a large mma.sync chunk, a 128-token
// chunk ~0.85 of the 256-token one (not half: below 256 tokens a chunk costs
// the pipeline's latency), so the 128 tile's rate is 1.95 * 0.5 / 0.85.
// Each block pays kWgFill chunks of fill: its TMA / mbarrier pipeline,
// prologue and transposing epilogue (a K = 1024 GEMM takes ~15 us from one
// block per SM up to a full wave: bench_gemm, fifth session). A K split (a
// cluster of ks blocks) pays kWgReduce chunks more for the reduction through
// distributed shared memory, and a wave holds whole clusters only, each
// inside one GPC (wave[], from the driver: on the H200 clusters of 4 and 8
// leave SMs idle). Checked
// against the sweep: 8B q/o at M = 512 predicts 256/2 1.71x faster than
// 256/1 (measured 1.64x) and 1.47x faster than 128/1 (1.43x); 0.6B down
// (1024 x 3072) at M = 128 128/8 1.38x faster than 128/4 (1.38x), at
// M = 512 256/8 1.45x slower than 256/4 (1.37x) with ~12 clusters of 8 per
// wave.
//
//
// With the weights by tensor maps (3 copies per stage instead of 17) the
// per-chunk floor drops and the smaller tiles gain most: fitted to
// bench_gemm --sweep on the H100 (fourteenth session; bench/RESULTS.md), the
// 256 tile at M = 2048 runs 2.17x the mma.sync large tile (322 -> 700 TFLOPS
// on 8B q / o) so its rate is 134 / (144 x 2.17) ~ 2.33 (per tile copies,
// same machine: 2.0); per chunk and block a 128-token tile takes 0.60 and a
// 64-token tile 0.45 of the 256 tile's time (8B q / o at 512 tokens: 128/1
// 570.7 against 64/1 381.2 TFLOPS; at 2048 256/1 700.2 against 64/1 392.5;
// the same within 1% on 12288 x 4096), rates 1.96 and 1.31. Checked there:
// the model picks 64/2 at M = 64 and 128 on q / o (measured best, 130 and
// 264 TFLOPS; mma.sync 118 and 153), 64/1 at 64 and 128/1 at 128 on
// 12288 x 4096 (best: 269, 423), 256/1 at 2048, and at 512 ties 128/1 with
// 256/2 within 2% (measured: Q4_0 128/1 by 5%, Q4_K / Q6_K 256/2 by 1-3%).
//
// The hybrid (WgPlan::head; $QSP_WGMMA_HYBRID=1): where the
// unsplit grid is more than a wave with a ragged last one (8B gate | up at
// 512 tokens: 448 blocks, 3.4 waves of 132), the whole waves' row blocks run
// unsplit and the rest as a split launch of its own, so the last wave's
// blocks take 1 / ks of the K chunks each: 3 x 72 + 42 chunk times against
// 4 x 72 there (one more launch, kPlanLaunch). Measured (H100, with the
// maps): the 8B pass at 128 tokens 4% faster, at 512 and 2048 0-1% slower;
// off.
//
// The 64-token tile at two blocks per SM (WgChoices::dense64, on unless
// $QSP_WGMMA_DENSE64=0): a wave holds twice the blocks, each kDenseSlow
// slower per chunk than alone on its SM (the two share the tensor cores and
// the shared-memory bandwidth). Fitted to bench_gemm --sweep on the H100
// (sixteenth session) where both grids fill their waves: the 2/SM kernel
// runs 1.21-1.27x the 64-token tile alone (8B q / o Q4_0 at M = 512: 458.0
// against 378.1 TFLOPS; 2048: 494.3 / 398.9; 12288 x 4096 at 2048: 509.2 /
// 399.5), so a block is 2 / 1.24 ~ 1.6x slower. With it the plan takes the
// kernel below a wave only, at M <= 64 (8B q / o 64/4, measured best there
// at 139.0 against 131.7 for 64/2 alone; 12288 x 4096 272.1 against 266.9),
// never at M >= 128, where the 128 and 256 tiles win. The first guess, 1.2,
// took it at 128-512 tokens too and lost 3-10% of the whole model there
// (8B Q4_0 512 tokens 12.40-12.46 ms against 11.83-11.91); at M = 64 (the
// 64-sequence decode step) it took it on gate | up and gained: 6.44-6.53 ms
// against 7.15-7.23.
//
// WgChoices::lone_tail (gemm() sets it unless $QSP_WGMMA_LONE_TAIL=0): the
// dense kernel's blocks are charged kDenseSlow only where two share an SM.
// A grid of at most one block per SM, or the last wave of one, runs at the
// lone rate. bench_gemm --sweep --m 64 on the H100 (twenty-second session)
// measured the 8B down projection (4096 x 12288) best at 64/8 at two per
// SM: 256 blocks, a wave of 240 plus 16 alone. That ran 197.0 TFLOPS for
// Q4_0 and 158.2 for Q4_K, against 190.7 / 137.4 for the plan's 64/4,
// which the whole-wave count charged as two dense waves. The fused
// gate | up at 64 tokens then splits 2 ways (264 + 120 blocks): Q4_K 245.8
// against 223.8, Q4_0 306.7 against 310.3. Blocks per wave there
// (bench_gemm --waves): one per SM 132 / 132 / 120 / 120 for clusters of
// 1 / 2 / 4 / 8, two per SM 264 / 264 / 248 / 240. In a whole pass (H100,
// twenty-third session, two alternating rounds): the 8B 64-sequence step
// Q4_K_M 8.45 / 8.73 -> 8.13 / 8.00 ms, Q4_0 6.50 / 6.61 -> 6.59 / 6.56
// (equal), a 128-token prompt equal; in that run the down GEMM Q4_K went
// 140 -> 158 TFLOPS, gate | up Q4_K 226 -> 243, Q4_0 315 -> 310.
WgPlan plan_wgmma(int64_t M, int64_t real_n, int KC, bool dual, const int (&wave)[4], WgChoices c) {
  constexpr int kTiles[3] = {wgmma::kTokTileLarge, wgmma::kTokTileSmall, wgmma::kTokTileTiny};
  constexpr double kRateCopies[2] = {1.95, 1.14};   // per-tile copies: BT = 256, 128 (H200, eighth session)
  constexpr double kRateMaps[3] = {2.33, 1.96, 1.31};  // tensor maps: BT = 256, 128, 64 (H100, fourteenth)
  constexpr int kWgFill = 8, kWgReduce = 2;
  constexpr double kDenseSlow = 1.6;
  WgPlan best{0, 1, 1e300};
  for (int i = 0; i < (c.maps ? (c.dense64 ? 4 : 3) : 2); ++i) {
    const bool dense = i == 3;  // the 64-token tile, two blocks per SM
    const int bt = kTiles[dense ? 2 : i], per_sm = dense ? 2 : 1;
    const double lone_unit = (bt * 128.0) / (128.0 * 256.0) / (c.maps ? kRateMaps[dense ? 2 : i] : kRateCopies[i]);
    const double unit = lone_unit * (dense ? kDenseSlow : 1.0);
    const int64_t rows = dual ? wgmma::kBlockRows / 2 : wgmma::kBlockRows;
    const int64_t tok_blocks = (M + bt - 1) / bt, row_blocks = (real_n + rows - 1) / rows;
    // Time of `tiles` blocks split ks ways (i_ks = log2 ks), in units.
    const auto time = [&](int64_t tiles, int ks, int i_ks) {
      const int64_t per_wave = std::max(per_sm * int64_t(wave[i_ks]), int64_t(ks));
      const int64_t blocks = tiles * ks, waves = (blocks + per_wave - 1) / per_wave;
      const double chunks = double((KC + ks - 1) / ks + kWgFill + (ks > 1 ? kWgReduce : 0));
      if (dense && c.lone_tail) {
        // The whole waves at two blocks per SM; a last wave of at most one
        // block per SM runs at a lone block's rate (the undense unit).
        const int64_t full = blocks / per_wave, rest = blocks % per_wave;
        const bool alone = rest <= std::max(int64_t(wave[i_ks]), int64_t(ks));
        return double(full) * chunks * unit + (rest == 0 ? 0.0 : chunks * (alone ? lone_unit : unit));
      }
      return double(waves) * chunks * unit;
    };
    for (int ks = 1, i_ks = 0; ks <= 8; ks *= 2, ++i_ks) {
      if (ks > 1 && KC / ks < 4) break;
      const double t = time(tok_blocks * row_blocks, ks, i_ks);
      if (t < best.t) best = WgPlan{bt, ks, t, 0, per_sm};
    }
    if (dense) continue;  // no hybrid of the dense kernel
    // The hybrid: whole waves of row blocks unsplit, the rest split.
    const int64_t full = tok_blocks * row_blocks / std::max(wave[0], 1);
    const int64_t head = full * wave[0] / tok_blocks;
    if (!c.hybrid || full < 1 || head < 1 || head >= row_blocks) continue;
    for (int ks = 2, i_ks = 1; ks <= 8 && KC / ks >= 4; ks *= 2, ++i_ks) {
      const double t = time(head * tok_blocks, 1, 0) + time((row_blocks - head) * tok_blocks, ks, i_ks) + kPlanLaunch;
      if (t < best.t) best = WgPlan{bt, ks, t, int(head)};
    }
  }
  return best;
}

// The unit above is ~1.56 us on the H200 (a 256-token wgmma chunk, 1 / 1.95
// of it, measured ~0.8 us per block). The GEMV moves 1.3-2.0 TB/s of weights
// (bench_gemm M = 1: 4096 x 4096 Q4_0 1.27 TB/s, 12288 x 4096 2.0 TB/s):
// ~2 MB per unit at the lower figure, plus ~2 units of launch and tail.
double plan_gemv(size_t weight_bytes) { return double(weight_bytes) / 2.0e6 + 2.0; }

}  // namespace kern
}  // namespace qsp
