// The GEMM plan model (kernels/gemm_plan.cpp, host only): the choices its
// comments state for the H200's figures (132 SMs; clusters of 4 and 8 fill
// 120 and 112 SMs), and the two-launch hybrid of the wgmma kernel
// (WgPlan::head, $QSP_WGMMA_HYBRID): taken where the unsplit grid ends in a
// ragged wave, never below a wave or where the uniform grid is as fast, and
// always a head of whole waves inside the row blocks. No GPU needed.
#include <catch2/catch.hpp>

#include <cstdint>

#include "kernels/gemm_plan.h"

using qsp::kern::plan_wgmma;
using qsp::kern::WgPlan;

namespace {

constexpr int kWave[4] = {132, 132, 120, 112};

int64_t row_blocks(int64_t n, bool dual) { return (n + (dual ? 63 : 127)) / (dual ? 64 : 128); }

}  // namespace

TEST_CASE("kernel plan: the wgmma tiles and splits of the measured shapes", "[plan]") {
  // 8B q / o at 512 tokens: 256-token tiles split 2 ways (sweep: 447.6
  // TFLOPS against 275.8 unsplit, eighth session).
  const WgPlan qo = plan_wgmma(512, 4096, 64, false, kWave);
  CHECK(qo.bt == 256);
  CHECK(qo.ks == 2);
  CHECK(qo.head == 0);
  // 8B q / o at 2048: unsplit 256 (522.4 against 443.8 split 2).
  const WgPlan qo2k = plan_wgmma(2048, 4096, 64, false, kWave);
  CHECK(qo2k.bt == 256);
  CHECK(qo2k.ks == 1);
}

TEST_CASE("kernel plan: the wgmma hybrid of whole waves and a split rest", "[plan]") {
  // 8B gate | up at 512 tokens: 2 x 224 blocks, 3.4 waves: 198 row blocks
  // (3 whole waves) unsplit, the other 26 split 2 ways.
  const WgPlan off = plan_wgmma(512, 14336, 64, true, kWave);
  const WgPlan on = plan_wgmma(512, 14336, 64, true, kWave, true);
  CHECK(off.head == 0);
  CHECK(on.head == 198);
  CHECK(on.bt == 256);
  CHECK(on.ks == 2);
  CHECK(on.t < off.t);
  // At 2048 tokens (13.6 waves) the uniform grid is as fast: no hybrid.
  CHECK(plan_wgmma(2048, 14336, 64, true, kWave, true).head == 0);
  // Below a wave: nothing to split off.
  CHECK(plan_wgmma(256, 4096, 64, false, kWave, true).head == 0);
  // Every shape: a head is whole waves of blocks inside the row blocks,
  // and never slower than the uniform plan.
  for (int64_t M : {17, 64, 128, 300, 512, 777, 1024, 2048, 4096, 8192})
    for (int64_t n : {int64_t(1024), int64_t(2048), int64_t(4096), int64_t(6144), int64_t(12288), int64_t(14336),
                      int64_t(151936)})
      for (int kc : {16, 48, 64, 224})
        for (bool dual : {false, true}) {
          const WgPlan u = plan_wgmma(M, n, kc, dual, kWave), h = plan_wgmma(M, n, kc, dual, kWave, true);
          INFO("M " << M << " N " << n << " KC " << kc << (dual ? " SwiGLU" : ""));
          CHECK(h.t <= u.t);
          if (h.head == 0) continue;
          const int64_t tok_blocks = (M + h.bt - 1) / h.bt;
          CHECK(h.head < row_blocks(n, dual));
          // Whole waves, up to one row block's blocks short of the last.
          CHECK((kWave[0] - h.head * tok_blocks % kWave[0]) % kWave[0] < tok_blocks);
          CHECK(h.head * tok_blocks > kWave[0] - tok_blocks);
          CHECK(h.ks >= 2);
        }
}
