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
// large mma.sync tile: BT = 256 measured 1.94-1.96x at M = 2048 on the H200
// (bench/RESULTS.md); BT = 128 and 64 are still guesses. Each block pays
// kWgFill chunks of fill: its TMA / mbarrier pipeline, prologue and
// transposing epilogue cost more than mma.sync's 3 (a K = 1024 GEMM takes
// ~15 us from one block per SM up to a full wave: bench_gemm, fifth
// session). With 3, auto took wgmma where mma.sync split-K is 1.3-2x faster
// (0.6B shapes, M = 128-512). A K split (a cluster of ks blocks) pays
// kWgReduce chunks more for the reduction through distributed shared memory,
// and a wave holds only whole clusters.
WgPlan plan_wgmma(int64_t M, int64_t real_n, int KC, bool dual, int sms) {
  constexpr double kRate[3] = {1.95, 1.7, 1.3};  // BT = 256, 128, 64
  constexpr int kWgFill = 8, kWgReduce = 2;
  WgPlan best{0, 1, 1e300};
  const int bts[3] = {wgmma::kTokTileLarge, wgmma::kTokTileSmall, wgmma::kTokTileTiny};
  for (int i = 0; i < 3; ++i) {
    const int bt = bts[i];
    const int64_t rows = dual ? wgmma::kBlockRows / 2 : wgmma::kBlockRows;
    const int64_t tiles = ((M + bt - 1) / bt) * ((real_n + rows - 1) / rows);
    for (int ks = 1; ks <= 8; ks *= 2) {
      if (ks > 1 && KC / ks < 4) break;
      const int64_t per_wave = std::max<int64_t>(1, sms / ks) * ks;
      const int64_t waves = (tiles * ks + per_wave - 1) / per_wave;
      const double chunks = double((KC + ks - 1) / ks + kWgFill + (ks > 1 ? kWgReduce : 0));
      const double t = double(waves) * chunks * (bt * 128.0) / (128.0 * 256.0) / kRate[i];
      if (t < best.t) best = WgPlan{bt, ks, t};
    }
  }
  return best;
}

}  // namespace kern
}  // namespace qsp
