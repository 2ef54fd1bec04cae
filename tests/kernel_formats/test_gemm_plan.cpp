// The GEMM plan model (kernels/gemm_plan.cpp, host only): the choices its
// comments state for the measured figures (132 SMs; clusters of 4 and 8
// fill 120 and 112 SMs), with the weights copied per tile (H200) and by
// tensor maps (H100), and the two-launch hybrid of the wgmma kernel
// (WgPlan::head, $QSP_WGMMA_HYBRID): taken where the unsplit grid ends in a
// ragged wave, never below a wave or where the uniform grid is as fast, and
// always a head of whole waves inside the row blocks. No GPU needed.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>

#include "kernels/gemm_plan.h"
#include "kernels/pdl.h"

using qsp::kern::plan_mma;
using qsp::kern::plan_wgmma;
using qsp::kern::WgChoices;
using qsp::kern::WgPlan;

namespace {

constexpr int kWave[4] = {132, 132, 120, 112};
constexpr WgChoices kCopies{false, false}, kMaps{true, false}, kHybrid{false, true};

int64_t row_blocks(int64_t n, bool dual) { return (n + (dual ? 63 : 127)) / (dual ? 64 : 128); }

}  // namespace

TEST_CASE("kernel plan: the wgmma tiles and splits of the measured shapes", "[plan]") {
  // Weights copied per tile (H200, eighth session).
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
  // Never the 64-token tile (no faster per chunk than 128 there).
  for (int64_t M : {17, 64, 128, 512})
    for (int64_t n : {int64_t(1024), int64_t(4096), int64_t(12288)}) CHECK(plan_wgmma(M, n, 64, false, kWave).bt != 64);
}

TEST_CASE("kernel plan: the wgmma tiles and splits with the weights by tensor maps", "[plan]") {
  // bench_gemm --sweep on the H100 (fourteenth session), best measured
  // tile / split, TFLOPS; the model's pick must be it.
  const struct {
    int64_t M, n;
    int bt, ks;
  } best[] = {
      {64, 4096, 64, 2},      // 8B q / o: 130.3 (mma.sync 117.9)
      {128, 4096, 64, 2},     // 264.0 (mma.sync 152.5)
      {2048, 4096, 256, 1},   // 700.2
      {64, 12288, 64, 1},     // 269.4 (mma.sync 166.9)
      {128, 12288, 128, 1},   // 422.9
      {2048, 12288, 256, 1},  // 715.0
  };
  for (const auto& b : best) {
    const WgPlan p = plan_wgmma(b.M, b.n, 64, false, kWave, kMaps);
    INFO("M " << b.M << " N " << b.n << ": " << p.bt << "/" << p.ks);
    CHECK(p.bt == b.bt);
    CHECK(p.ks == b.ks);
    // And it beats mma.sync in the model, as measured.
    CHECK(p.t < plan_mma(b.M, b.n, 64, false, kWave[0]).t);
  }
  // At 512 tokens the measured best depends on the format (q / o: Q4_0 128/1
  // 570.7 against 256/2 ~545; Q4_K 256/2 494.6): the model takes one of the two.
  const WgPlan p512 = plan_wgmma(512, 4096, 64, false, kWave, kMaps);
  CHECK(((p512.bt == 128 && p512.ks == 1) || (p512.bt == 256 && p512.ks == 2)));
  // The maps are faster on every shape, so never a slower estimate.
  for (int64_t M : {17, 64, 128, 300, 512, 2048})
    for (int64_t n : {int64_t(1024), int64_t(4096), int64_t(12288), int64_t(14336)})
      for (bool dual : {false, true})
        CHECK(plan_wgmma(M, n, 64, dual, kWave, kMaps).t < plan_wgmma(M, n, 64, dual, kWave, kCopies).t);
}

TEST_CASE("kernel plan: the 64-token tile at two blocks per SM ($QSP_WGMMA_DENSE64)", "[plan]") {
  const WgChoices dense{true, false, true};
  // Below a wave the second block per SM is what it is for: 12288 x 4096
  // at M = 64 (96 blocks of 64/1 on 132 SMs) splits 2 ways into 192 blocks
  // resident at once.
  const WgPlan g64 = plan_wgmma(64, 12288, 64, false, kWave, dense);
  CHECK(g64.per_sm == 2);
  CHECK(g64.bt == 64);
  CHECK(g64.ks == 2);
  // 8B q / o at M = 64: 64/4 at two per SM (bench_gemm --sweep, H100: 139.0
  // TFLOPS against 131.7 for 64/2 alone).
  const WgPlan qo64 = plan_wgmma(64, 4096, 64, false, kWave, dense);
  CHECK(qo64.per_sm == 2);
  CHECK(qo64.ks == 4);
  // From one wave of 128- and 256-token tiles up the single kernels win
  // (measured: the whole model 3-10% slower at 128-512 tokens when the plan
  // took it there): never at the measured M >= 128 on the 8B and 0.6B shapes
  // (a ragged count such as 300 may take it: five 64-token tiles against
  // three 128-token ones, unmeasured).
  for (int64_t M : {128, 256, 512, 2048, 8192})
    for (const auto& s : {std::pair<int64_t, int>{4096, 64}, {1024, 64}, {12288, 64}, {4096, 192}, {2048, 16},
                          {1024, 16}, {3072, 16}, {1024, 48}})
      for (bool dual : {false, true}) {
        INFO("M " << M << " N " << s.first << " KC " << s.second << (dual ? " SwiGLU" : ""));
        CHECK(plan_wgmma(M, s.first, s.second, dual, kWave, dense).per_sm == 1);
      }
  // Only the 64-token tile takes it, never without the maps or the switch,
  // and it never makes the estimate worse.
  for (int64_t M : {17, 64, 128, 300, 512, 2048})
    for (int64_t n : {int64_t(1024), int64_t(4096), int64_t(12288), int64_t(14336)})
      for (bool dual : {false, true}) {
        const WgPlan d = plan_wgmma(M, n, 64, dual, kWave, dense);
        CHECK((d.per_sm == 1 || d.bt == 64));
        CHECK(d.head == 0);
        CHECK(d.t <= plan_wgmma(M, n, 64, dual, kWave, kMaps).t);
        CHECK(plan_wgmma(M, n, 64, dual, kWave, kMaps).per_sm == 1);
        CHECK(plan_wgmma(M, n, 64, dual, kWave, WgChoices{false, false, true}).per_sm == 1);
      }
}

// WgChoices::lone_tail ($QSP_WGMMA_LONE_TAIL): the dense kernel's last
// wave of at most one block per SM at the lone rate. Its picks at M = 64
// on the H100's waves (bench_gemm --waves: 132, 132, 120, 120) are the
// sweep's best (bench/RESULTS.md, twenty-second session): the 8B down
// projection 64/8 at two per SM (256 blocks: a wave of 240 and 16 alone),
// q / o still 64/4 at two per SM, the fused gate | up 64/2 at two per SM.
// It only ever lowers an estimate, and it changes nothing at the measured
// M >= 128 shapes.
TEST_CASE("kernel plan: the dense kernel's lone last wave ($QSP_WGMMA_LONE_TAIL)", "[plan]") {
  constexpr int kWaveH100[4] = {132, 132, 120, 120};
  const WgChoices dense{true, false, true}, lone{true, false, true, true};
  const WgPlan down = plan_wgmma(64, 4096, 192, false, kWaveH100, lone);
  CHECK(down.per_sm == 2);
  CHECK(down.bt == 64);
  CHECK(down.ks == 8);
  const WgPlan down_before = plan_wgmma(64, 4096, 192, false, kWaveH100, dense);  // 64/4 at two per SM
  CHECK(down_before.ks == 4);
  CHECK(down_before.per_sm == 2);
  const WgPlan qo = plan_wgmma(64, 4096, 64, false, kWaveH100, lone);
  CHECK(qo.per_sm == 2);
  CHECK(qo.ks == 4);
  const WgPlan gu = plan_wgmma(64, 12288, 64, true, kWaveH100, lone);
  CHECK(gu.per_sm == 2);
  CHECK(gu.bt == 64);
  CHECK(gu.ks == 2);
  for (int h = 0; h < 2; ++h) {
    const int(&w)[4] = h ? kWaveH100 : kWave;
    for (int64_t M : {128, 256, 512, 2048, 8192})
      for (const auto& sh : {std::pair<int64_t, int>{4096, 64}, {1024, 64}, {12288, 64}, {4096, 192}, {2048, 16},
                             {1024, 16}, {3072, 16}, {1024, 48}})
        for (bool dual : {false, true}) {
          INFO("M " << M << " N " << sh.first << " KC " << sh.second << (dual ? " SwiGLU" : ""));
          const WgPlan with = plan_wgmma(M, sh.first, sh.second, dual, w, lone),
                       without = plan_wgmma(M, sh.first, sh.second, dual, w, dense);
          CHECK(with.per_sm == without.per_sm);
          CHECK(with.bt == without.bt);
          CHECK(with.ks == without.ks);
        }
    for (int64_t M : {17, 64, 100, 300})
      for (int64_t n : {int64_t(1024), int64_t(4096), int64_t(6144), int64_t(12288), int64_t(14336)})
        for (int kc : {16, 64, 192})
          for (bool dual : {false, true})
            CHECK(plan_wgmma(M, n, kc, dual, w, lone).t <= plan_wgmma(M, n, kc, dual, w, dense).t);
  }
}

TEST_CASE("kernel plan: the wgmma hybrid of whole waves and a split rest", "[plan]") {
  // 8B gate | up at 512 tokens: 2 x 224 blocks, 3.4 waves: 198 row blocks
  // (3 whole waves) unsplit, the other 26 split 2 ways.
  const WgPlan off = plan_wgmma(512, 14336, 64, true, kWave);
  const WgPlan on = plan_wgmma(512, 14336, 64, true, kWave, kHybrid);
  CHECK(off.head == 0);
  CHECK(on.head == 198);
  CHECK(on.bt == 256);
  CHECK(on.ks == 2);
  CHECK(on.t < off.t);
  // At 2048 tokens (13.6 waves) the uniform grid is as fast: no hybrid.
  CHECK(plan_wgmma(2048, 14336, 64, true, kWave, kHybrid).head == 0);
  // Below a wave: nothing to split off.
  CHECK(plan_wgmma(256, 4096, 64, false, kWave, kHybrid).head == 0);
  // Every shape: a head is whole waves of blocks inside the row blocks,
  // and never slower than the uniform plan.
  for (int64_t M : {17, 64, 128, 300, 512, 777, 1024, 2048, 4096, 8192})
    for (int64_t n : {int64_t(1024), int64_t(2048), int64_t(4096), int64_t(6144), int64_t(12288), int64_t(14336),
                      int64_t(151936)})
      for (int kc : {16, 48, 64, 224})
        for (bool dual : {false, true}) {
          const WgPlan u = plan_wgmma(M, n, kc, dual, kWave), h = plan_wgmma(M, n, kc, dual, kWave, kHybrid);
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

// The default PDL policy (kernels/pdl.h, QSP_PDL unset): decode-sized passes
// every family but the GEMMs and the GEMVs over 8 MB, longer passes every
// family; nested passes restore the outer one's; outside a pass and in a
// pass of several devices, none. No GPU needed (host logic).
TEST_CASE("kernel plan: the default PDL of a pass (PdlPass)", "[plan][pdl]") {
  using qsp::kern::PdlKernel;
  using qsp::kern::PdlPass;
  using qsp::kern::pdl_pass_mask;
  auto on = [](PdlKernel k) { return (pdl_pass_mask() >> int(k) & 1u) != 0; };
  CHECK(pdl_pass_mask() == 0u);
  {
    const PdlPass decode(1);
    for (PdlKernel k : {PdlKernel::kGemv, PdlKernel::kRmsnorm, PdlKernel::kQkRope, PdlKernel::kAttention,
                        PdlKernel::kAttnWgmma, PdlKernel::kCombine, PdlKernel::kEmbed, PdlKernel::kArgmax,
                        PdlKernel::kCopy})
      CHECK(on(k));
    for (PdlKernel k : {PdlKernel::kGemm, PdlKernel::kWgmma, PdlKernel::kGemvLarge}) CHECK_FALSE(on(k));
    {
      const PdlPass prompt(17);  // a prompt chunk: every family, the GEMMs too
      for (int k = 0; k < qsp::kern::kPdlFamilies; ++k) CHECK(on(PdlKernel(k)));
      const PdlPass chunk(2048);
      CHECK(on(PdlKernel::kWgmma));
    }
    CHECK_FALSE(on(PdlKernel::kWgmma));
    CHECK(on(PdlKernel::kGemv));
    const PdlPass sixteen(16);
    CHECK(on(PdlKernel::kAttention));
  }
  CHECK(pdl_pass_mask() == 0u);
  const PdlPass none(0);  // several devices: the backend passes 0
  CHECK(pdl_pass_mask() == 0u);
  CHECK(std::string(qsp::kern::pdl_name(PdlKernel::kGemvLarge)) == "gemv_large");
}
