// GEMM / GEMV (kern::gemm, every weight dtype, every epilogue, each kernel
// path forced, row groups) against the CPU backend's matmul (+ swiglu) on
// the same inputs; the comparison and its tolerance are in gemm_check.h.
// A case is one line of a table: weight dtype, N x K, token counts, paths.
#include "ops/gemm_check.h"

#include "kernels/launch_profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

using namespace qsp_test;
using qsp::kern::WFormat;

namespace {

constexpr GemmPath kAuto = GemmPath::kAuto, kMma = GemmPath::kMma, kWgmma = GemmPath::kWgmma,
                   kGemv = GemmPath::kGemv;

struct GemmCase {
  int32_t dtype;  // the GGUF dtype uploaded (BF16 / F32 become fp16 weights)
  int64_t N, K;
  std::vector<int> Ms;
  std::vector<GemmPath> paths;
};

// Runs every path of every case: a fresh (w = gate, w2 = up) pair per case,
// all epilogues for each M. kWgmma cases are skipped, loudly, where the
// sm_90a kernel cannot run (a Hopper GPU must run it).
void run_cases(const std::vector<GemmCase>& cases, uint64_t seed) {
  bool wg_checked = false, wg = false;
  for (const GemmCase& c : cases) {
    OpWeight w(c.dtype, c.N, c.K, seed++), w2(c.dtype, c.N, c.K, seed++);
    for (GemmPath p : c.paths) {
      if (p == kWgmma) {
        if (!wg_checked) {
          wg = gemm_wgmma_runs();
          wg_checked = true;
          if (device_major() == 9) CHECK(wg);  // a Hopper GPU must get the Hopper kernel
          if (!wg) std::printf("SKIPPED: wgmma GEMM path (needs sm_90a), the other paths still tested\n");
        }
        if (!wg) continue;
      }
      gemm_sweep(w, w2, c.Ms, seed++, p);
    }
  }
}

// M rows of x (row stride ldx) through w into out (fp32, row stride ldo).
template <class X>
GemmArgs f32_args(X x, int32_t ldx, int32_t M, const qsp::kern::DWeight& w, float* out, int32_t ldo) {
  GemmArgs g;
  g.x = x;
  g.ldx = ldx;
  g.M = M;
  g.w = w;
  g.ep = Epilogue::kStoreF32;
  g.out_f = out;
  g.ldo = ldo;
  return g;
}

const std::vector<int> kAllMs = {1, 2, 3, 7, 17, 100, 513, 2048};
const std::vector<int> kMidMs = {17, 100, 513};

}  // namespace

// Real layer shapes (Qwen3-0.6B: 1024 hidden, 3072 ffn) plus tile-edge ones:
// N not a multiple of 16 / 128 / 256, K a multiple of 32 but not of 64.
TEST_CASE("op gemm: Q4_0 / Q8_0 / F16, all epilogues, small and medium shapes", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  run_cases({
                {QSP_DTYPE_Q4_0, 1024, 1024, kAllMs, {kAuto}},
                {QSP_DTYPE_Q4_0, 3072, 1024, kAllMs, {kAuto}},
                {QSP_DTYPE_Q4_0, 1024, 3072, kAllMs, {kAuto}},
                {QSP_DTYPE_Q4_0, 96, 256, kAllMs, {kAuto}},
                {QSP_DTYPE_Q4_0, 40, 96, kAllMs, {kAuto}},
                {QSP_DTYPE_Q4_0, 1000, 160, kAllMs, {kAuto}},
                {QSP_DTYPE_Q8_0, 1024, 1024, kAllMs, {kAuto}},
                {QSP_DTYPE_Q8_0, 3072, 1024, kAllMs, {kAuto}},
                {QSP_DTYPE_Q8_0, 1024, 3072, kAllMs, {kAuto}},
                {QSP_DTYPE_Q8_0, 96, 256, kAllMs, {kAuto}},
                {QSP_DTYPE_Q8_0, 40, 96, kAllMs, {kAuto}},
                {QSP_DTYPE_Q8_0, 1000, 160, kAllMs, {kAuto}},
                {QSP_DTYPE_F16, 1024, 1024, kAllMs, {kAuto}},
                {QSP_DTYPE_F16, 3072, 1024, kAllMs, {kAuto}},
                {QSP_DTYPE_F16, 1024, 3072, kAllMs, {kAuto}},
                {QSP_DTYPE_BF16, 96, 256, kAllMs, {kAuto}},  // converted to fp16 at upload
                {QSP_DTYPE_F32, 40, 96, kAllMs, {kAuto}},    // converted to fp16 at upload
                {QSP_DTYPE_F16, 1000, 160, kAllMs, {kAuto}},
                {QSP_DTYPE_Q8_0, 1024, 2048, {1, 3, 17, 100, 513}, {kAuto}},  // Qwen3-0.6B o_proj
            },
            1);
}

// Qwen3-8B shapes: q/o 4096 x 4096, gate/up 12288 x 4096, down 4096 x 12288.
// M a few tokens past a multiple of the token tile (513, 2065, 2108) runs
// the tail as a GEMM of its own where the plan model says it pays.
TEST_CASE("op gemm: large prefill shapes", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  run_cases({
                {QSP_DTYPE_Q4_0, 4096, 4096, {1, 16, 2048, 2108}, {kAuto}},  // 2108: a ragged tail of 60
                {QSP_DTYPE_Q4_0, 12288, 4096, {7, 513, 2065}, {kAuto}},
                {QSP_DTYPE_Q8_0, 4096, 4096, {1, 16, 2048}, {kAuto}},
                {QSP_DTYPE_Q8_0, 12288, 4096, {7, 513}, {kAuto}},
                {QSP_DTYPE_F16, 4096, 4096, {1, 2048}, {kAuto}},
                {QSP_DTYPE_Q4_0, 4096, 12288, {3, 100}, {kAuto}},
            },
            100);
}

// Each kernel family forced on its own (kAuto above mixes them by shape):
// wgmma (sm_90a only) and mma.sync (what sm_80 / sm_89 run) where both can
// run, including partial tiles in every dimension and K ending half way
// through a 64-column chunk.
TEST_CASE("op gemm: wgmma and mma.sync paths, each forced", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  run_cases({
                {QSP_DTYPE_Q4_0, 4096, 4096, {17, 300, 2048}, {kWgmma, kMma}},
                {QSP_DTYPE_Q4_0, 1000, 160, kMidMs, {kWgmma, kMma}},
                {QSP_DTYPE_Q4_0, 96, 256, kMidMs, {kWgmma, kMma}},
                {QSP_DTYPE_Q4_0, 40, 96, kMidMs, {kWgmma, kMma}},
                {QSP_DTYPE_Q4_0, 3072, 1024, kMidMs, {kWgmma, kMma}},
                {QSP_DTYPE_Q8_0, 4096, 4096, {17, 300, 2048}, {kWgmma, kMma}},
                {QSP_DTYPE_Q8_0, 1000, 160, kMidMs, {kWgmma, kMma}},
                {QSP_DTYPE_Q8_0, 96, 256, kMidMs, {kWgmma, kMma}},
                {QSP_DTYPE_Q8_0, 40, 96, kMidMs, {kWgmma, kMma}},
                {QSP_DTYPE_Q8_0, 3072, 1024, kMidMs, {kWgmma, kMma}},
            },
            500);
  // What the wgmma path refuses: fp16 weights and M <= 16 (the GEMV's).
  OpWeight wf(QSP_DTYPE_F16, 128, 64, 9);
  OpActs x(32, 64, 64, 10);
  DevBuf out(size_t(32) * 128 * 4);
  GemmArgs a = forced_wgmma(wf, x, out.as<float>());
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorNotSupported);
  OpWeight wq(QSP_DTYPE_Q4_0, 128, 64, 11);
  a.w = wq.dw;
  a.M = 16;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorNotSupported);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

namespace {
// Q | K | V (64 + 16 + 16 rows) and gate | up (96 rows each) of K columns:
// the decode step's two GEMVs that may form their input's norm.
struct DecodeWeights {
  static constexpr int64_t kN = 96;
  OpWeight wq, wk, wv, gate, up;
  DecodeWeights(int32_t dt, int64_t K, uint64_t& seed)
      : wq(dt, 64, K, seed), wk(dt, 16, K, seed + 1), wv(dt, 16, K, seed + 2), gate(dt, kN, K, seed + 3),
        up(dt, kN, K, seed + 4) {
    seed += 5;
  }
  // g's weights and epilogue: gate | up with SwiGLU, or Q | K | V to fp32
  // (groups: as one row group; else Q alone).
  void into(GemmArgs& g, bool swiglu, bool groups) const {
    if (swiglu) {
      g.w = gate.dw;
      g.w2 = up.dw;
      g.ep = Epilogue::kSwiGLU;
    } else {
      g.w = wq.dw;
      if (groups) {
        g.wcat[0] = wk.dw;
        g.wcat[1] = wv.dw;
      }
      g.ep = Epilogue::kStoreF32;
    }
  }
};

// g's output into out, fp16 (half) or fp32.
void point_out(GemmArgs& g, DevBuf& out, bool half) {
  if (half)
    g.out_h = out.as<__half>();
  else
    g.out_f = out.as<float>();
}

// The decode step's six uses of the integer GEMV on DecodeWeights of K
// columns, v = 0..5: Q | K | V (a row group, fp32 out) and gate | up
// (SwiGLU) from x, the same two from the RMSNorm of a residual, the
// residual add and fp16 out, from x.
struct DecodeUses {
  static constexpr int kUses = 6;
  int64_t K;
  DecodeWeights dw;
  std::vector<float> nw, resid, init;
  DevBuf dnw, dres;
  OpActs x;
  DecodeUses(int32_t dt, int64_t k, uint64_t& seed)
      : K(k), dw(dt, k, seed), nw(size_t(k)), resid(size_t(k)), init(size_t(DecodeWeights::kN)),
        dnw(size_t(k) * 4), dres(size_t(k) * 4), x(1, int(k), int(k), seed + 1) {
    Rng rng(seed);
    seed += 2;
    for (float& v : nw) v = 1.0f + 0.3f * rng.normal();
    for (float& v : resid) v = 3.0f * rng.normal();
    for (float& v : init) v = rng.normal();
    dnw.upload(nw);
    dres.upload(resid);
  }
  static bool half_out(int v) { return v == 1 || v == 3 || v == 5; }
  // Use v's arguments on the integer GEMV, the output not yet pointed at.
  GemmArgs args(int v) const {
    const bool swiglu = v == 1 || v == 3, norm = v == 2 || v == 3;
    GemmArgs g;
    g.M = 1;
    g.gemv_i8 = qsp::kern::GemvI8::kOn;
    dw.into(g, swiglu, true);
    if (v == 4) g.ep = Epilogue::kAddF32;
    if (v == 5) g.ep = Epilogue::kStoreF16;
    if (norm) {
      g.norm_in_x = dres.as<float>();
      g.norm_in_ldx = int32_t(K);
      g.norm_in_w = dnw.as<float>();
      g.norm_in_eps = 1e-6f;
    } else {
      g.x = x.ptr();
      g.ldx = int32_t(K);
    }
    g.ldo = int32_t(DecodeWeights::kN);
    return g;
  }
  // out ready for use v: the residual add's starting values, else poison.
  void prime(DevBuf& out, int v) const {
    if (v == 4)
      out.upload(init);
    else
      out.poison();
  }
};
}  // namespace

// GemmArgs::norm_in_*: the GEMV forms its input's RMSNorm in its prologue
// (the decode step's QSP_NORM_IN). Its outputs must equal rmsnorm_f16 into
// x, then the same GEMV, bit for bit: each format family, Q | K | V as a
// row group (fp32 out) and gate | up (SwiGLU), M up to 8 and K from 256 to
// 8192 where M x K fits 16384, a residual of realistic scale with a strided
// row and a K that is not a multiple of 64 (Q4_0: 1056); refused where it
// does not apply.
TEST_CASE("op gemm: the GEMV that forms its input's RMSNorm equals rmsnorm + GEMV", "[gpu][gemm][gemv][fuse]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 5400;
  struct Case {
    int32_t dt;
    int64_t K;
    std::vector<int> Ms;
  };
  const std::vector<Case> cases = {
      {QSP_DTYPE_Q4_0, 1024, {1, 3, 8}}, {QSP_DTYPE_Q4_0, 4096, {1, 4}}, {QSP_DTYPE_Q4_0, 1056, {1, 5}},
      {QSP_DTYPE_Q8_0, 4096, {1, 2}},    {QSP_DTYPE_Q4_K, 4096, {1}},    {QSP_DTYPE_Q4_K, 2048, {1, 8}},
      {QSP_DTYPE_Q6_K, 1024, {1, 7}},    {QSP_DTYPE_Q2_K, 8192, {1, 2}}, {QSP_DTYPE_Q5_0, 256, {1, 8}},
      {QSP_DTYPE_F16, 1024, {1, 3}},
  };
  for (const Case& c : cases) {
    const int64_t K = c.K, N = DecodeWeights::kN;
    const DecodeWeights dw(c.dt, K, seed);
    Rng rng(seed++);
    std::vector<float> nw(static_cast<size_t>(K));
    for (float& v : nw) v = 1.0f + 0.3f * rng.normal();
    DevBuf dnw(nw.size() * 4);
    dnw.upload(nw);
    for (int M : c.Ms) {
      REQUIRE(qsp::kern::gemm_norm_in_ok(M, int32_t(K)));
      const int64_t ld = K + 4;  // a strided residual
      std::vector<float> resid(size_t(M) * size_t(ld), 1e30f);
      for (int m = 0; m < M; ++m)
        for (int64_t i = 0; i < K; ++i) resid[size_t(m) * ld + i] = 3.0f * rng.normal();
      DevBuf dres(resid.size() * 4), xn(size_t(M) * size_t(K) * 2);
      dres.upload(resid);
      CUDA_REQUIRE(qsp::kern::rmsnorm_f16(dres.as<float>(), int32_t(ld), dnw.as<float>(), xn.as<__half>(), M,
                                          int32_t(K), 1e-6f, nullptr));
      for (const bool swiglu : {false, true}) {
        DevBuf o1(size_t(M) * N * 4), o2(size_t(M) * N * 4), o3(size_t(M) * N * 4), o4(size_t(M) * N * 4);
        o1.poison();
        o2.poison();
        o3.poison();
        o4.poison();
        const bool stage = qsp::kern::gemm_stage_x_ok(M, int32_t(K));
        GemmArgs g;
        // Blocks of 8 warps on every side: the norm-forming and staged GEMVs
        // never run the 16-warp kernel ($QSP_GEMV_I8_WIDE), whose sums are
        // ordered otherwise (its own test compares it with 8).
        g.gemv_i8_wide = qsp::kern::GemvI8Wide::kOff;
        // One gemm() into `out` with the activations read as `sx`.
        auto run_into = [&](DevBuf& out, qsp::kern::StageX sx) {
          point_out(g, out, swiglu);
          g.gemv_stage_x = sx;
          CUDA_REQUIRE(qsp::kern::gemm(g, nullptr));
        };
        g.x = xn.as<__half>();
        g.ldx = int32_t(K);
        g.M = M;
        dw.into(g, swiglu, c.dt != QSP_DTYPE_F16);  // fp16 weights are row-major: no row groups (Q alone then)
        g.ldo = int32_t(N);
        run_into(o1, qsp::kern::StageX::kOff);
        if (stage) run_into(o3, qsp::kern::StageX::kOn);  // the activations staged: the same bits
        g.x = nullptr;
        g.ldx = 0;
        g.norm_in_x = dres.as<float>();
        g.norm_in_ldx = int32_t(ld);
        g.norm_in_w = dnw.as<float>();
        g.norm_in_eps = 1e-6f;
        run_into(o2, qsp::kern::StageX::kOff);
        if (stage) run_into(o4, qsp::kern::StageX::kOn);  // the norm into the staged layout
        CUDA_REQUIRE(cudaDeviceSynchronize());
        const size_t n = size_t(M) * N * (swiglu ? 2 : 4);
        const std::vector<uint8_t> b1 = o1.download<uint8_t>();
        INFO(qsp_dtype_name(c.dt) << " K=" << K << " M=" << M << (swiglu ? " gate|up" : " q|k|v"));
        for (const DevBuf* o : {&o2, &o3, &o4}) {
          if (o != &o2 && !stage) continue;
          const std::vector<uint8_t> b = o->download<uint8_t>();
          size_t diff = 0;
          for (size_t i = 0; i < n; ++i) diff += b1[i] != b[i];
          INFO((o == &o2 ? "norm in prologue" : o == &o3 ? "staged x" : "norm in prologue, staged"));
          CHECK(diff == 0);
        }
      }
    }
  }
  // Where it does not apply: M > 8, M x K > 16384, K % 4, the mma / wgmma
  // paths, no norm weights, a misaligned row stride, the residual epilogue.
  CHECK_FALSE(qsp::kern::gemm_norm_in_ok(9, 256));
  CHECK_FALSE(qsp::kern::gemm_norm_in_ok(5, 4096));
  CHECK_FALSE(qsp::kern::gemm_norm_in_ok(1, 16384));
  CHECK_FALSE(qsp::kern::gemm_norm_in_ok(1, 1022));
  OpWeight w(QSP_DTYPE_Q4_0, 64, 256, 1);
  DevBuf res(size_t(16) * 256 * 4), out(size_t(16) * 64 * 4), nw(256 * 4);
  GemmArgs g;
  g.M = 9;
  g.w = w.dw;
  g.ep = Epilogue::kStoreF32;
  g.out_f = out.as<float>();
  g.ldo = 64;
  g.norm_in_x = res.as<float>();
  g.norm_in_ldx = 256;
  g.norm_in_w = nw.as<float>();
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.M = 2;
  g.path = kMma;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.path = kAuto;
  g.norm_in_ldx = 258;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.norm_in_ldx = 256;
  g.norm_in_w = nullptr;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.norm_in_w = nw.as<float>();
  g.ep = Epilogue::kAddF32;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);  // kAddF32: not a prologue epilogue
  g.ep = Epilogue::kStoreF32;
  CUDA_REQUIRE(qsp::kern::gemm(g, nullptr));  // and the valid form runs
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

// GemmArgs::gemv_stage_x = kOn: the GEMV's activations staged in shared
// memory in the fragments' order ($QSP_GEMV_XSMEM) give the same bits as
// the loads per fragment, on every epilogue, M up to 8, K up to 16384 (the
// 8B down projection at M = 1) and a K that is not a multiple of 64; kOn
// where it cannot apply is refused.
TEST_CASE("op gemm: the GEMV's staged activations equal its fragment loads", "[gpu][gemm][gemv]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 5500;
  struct Case {
    int32_t dt;
    int M;
    int64_t K;
  };
  const std::vector<Case> cases = {{QSP_DTYPE_Q4_0, 1, 14336}, {QSP_DTYPE_Q4_0, 3, 4096}, {QSP_DTYPE_Q4_0, 8, 1056},
                                   {QSP_DTYPE_Q4_K, 1, 14336}, {QSP_DTYPE_Q6_K, 5, 3072}, {QSP_DTYPE_Q8_0, 8, 2048},
                                   {QSP_DTYPE_Q3_K, 2, 4096},  {QSP_DTYPE_F16, 4, 1024}};
  for (const Case& c : cases) {
    const int64_t N = 80;
    OpWeight w(c.dt, N, c.K, seed++);
    OpActs x(c.M, int(c.K), int(c.K) + 8, seed++);
    REQUIRE(qsp::kern::gemm_stage_x_ok(c.M, int32_t(c.K)));
    for (Epilogue ep : {Epilogue::kStoreF16, Epilogue::kStoreF32, Epilogue::kAddF32}) {
      std::vector<float> init(size_t(c.M) * N);
      Rng rng(seed++);
      for (float& v : init) v = rng.normal();
      std::vector<std::vector<uint8_t>> got;
      for (qsp::kern::StageX sx : {qsp::kern::StageX::kOff, qsp::kern::StageX::kOn}) {
        DevBuf out(init.size() * 4);
        out.upload(init);
        GemmArgs g;
        g.x = x.ptr();
        g.ldx = int32_t(c.K) + 8;
        g.M = c.M;
        g.w = w.dw;
        g.ep = ep;
        if (ep == Epilogue::kStoreF16)
          g.out_h = out.as<__half>();
        else
          g.out_f = out.as<float>();
        g.ldo = int32_t(N);
        g.gemv_stage_x = sx;
        CUDA_REQUIRE(qsp::kern::gemm(g, nullptr));
        CUDA_REQUIRE(cudaDeviceSynchronize());
        got.push_back(out.download<uint8_t>());
      }
      size_t diff = 0;
      for (size_t i = 0; i < got[0].size(); ++i) diff += got[0][i] != got[1][i];
      INFO(qsp_dtype_name(c.dt) << " M=" << c.M << " K=" << c.K << " epilogue " << int(ep));
      CHECK(diff == 0);
    }
  }
  CHECK_FALSE(qsp::kern::gemm_stage_x_ok(9, 256));
  CHECK_FALSE(qsp::kern::gemm_stage_x_ok(2, 16384));
  CHECK_FALSE(qsp::kern::gemm_stage_x_ok(1, 1020));
  OpWeight w(QSP_DTYPE_Q4_0, 64, 256, 1);
  OpActs x(16, 256, 256, 2);
  DevBuf out(size_t(16) * 64 * 4);
  GemmArgs g = f32_args(x.ptr(), 256, 9, w.dw, out.as<float>(), 64);
  g.gemv_stage_x = qsp::kern::StageX::kOn;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.M = 8;
  g.gemv_stage_x = static_cast<qsp::kern::StageX>(7);
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaGetLastError());
}

// Small enough for compute-sanitizer's racecheck: the GEMV (M <= 8 and
// <= 16), mma.sync (cluster split-K where the plan takes it) and wgmma
// (every token tile, K split), every epilogue, Q4_0 / Q8_0 / F16.
TEST_CASE("op gemm: every kernel path on small shapes", "[gpu][gemm][sanitize]") {
  QSP_REQUIRE_GPU();
  run_cases({
                {QSP_DTYPE_Q4_0, 256, 256, {1, 9, 40, 300}, {kAuto}},
                {QSP_DTYPE_Q4_0, 256, 256, {40, 300}, {kMma, kWgmma}},
                {QSP_DTYPE_Q8_0, 256, 256, {1, 9, 40, 300}, {kAuto}},
                {QSP_DTYPE_Q8_0, 256, 256, {40, 300}, {kMma, kWgmma}},
                {QSP_DTYPE_F16, 256, 256, {1, 9, 40, 300}, {kAuto}},
            },
            700);
  // The wgmma kernel's cluster split-K (K = 512: 8 chunks, 1 per rank at 8
  // splits).
  if (gemm_wgmma_runs()) {
    OpWeight w(QSP_DTYPE_Q4_0, 256, 512, 720), w2(QSP_DTYPE_Q4_0, 256, 512, 721);
    gemm_sweep(w, w2, {40}, 722, kWgmma, {128, 256}, {2, 8});
  }
}

// The integer GEMV of one token (GemvI8, kernels/gemv_i8.cuh: the default
// for M = 1 where a format has it) and the fp16 GEMV it replaces, each
// forced, against the CPU on every epilogue: 8B and 0.6B shapes, tile edges
// (N % 16 != 0, Q4_0's K % 256 != 0: a last group of fewer than 4 chunks),
// a long K. Then what it refuses: M != 1, formats without it, a forced GEMM
// path.
namespace {
void gemv_i8_cases(const std::vector<std::array<int64_t, 3>>& cases, uint64_t seed) {
  for (const auto& c : cases) {
    const int32_t dt = int32_t(c[0]);
    OpWeight w(dt, c[1], c[2], seed++), w2(dt, c[1], c[2], seed++);
    REQUIRE(qsp::kern::gemm_gemv_i8_ok(w.dw.fmt, 1));
    OpActs x(1, int(c[2]), int(c[2]), seed++);
    const std::vector<int> rows = sample_rows(1);
    const std::vector<float> ref = cpu_matmul(w, x, rows), ref2 = cpu_matmul(w2, x, rows);
    int v = 0;
    for (Epilogue ep : {Epilogue::kStoreF16, Epilogue::kStoreF32, Epilogue::kAddF32, Epilogue::kSwiGLU})
      for (qsp::kern::GemvI8 mode : {qsp::kern::GemvI8::kOn, qsp::kern::GemvI8::kOff}) {
        const int pad = v % 3 == 0 ? 0 : v % 3 == 1 ? 8 : 1;
        ++v;
        check_gemm(w, &w2, x, ep, int(w.N) + pad, rows, ref, &ref2, seed + v, kAuto, nullptr, nullptr, 0, 0,
                   qsp::kern::WgmmaWeights::kAuto, 0, 0, mode);
      }
  }
}
}  // namespace

TEST_CASE("op gemm: the integer GEMV of one token, every format it serves", "[gpu][gemm][gemv][i8]") {
  QSP_REQUIRE_GPU();
  std::vector<std::array<int64_t, 3>> cases;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q4_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K,
                     QSP_DTYPE_Q8_0, QSP_DTYPE_Q5_0, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_1}) {
    cases.push_back({dt, 4096, 4096});  // Qwen3-8B q / o
    cases.push_back({dt, 1000, 1024});  // N % 16 != 0, 0.6B K
    cases.push_back({dt, 1024, 3072});  // Qwen3-0.6B down
    cases.push_back({dt, 136, 12288});  // a long K (8B down's), few tiles
  }
  cases.push_back({QSP_DTYPE_Q4_0, 200, 4160});  // K % 256 == 64: the last group one chunk
  cases.push_back({QSP_DTYPE_Q4_0, 24, 96});     // K % 64 == 32: a half chunk
  cases.push_back({QSP_DTYPE_Q8_0, 24, 96});
  cases.push_back({QSP_DTYPE_Q8_0, 200, 4160});
  gemv_i8_cases(cases, 8100);

  OpWeight none(QSP_DTYPE_F16, 64, 256, 8200), q4(QSP_DTYPE_Q4_0, 64, 256, 8201);  // none: a format without it
  CHECK_FALSE(qsp::kern::gemm_gemv_i8_ok(none.dw.fmt, 1));
  CHECK_FALSE(qsp::kern::gemm_gemv_i8_ok(q4.dw.fmt, 2));
  DevBuf out(size_t(4) * 64 * 4);
  for (int M : {1, 2}) {
    OpActs x(M, 256, 256, 8202);
    GemmArgs g = f32_args(x.ptr(), 256, M, (M == 1 ? none : q4).dw, out.as<float>(), 64);
    g.gemv_i8 = qsp::kern::GemvI8::kOn;
    CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorNotSupported);
  }
  {
    OpActs x(1, 256, 256, 8203);
    GemmArgs g = f32_args(x.ptr(), 256, 1, q4.dw, out.as<float>(), 64);
    g.gemv_i8 = qsp::kern::GemvI8::kOn;
    g.path = kMma;
    CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorNotSupported);
    g.path = kAuto;
    g.gemv_i8 = static_cast<qsp::kern::GemvI8>(9);
    CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  }
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

// Small shapes of the same, for the sanitizers.
// GemmArgs::i8_stage: the integer GEMV's activations formed once by a small
// kernel (the prologue norm's too) and copied by every block must give the
// bits of every block forming them itself (GemvI8Stage::kOn against kOff):
// every format it serves, Q | K | V as a row group (fp32 out) and gate | up
// (SwiGLU) from x and from the norm of a residual, the residual add and fp16
// out from x, K with a partial last group where the format allows one.
// Refused: kOn without a workspace, or one too small.
TEST_CASE("op gemm: the integer GEMV's activations formed once equal each block's own", "[gpu][gemm][gemv][i8]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 8400;
  std::vector<std::pair<int32_t, int64_t>> cases;  // dtype, K
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q4_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K,
                     QSP_DTYPE_Q8_0, QSP_DTYPE_Q5_0, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_1})
    cases.emplace_back(dt, 4096);
  cases.emplace_back(QSP_DTYPE_Q4_0, 1056);  // a last group of one and a half chunks
  cases.emplace_back(QSP_DTYPE_Q8_0, 8192);
  cases.emplace_back(QSP_DTYPE_Q2_K, 256);
  for (const auto& [dt, K] : cases) {
    const int64_t N = DecodeWeights::kN;
    const DecodeUses uses(dt, K, seed);
    DevBuf ws(qsp::kern::gemm_i8_stage_bytes(K));
    ws.poison();
    for (int v = 0; v < DecodeUses::kUses; ++v) {
      GemmArgs g = uses.args(v);
      g.i8_stage = ws.p;
      g.i8_stage_bytes = ws.bytes;
      g.gemv_i8_wide = qsp::kern::GemvI8Wide::kOff;  // as above: the staged kernel is never the 16-warp one
      DevBuf o1(size_t(N) * 4), o2(size_t(N) * 4);
      const bool half_out = DecodeUses::half_out(v);
      auto run_into = [&](DevBuf& out, qsp::kern::GemvI8Stage mode) {
        uses.prime(out, v);
        point_out(g, out, half_out);
        g.gemv_i8_stage = mode;
        CUDA_REQUIRE(qsp::kern::gemm(g, nullptr));
      };
      run_into(o1, qsp::kern::GemvI8Stage::kOff);
      run_into(o2, qsp::kern::GemvI8Stage::kOn);
      CUDA_REQUIRE(cudaDeviceSynchronize());
      const std::vector<uint8_t> b1 = o1.download<uint8_t>(), b2 = o2.download<uint8_t>();
      const size_t n = size_t(N) * (half_out ? 2 : 4);
      size_t diff = 0;
      for (size_t i = 0; i < n; ++i) diff += b1[i] != b2[i];
      INFO(qsp_dtype_name(dt) << " K=" << K << " variant " << v);
      CHECK(diff == 0);
    }
  }
  // kOn without a workspace, or with one too small: refused, nothing launched.
  OpWeight w(QSP_DTYPE_Q4_0, 64, 1024, 8490);
  OpActs x(1, 1024, 1024, 8491);
  DevBuf out(64 * 4), small(qsp::kern::gemm_i8_stage_bytes(1024) - 16);
  GemmArgs g = f32_args(x.ptr(), 1024, 1, w.dw, out.as<float>(), 64);
  g.gemv_i8 = qsp::kern::GemvI8::kOn;
  g.gemv_i8_stage = qsp::kern::GemvI8Stage::kOn;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.i8_stage = small.p;
  g.i8_stage_bytes = small.bytes;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaGetLastError());
}

// GemmArgs::gemv_i8_wide: the integer GEMV in blocks of up to 16 warps
// (GemvI8Wide::kOn) against 8 (kOff), on the same data: within fp32
// rounding of the order of the warps' sums (fp16 out: one rounding step),
// and the launch's block size as asked (the launch profiler's record).
// Every integer format on 9 to 56 groups (a last group of one chunk: Q4_0
// at 4160), the three epilogues it serves; where it does not apply
// (SwiGLU, 8 groups or fewer) kOn runs the 8-warp kernel: the same bits.
TEST_CASE("op gemm: the integer GEMV in blocks of 16 warps equals 8", "[gpu][gemm][gemv][i8]") {
  QSP_REQUIRE_GPU();
  namespace prof = qsp::kern::prof;
  uint64_t seed = 8600;
  const struct {
    int32_t dt;
    int64_t N, K;
  } cases[] = {
      {QSP_DTYPE_Q4_0, 4096, 4096},  {QSP_DTYPE_Q4_0, 200, 14336}, {QSP_DTYPE_Q4_0, 136, 4160},
      {QSP_DTYPE_Q4_0, 40, 2304},    {QSP_DTYPE_Q2_K, 1000, 4096}, {QSP_DTYPE_Q2_K, 136, 12288},
      {QSP_DTYPE_Q3_K, 1024, 3072},  {QSP_DTYPE_Q3_K, 136, 14336}, {QSP_DTYPE_Q4_K, 256, 4096},
      {QSP_DTYPE_Q5_K, 136, 12288},  {QSP_DTYPE_Q6_K, 1024, 4096}, {QSP_DTYPE_Q6_K, 136, 12288},
      {QSP_DTYPE_Q8_0, 4096, 4096},  {QSP_DTYPE_Q8_0, 136, 4160},  {QSP_DTYPE_Q4_1, 200, 2304},
      {QSP_DTYPE_Q5_0, 136, 4096},   {QSP_DTYPE_Q5_1, 136, 3072},
      {QSP_DTYPE_Q4_0, 64, 2048},  // 8 groups: not wide
  };
  for (const auto& c : cases) {
    OpWeight w(c.dt, c.N, c.K, seed), w2(c.dt, c.N, c.K, seed + 1);
    OpActs x(1, int(c.K), int(c.K), seed + 2);
    seed += 3;
    const int groups = int((c.K + 255) / 256);
    const bool wide = groups > 8;
    std::vector<float> init(size_t(c.N));
    Rng rng(seed++);
    for (float& v : init) v = 2.0f * rng.normal();
    for (Epilogue ep : {Epilogue::kStoreF16, Epilogue::kStoreF32, Epilogue::kAddF32, Epilogue::kSwiGLU}) {
      const bool half = ep == Epilogue::kStoreF16 || ep == Epilogue::kSwiGLU;
      DevBuf o[2] = {DevBuf(size_t(c.N) * 4), DevBuf(size_t(c.N) * 4)};
      int block[2] = {0, 0};
      for (int i = 0; i < 2; ++i) {
        GemmArgs g = f32_args(x.ptr(), int32_t(c.K), 1, w.dw, nullptr, int32_t(c.N));
        g.ep = ep;
        if (ep == Epilogue::kSwiGLU) g.w2 = w2.dw;
        point_out(g, o[i], half);
        g.gemv_i8 = qsp::kern::GemvI8::kOn;
        g.gemv_i8_wide = i ? qsp::kern::GemvI8Wide::kOn : qsp::kern::GemvI8Wide::kOff;
        if (ep == Epilogue::kAddF32)
          o[i].upload(init);
        else
          o[i].poison();
        prof::start();
        CUDA_REQUIRE(qsp::kern::gemm(g, nullptr));
        const std::vector<prof::Row> rows = prof::stop();
        REQUIRE(rows.size() == 1);
        block[i] = int(rows[0].block.x);
      }
      INFO(qsp_dtype_name(c.dt) << " " << c.N << "x" << c.K << " epilogue " << int(ep));
      const int want = 32 * std::min(groups, wide && ep != Epilogue::kSwiGLU ? 16 : 8);
      CHECK(block[0] == 32 * std::min(groups, 8));
      CHECK(block[1] == want);
      std::vector<float> a, b;
      if (half) {
        for (const __half& h : o[0].download<__half>()) a.push_back(__half2float(h));
        for (const __half& h : o[1].download<__half>()) b.push_back(__half2float(h));
        a.resize(size_t(c.N)), b.resize(size_t(c.N));
      } else {
        a = o[0].download<float>(), b = o[1].download<float>();
      }
      double amax = 0.0;
      for (float v : a) amax = std::max(amax, double(std::fabs(v)));
      REQUIRE(amax > 0.0);
      size_t bad = 0, diff = 0;
      for (size_t i = 0; i < size_t(c.N); ++i) {
        REQUIRE(std::isfinite(a[i]));
        diff += a[i] != b[i];
        const double d = std::fabs(double(a[i]) - double(b[i]));
        if (d > (half ? 1e-3 * std::fabs(double(a[i])) : 0.0) + 2e-6 * amax) ++bad;
      }
      CHECK(bad == 0);
      if (block[0] == block[1]) CHECK(diff == 0);  // the same kernel: the same bits
    }
  }
  OpWeight w(QSP_DTYPE_Q4_0, 64, 256, 8690);
  OpActs x(1, 256, 256, 8691);
  DevBuf out(64 * 4);
  GemmArgs g = f32_args(x.ptr(), 256, 1, w.dw, out.as<float>(), 64);
  g.gemv_i8_wide = static_cast<qsp::kern::GemvI8Wide>(7);
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

TEST_CASE("op gemm: the integer GEMV on small shapes", "[gpu][gemm][gemv][i8][sanitize]") {
  QSP_REQUIRE_GPU();
  gemv_i8_cases({{QSP_DTYPE_Q4_0, 40, 96},
                 {QSP_DTYPE_Q4_0, 33, 320},
                 {QSP_DTYPE_Q4_K, 40, 512},
                 {QSP_DTYPE_Q2_K, 17, 256},
                 {QSP_DTYPE_Q3_K, 40, 768},
                 {QSP_DTYPE_Q5_K, 24, 256},
                 {QSP_DTYPE_Q6_K, 40, 512},
                 {QSP_DTYPE_Q8_0, 40, 96},
                 {QSP_DTYPE_Q8_0, 24, 320},
                 {QSP_DTYPE_Q5_0, 24, 96},
                 {QSP_DTYPE_Q4_1, 17, 320},
                 {QSP_DTYPE_Q5_1, 40, 256}},
                8300);
}

// The K-quants (Q4_K, Q5_K, Q6_K: K a multiple of 256) on every path: the
// GEMV for every M <= 16, then odd M on auto, mma.sync and wgmma forced,
// on Qwen3-8B and -0.6B shapes and on tile edges (N not a multiple of 16 /
// 128). Q4_K_M files hold Q4_K and Q6_K (ffn_down, LM head), Q5_K_M Q5_K
// and Q6_K. One test case per format: the parallel GPU runner spreads the
// host-side reference quantizing, which is the cost.
namespace {
void kquant_every_path(int32_t dt) {
  std::vector<int> gemv_ms;
  for (int m = 1; m <= 16; ++m) gemv_ms.push_back(m);
  const std::vector<int> odd = {3, 17, 100, 513};
  std::vector<GemmCase> cases;
  cases.push_back({dt, 1024, 1024, gemv_ms, {kAuto}});  // GEMV, M = 1 .. 16
  // N x K, then the M of the automatic choice (odd, GEMV and GEMM) and of
  // the forced GEMM paths (M > 16: the GEMV's range is not theirs).
  const struct {
    int64_t N, K;
    std::vector<int> auto_ms, forced_ms;
  } shapes[] = {
      {1000, 256, odd, kMidMs},             // one super-block per row, N % 16 != 0
      {40, 512, odd, kMidMs},               // N < one block's rows
      {2048, 1024, odd, kMidMs},            // Qwen3-0.6B q_proj
      {1024, 2048, odd, kMidMs},            // Qwen3-0.6B o_proj
      {3072, 1024, odd, kMidMs},            // Qwen3-0.6B gate / up
      {1024, 3072, odd, kMidMs},            // Qwen3-0.6B down
      {4096, 4096, {1, 16, 17, 2048}, {17, 2048}},  // Qwen3-8B q / o
      {12288, 4096, {7, 513}, {}},          // Qwen3-8B gate / up (quantizing it is the cost)
      {4096, 12288, {3, 100}, {}},          // Qwen3-8B down
      {256, 256, {1, 9, 40, 300}, {40, 300}},  // small: every kernel (sanitizer size)
  };
  for (const auto& sh : shapes) {
    cases.push_back({dt, sh.N, sh.K, sh.auto_ms, {kAuto}});
    if (!sh.forced_ms.empty()) cases.push_back({dt, sh.N, sh.K, sh.forced_ms, {kMma, kWgmma}});
  }
  run_cases(cases, 1500 + uint64_t(dt) * 100);
}
}  // namespace

TEST_CASE("op gemm: Q4_K on every path", "[gpu][gemm][wgmma][kquant]") {
  QSP_REQUIRE_GPU();
  kquant_every_path(QSP_DTYPE_Q4_K);
}
TEST_CASE("op gemm: Q5_K on every path", "[gpu][gemm][wgmma][kquant]") {
  QSP_REQUIRE_GPU();
  kquant_every_path(QSP_DTYPE_Q5_K);
}
TEST_CASE("op gemm: Q6_K on every path", "[gpu][gemm][wgmma][kquant]") {
  QSP_REQUIRE_GPU();
  kquant_every_path(QSP_DTYPE_Q6_K);
}

TEST_CASE("op gemm: K-quants need K a multiple of 256", "[gpu][gemm][kquant]") {
  QSP_REQUIRE_GPU();
  const char* why = nullptr;
  for (WFormat f : {WFormat::kQ4_K, WFormat::kQ5_K, WFormat::kQ6_K}) {
    CHECK_FALSE(qsp::kern::gemm_supported(f, 64, 96, &why));
    CHECK_FALSE(qsp::kern::gemm_supported(f, 64, 320, &why));
    REQUIRE(why != nullptr);
    CHECK(std::string(why).find("256") != std::string::npos);
    CHECK(qsp::kern::gemm_supported(f, 64, 512, &why));
  }
}

// Q, K and V of Q4_K in one launch (the Q4_K_M attention projections).
TEST_CASE("op gemm: K-quant row groups", "[gpu][gemm][wgmma][kquant]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 1900;
  const bool wg = gemm_wgmma_runs();
  for (int32_t dt : {QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K}) {
    OpWeight wq(dt, 2048, 1024, seed++), wk(dt, 1024, 1024, seed++), wv(dt, 1024, 1024, seed++);
    const int64_t N = 4096;
    for (int M : {1, 7, 100}) {
      OpActs x(M, 1024, 1024, seed++);
      const std::vector<int> rows = sample_rows(M);
      const std::vector<float> ref = group_ref(wq, wk, &wv, x, rows);
      std::vector<GemmPath> paths = {kAuto};
      if (M > 16) paths.push_back(kMma);
      if (M > 16 && wg) paths.push_back(kWgmma);
      for (GemmPath p : paths) check_gemm(wq, nullptr, x, Epilogue::kStoreF32, int(N), rows, ref, nullptr, seed++, p, &wk, &wv);
    }
  }
}

// ---- Q4_1, Q5_0, Q5_1 (legacy 32-blocks with a min or a fifth bit) and Q2_K,
// Q3_K (256 super-blocks): every path. GEMV M = 1..16, odd M, real
// Qwen3-0.6B / 8B shapes, K a multiple of 32 but not 64 (legacy); mma.sync
// and wgmma forced (M > 16: forced wgmma refuses the GEMV's M). llama-quantize
// writes the legacy ones for rows that are not a multiple of 256.
namespace {

std::vector<GemmCase> more_format_cases(int32_t dt, bool legacy, bool wgmma) {
  const std::vector<int> gemv_ms = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const std::vector<int> odd_ms = {3, 17, 100, 513};
  const std::vector<GemmPath> forced = wgmma ? std::vector<GemmPath>{kMma, kWgmma} : std::vector<GemmPath>{kMma};
  std::vector<GemmCase> c = {
      {dt, 1024, 1024, gemv_ms, {kAuto}},          // GEMV, M = 1..16 (Qwen3-0.6B q / o)
      {dt, 3072, 1024, odd_ms, {kAuto}},           // Qwen3-0.6B gate / up
      {dt, 3072, 1024, kMidMs, forced},
      {dt, 1024, 3072, {1, 17, 513}, {kAuto}},     // Qwen3-0.6B down
      {dt, 4096, 4096, {1, 16, 300, 2048}, {kAuto}},  // Qwen3-8B q / o
      {dt, 4096, 4096, {17, 2048}, forced},
      {dt, 12288, 4096, {7, 513}, {kAuto}},        // Qwen3-8B gate / up
      {dt, 4096, 12288, {3, 100}, {kAuto}},        // Qwen3-8B down
      {dt, 256, 256, {1, 9, 40, 300}, {kAuto}},    // small enough for the sanitizers
      {dt, 256, 256, {40, 300}, forced},
      {dt, 40, 512, odd_ms, {kAuto}},              // N not a multiple of 16
      {dt, 40, 512, kMidMs, forced},
  };
  if (legacy) {  // K % 64 == 32, partial tiles in every dimension
    const std::vector<GemmCase> l = {
        {dt, 1000, 160, kAllMs, {kAuto}}, {dt, 1000, 160, kMidMs, forced},
        {dt, 40, 96, odd_ms, {kAuto}},    {dt, 40, 96, kMidMs, forced},
        {dt, 96, 256, kMidMs, forced},
    };
    c.insert(c.end(), l.begin(), l.end());
  }
  return c;
}

}  // namespace

TEST_CASE("op gemm: Q4_1 / Q5_0 / Q5_1, every path", "[gpu][gemm][wgmma][legacy]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 1500;
  for (int32_t dt : {QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1}) {
    INFO(qsp_dtype_name(dt));
    run_cases(more_format_cases(dt, true, true), seed);
    seed += 1000;
  }
}

// Q2_K and Q3_K apart: each ~30 s of reference quantizing, and the GPU suite
// runs its cases side by side (scripts/gpu-check), so no case should be long.
TEST_CASE("op gemm: Q2_K, every path", "[gpu][gemm][wgmma][kquant]") {
  QSP_REQUIRE_GPU();
  run_cases(more_format_cases(QSP_DTYPE_Q2_K, false, true), 5500);
}
TEST_CASE("op gemm: Q3_K, every path", "[gpu][gemm][wgmma][kquant]") {
  QSP_REQUIRE_GPU();
  run_cases(more_format_cases(QSP_DTYPE_Q3_K, false, true), 6500);
  // K must be whole 256-weight super-blocks.
  const char* why = nullptr;
  CHECK(!qsp::kern::gemm_supported(qsp::kern::format_for(QSP_DTYPE_Q2_K), 256, 96, &why));
  CHECK(std::string(why ? why : "").find("256") != std::string::npos);
  CHECK(!qsp::kern::gemm_supported(qsp::kern::format_for(QSP_DTYPE_Q3_K), 256, 256 + 128, &why));
}

namespace {

struct RowGroupCase {
  int32_t dtype;
  int64_t q, k, v, K;  // the three groups' rows, and K
};

}  // namespace

// Q, K and V as one launch (GemmArgs::wcat): the outputs are the three
// products side by side, on every kernel family.
TEST_CASE("op gemm: row groups (Q | K | V in one launch)", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  // Qwen3-8B and -0.6B projections, and a last group that ends mid-tile.
  const RowGroupCase cases[] = {
      {QSP_DTYPE_Q4_0, 4096, 1024, 1024, 4096}, {QSP_DTYPE_Q4_0, 2048, 1024, 1024, 1024},
      {QSP_DTYPE_Q4_0, 64, 32, 40, 160},        {QSP_DTYPE_Q8_0, 4096, 1024, 1024, 4096},
      {QSP_DTYPE_Q8_0, 2048, 1024, 1024, 1024}, {QSP_DTYPE_Q8_0, 64, 32, 40, 160},
      // Q4_1 / Q5_0 / Q5_1
      {QSP_DTYPE_Q4_1, 2048, 1024, 1024, 1024}, {QSP_DTYPE_Q5_0, 64, 32, 40, 160},
      {QSP_DTYPE_Q5_1, 4096, 1024, 1024, 4096},
      // Q2_K / Q3_K
      {QSP_DTYPE_Q2_K, 2048, 1024, 1024, 1024}, {QSP_DTYPE_Q3_K, 64, 32, 40, 256},
      {QSP_DTYPE_Q3_K, 4096, 1024, 1024, 4096},
  };
  uint64_t seed = 900;
  const bool wg = gemm_wgmma_runs();
  for (const RowGroupCase& c : cases) {
    OpWeight wq(c.dtype, c.q, c.K, seed++), wk(c.dtype, c.k, c.K, seed++), wv(c.dtype, c.v, c.K, seed++);
    const int64_t N = c.q + c.k + c.v;
    for (int M : {1, 7, 100, 2048}) {
      OpActs x(M, int(c.K), int(c.K), seed++);
      const std::vector<int> rows = sample_rows(M);
      const std::vector<float> ref = group_ref(wq, wk, &wv, x, rows);
      std::vector<GemmPath> paths = {kAuto};
      if (M > 16) paths.push_back(kMma);
      if (M > 16 && wg) paths.push_back(kWgmma);
      for (GemmPath p : paths) {
        check_gemm(wq, nullptr, x, Epilogue::kStoreF32, int(N) + 4, rows, ref, nullptr, seed++, p, &wk, &wv);
        check_gemm(wq, nullptr, x, Epilogue::kAddF32, int(N), rows, ref, nullptr, seed++, p, &wk, &wv);
      }
    }
  }
  // Two-member groups: Q | K of one format, V apart (the Q4_K_M layers whose
  // V is Q6_K run so, src/cuda/cuda_pass.cu), and K | V after a Q of another.
  const RowGroupCase pairs[] = {{QSP_DTYPE_Q4_K, 4096, 1024, 0, 4096}, {QSP_DTYPE_Q6_K, 2048, 1024, 0, 1024},
                                {QSP_DTYPE_Q4_0, 1024, 1024, 0, 1024}};
  for (const RowGroupCase& c : pairs) {
    OpWeight wq(c.dtype, c.q, c.K, seed++), wk(c.dtype, c.k, c.K, seed++);
    const int64_t N = c.q + c.k;
    for (int M : {1, 9, 100}) {
      OpActs x(M, int(c.K), int(c.K), seed++);
      const std::vector<int> rows = sample_rows(M);
      const std::vector<float> ref = group_ref(wq, wk, nullptr, x, rows);
      std::vector<GemmPath> paths = {kAuto};
      if (M > 16) paths.push_back(kMma);
      if (M > 16 && wg) paths.push_back(kWgmma);
      for (GemmPath p : paths) check_gemm(wq, nullptr, x, Epilogue::kStoreF32, int(N), rows, ref, nullptr, seed++, p, &wk);
    }
  }
  // A group whose first member is not a whole number of tiles is refused.
  OpWeight a(QSP_DTYPE_Q4_0, 40, 64, 1), b(QSP_DTYPE_Q4_0, 32, 64, 2), f(QSP_DTYPE_F16, 32, 64, 3);
  OpActs x(4, 64, 64, 4);
  DevBuf out(size_t(4) * 128 * 4);
  GemmArgs g = f32_args(x.ptr(), 64, 4, a.dw, out.as<float>(), 128);
  g.wcat[0] = b.dw;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.w = b.dw;
  g.wcat[0] = f.dw;  // another format
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.wcat[0] = a.dw;  // 32 + 40 rows: fine
  CUDA_REQUIRE(qsp::kern::gemm(g, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

TEST_CASE("op gemm: rejects unsupported input without launching", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  const char* why = nullptr;
  CHECK_FALSE(qsp::kern::gemm_supported(WFormat::kQ4_0, 64, 48, &why));
  CHECK(why != nullptr);
  CHECK_FALSE(qsp::kern::gemm_supported(WFormat::kQ8_0, 0, 64, &why));
  CHECK(qsp::kern::gemm_supported(WFormat::kF16, 96, 256, &why));

  OpWeight w(QSP_DTYPE_Q4_0, 64, 128, 7), w_other(QSP_DTYPE_Q4_0, 64, 256, 8);
  OpActs x(4, 128, 128, 9);
  DevBuf out(size_t(4) * 64 * 4);
  GemmArgs good = f32_args(x.ptr(), 128, 4, w.dw, out.as<float>(), 64);
  CUDA_REQUIRE(qsp::kern::gemm(good, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());

  std::vector<GemmArgs> bad(13, good);
  bad[0].M = 0;
  bad[1].x = nullptr;
  bad[2].ldx = 120;                         // < K
  bad[3].ldx = 132;                         // not a multiple of 8
  bad[4].ldo = 63;                          // < N
  bad[5].out_f = nullptr;                   // kStoreF32 without out_f
  bad[6].ep = Epilogue::kSwiGLU;            // no w2 (and no out_h)
  bad[6].out_h = out.as<__half>();
  bad[7] = bad[6];
  bad[7].w2 = w_other.dw;                   // w2 of another shape
  bad[8].w.cols = 48;                       // K not a multiple of 32
  bad[9].ep = static_cast<Epilogue>(7);
  bad[10].path = static_cast<GemmPath>(6);
  bad[11].path = static_cast<GemmPath>(4);  // unused (the bulk-copy GEMV's, removed)
  bad[12].path = static_cast<GemmPath>(5);  // unused (the wgmma overlapped decode's, removed)
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("bad case " << i);
    CHECK(qsp::kern::gemm(bad[i], nullptr) == cudaErrorInvalidValue);
  }
  // The GEMV forced: M <= 16 only (M = 17 is refused before any launch).
  GemmArgs gv = good;
  gv.path = kGemv;
  CUDA_REQUIRE(qsp::kern::gemm(gv, nullptr));
  gv.M = 17;
  CHECK(qsp::kern::gemm(gv, nullptr) == cudaErrorNotSupported);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}
