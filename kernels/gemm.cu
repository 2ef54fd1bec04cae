// Quantized GEMM / GEMV with fused epilogues: Y = X W^T, X fp16 [M][K],
// W [N][K] in the device layout of its format (kernels/formats/), fp32
// accumulation on tensor cores. This file validates the arguments and picks
// the kernel; the kernels are elsewhere:
//  1. GEMV (M <= 16; kernels/gemv.cu): decode / LM head, memory bound.
//  2. wgmma (kernels/gemm_wgmma.cu; sm_90a, formats with kWgmma): the Hopper
//     prefill path, ~650 TFLOPS at M = 2048 on the H200.
//  3. mma.sync, large tiles (kernels/gemm_mma.cu; sm_80 / sm_89 prefill, fp16
//     weights): ~330 TFLOPS on the H200.
//  4. mma.sync, medium tiles with cluster split-K on sm_90 (too few large
//     tiles, e.g. M = 17..512) where the wgmma kernel cannot run.
// The wgmma kernel has three token tiles (256, 128, and 64 where a stage's
// weights come by tensor maps: gemm_plan.h) and its own cluster split-K for
// grids below a wave.
// plan_mma / plan_wgmma (kernels/gemm_plan.cpp) estimate 2-4 in one unit of
// SM time; measured figures are in bench/RESULTS.md.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/env.h"
#include "kernels/formats/formats.cuh"
#include "kernels/gemm_internal.cuh"
#include "kernels/gemm_plan.h"
#include "kernels/gemm_wgmma.h"
#include "kernels/gemv_i8.cuh"
#include "kernels/kernels.h"
#include "kernels/per_device.h"

namespace qsp {
namespace kern {
namespace {

// The plan model's tile shapes are the mma.sync kernel's.
static_assert(CfgLarge::BM == 128 && CfgLarge::BN == 256 && CfgMedium::BM == 64 && CfgMedium::BN == 128,
              "plan_mma (kernels/gemm_plan.cpp) models these tiles");

// Byte offset of the scale array of a rows x cols matrix in format f (0: none).
size_t scales_offset(WFormat f, int64_t rows, int64_t cols) {
  return dispatch_format(f, size_t(0), [&](auto t) { return decltype(t)::T::scales_offset(rows, cols); });
}

// Weight-row blocks [y0, y0 + y_blocks) only (y_blocks 0: to the end);
// per_sm: wgmma::Args::per_sm.
cudaError_t launch_wgmma(const KArgs& k, WFormat f, Epilogue ep, int bt, int ks, int y0, int y_blocks, int per_sm,
                         cudaStream_t stream) {
  wgmma::Args a;
  a.x = k.x;
  a.ldx = k.ldx;
  a.K = k.K;
  a.KC = k.KC;
  a.tiles = k.tiles;
  a.w[0] = k.w[0];
  a.w[1] = k.w[1];
  a.scale_off = k.scale_off32;
  a.grp = k.grp;
  a.o = k.o;
  a.chunks_per_split = k.KC;
  a.tma_w = k.tma_w;
  a.epi_batch = k.wg_epi_batch;
  a.y0 = y0;
  a.y_blocks = y_blocks;
  a.per_sm = per_sm;
  return wgmma::run(a, f, ep, bt, ks, stream);
}

// Blocks per wave of the wgmma kernel's split-K clusters (wave[0]: no split).
void cluster_waves(int dev, int sms, int (&wave)[4]) {
  wave[0] = sms;
  for (int i = 1; i < 4; ++i) {
    const int ks = 1 << i, n = wgmma::cluster_wave(dev, ks);
    wave[i] = n > 0 ? n : sms / ks * ks;
  }
}


// The environment's switches (docs/API.md, Environment), read once per process:
//  - kWgmmaTmaW    $QSP_WGMMA_TMA_W (on unless "0"): the wgmma kernel's weights by tensor maps
//                  (WgmmaWeights::kAuto; measured, bench/RESULTS.md, fourteenth session)
//  - kWgmmaHybrid  $QSP_WGMMA_HYBRID (off unless set): the plan's two-launch hybrid (WgPlan::head;
//                  measured no faster but at 128 tokens)
//  - kWgmmaDense64 $QSP_WGMMA_DENSE64 (on unless "0"): the plan may take the 64-token tile at
//                  two blocks per SM (WgPlan::per_sm; below a wave: M <= 64, measured,
//                  kernels/gemm_plan.cpp)
//  - kGemvI8       $QSP_GEMV_I8 (on unless "0"): the integer GEMV of one token where it
//                  measured faster (GemvI8::kAuto, gemv_i8_auto; kernels/gemv_i8.cuh);
//                  "all": wherever it runs
//  - kGemvI8Stage  $QSP_GEMV_I8_STAGE (off unless set; measured slower): the integer GEMV's
//                  activations formed once per GEMV (GemvI8Stage::kAuto, where a workspace is
//                  given). H100, 8B decode step: Q4_0 +4.5%, Q4_K_M +6%, Q6_K +6%, Q8_0 +2%,
//                  Q2_K -1% (the stage kernel's launch and its chain cost more than the
//                  ~22 instructions a unit it saves); under QSP_PDL=1 it gains 2-4%, but
//                  QSP_PDL=1 alone loses 8% (bench/RESULTS.md, twentieth session). The
//                  H200's step is more issue-bound: not yet timed there
//  - kGemvXsmem    $QSP_GEMV_XSMEM (unset: one token only; "0" never; else every M it
//                  serves): the GEMV's activations staged in shared memory in the
//                  fragments' order (StageX::kAuto). Measured (H100, fifteenth session):
//                  the 0.6B decode step -1.4%, -5% with 2048 cached; the 8B -1-2% worse,
//                  but its GEMVs have all taken the integer GEMV since (gemv_i8_auto), so
//                  the fp16 GEMV it stages for is the small matrices'. Timed again on this
//                  code (H100, twenty-first session, three alternating rounds): the 0.6B
//                  step -1.4% (0.674 -> 0.664 ms), the 8B's equal, the 8B with 2048
//                  cached -1.6% (2.634 -> 2.586)
//  - kWgmmaLoneTail $QSP_WGMMA_LONE_TAIL (on unless "0"): the plan charges the dense
//                  64-token kernel's lone blocks at the lone rate (WgChoices::lone_tail,
//                  kernels/gemm_plan.cpp). H100, twenty-third session, two alternating
//                  rounds: the 8B 64-sequence step Q4_K_M 8.45 / 8.73 -> 8.13 / 8.00 ms
//                  (-6%), Q4_0 6.50 / 6.61 -> 6.59 / 6.56 (equal); a 128-token prompt equal
//  - kGemvI8Wide  $QSP_GEMV_I8_WIDE (on unless "0"): the integer GEMV of the matrices
//                  of few tiles and many groups in blocks of up to 16 warps, two an SM
//                  (GemvI8Wide::kAuto; kernels/gemv.cu, i8_wide_ok). H100, twenty-eighth
//                  session: the 8B down GEMV (4096 x 12288) Q4_0 1937 -> 2153 GB/s, Q4_K
//                  +7.8%; the 8B Q4_0 step 2.413 -> 2.358 ms (-2.3%); the 0.6B equal
//  - kGemvResidEarly $QSP_GEMV_RESID_EARLY (on unless "0"): the GEMV's kAddF32 epilogue
//                  loads its residual before pdl_wait (KArgs::resid_early,
//                  gemv::early_resid; kernels/pdl.h's rule), so that round trip is not
//                  at the kernel's end. H100, thirty-second session, two alternating
//                  rounds: the 0.6B step 0.576 / 0.567 -> 0.552 / 0.551 ms (-3.3%), 1 @
//                  2048 -3%; the 8B Q4_0 step 2.356 -> 2.344 / 2.347 (-0.4%). Loading a
//                  warp's first norm weights before the wait likewise (NORMW_EARLY) made
//                  the 8B step 2.8% slower: removed (bench/RESULTS.md)
//  - kWgmmaEpiBatch $QSP_WGMMA_EPI_BATCH (off unless set; thirty-fifth session): the
//                  wgmma epilogue's loads (the ranks' partials, the residual) in
//                  batches of eight float4s (WgmmaEpilogue::kAuto, wgmma::Args::epi_batch).
//                  The clock64 probes (H100, 12288x4096 Q4_0, M = 64, split 2) put its
//                  sums and stores at ~3.2k cycles of a ~43k-cycle block: four elements
//                  a thread, each one's remote loads and stores in series
enum class Switch {
  kWgmmaTmaW,
  kWgmmaHybrid,
  kWgmmaDense64,
  kGemvXsmem,
  kGemvI8,
  kGemvI8Stage,
  kWgmmaLoneTail,
  kGemvI8Wide,
  kGemvResidEarly,
  kWgmmaEpiBatch
};
bool switch_on(Switch s) {
  static const bool on[] = {env_default_on("QSP_WGMMA_TMA_W"), env_on("QSP_WGMMA_HYBRID"),
                            env_default_on("QSP_WGMMA_DENSE64"), env_default_on("QSP_GEMV_XSMEM"),
                            env_default_on("QSP_GEMV_I8"),       env_on("QSP_GEMV_I8_STAGE"),
                            env_default_on("QSP_WGMMA_LONE_TAIL"), env_default_on("QSP_GEMV_I8_WIDE"),
                            env_default_on("QSP_GEMV_RESID_EARLY"), env_on("QSP_WGMMA_EPI_BATCH")};
  return on[int(s)];
}

// The plan model's time for M tokens with the automatic choice (units of
// kernels/gemm_plan.cpp), and what it would run.
struct AutoPlan {
  double t;
  bool wgmma;
  Plan mma;
  WgPlan wg;
};
AutoPlan plan_auto(int64_t M, const KArgs& a, WFormat f, bool dual, bool wg_ok, int sms, const int (&wave)[4]) {
  AutoPlan r;
  r.mma = plan_mma(M, a.o.N, a.KC, dual, sms);
  WgChoices c;
  c.maps = a.tma_w != 0 && wgmma::maps_fit(f);
  c.hybrid = switch_on(Switch::kWgmmaHybrid);
  c.dense64 = switch_on(Switch::kWgmmaDense64);
  c.lone_tail = switch_on(Switch::kWgmmaLoneTail);
  r.wg = wg_ok ? plan_wgmma(M, a.o.N, a.KC, dual, wave, c) : WgPlan{0, 1, 1e300};
  r.wgmma = r.wg.t < r.mma.t;
  r.t = r.wgmma ? r.wg.t : r.mma.t;
  if (M <= 16) {
    const size_t per = dweight_bytes(f, int64_t(a.tiles) * 16, a.K);
    r.t = plan_gemv(dual ? 2 * per : per);
  }
  return r;
}

// The kernel for this shape, format and device (see the top of the file).
cudaError_t run(const KArgs& a, WFormat f, Epilogue ep, GemmPath path, int wg_tile, int wg_splits, int wg_head,
                int wg_per_sm, cudaStream_t stream) {
  const int M = a.o.M;
  const bool wgmma_format = dispatch_format(f, false, [](auto t) { return decltype(t)::T::kWgmma; });
  if (path == GemmPath::kWgmma && (!wgmma_format || M <= 16)) return cudaErrorNotSupported;
  if (path == GemmPath::kGemv && M > 16) return cudaErrorNotSupported;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (M <= 16) return launch_gemv(a, f, ep, stream);
  const bool dual = ep == Epilogue::kSwiGLU;
  const int sms = std::max(1, sm_count(dev));
  const bool wg_ok = wgmma_format && path != GemmPath::kMma && wgmma::available(dev);
  if (path == GemmPath::kWgmma && !wg_ok) return cudaErrorNotSupported;
  int wave[4] = {sms, sms, sms, sms};
  if (wg_ok) cluster_waves(dev, sms, wave);
  const AutoPlan best = plan_auto(M, a, f, dual, wg_ok, sms, wave);
  if (path == GemmPath::kAuto) {
    // A ragged last token tile (M a few tokens past a multiple of the tile)
    // costs a whole tile, often a whole extra wave: run those tokens as a
    // GEMM of their own (the GEMV up to 16) where the model says it pays,
    // e.g. a batch of 4 x 512 prompt tokens + 60 decoding sequences.
    const int bt = best.wgmma ? best.wg.bt : best.mma.large ? CfgLarge::BM : CfgMedium::BM;
    const int tail = M % bt;
    if (tail != 0 && M > bt) {
      const AutoPlan head = plan_auto(M - tail, a, f, dual, wg_ok, sms, wave);
      const AutoPlan rest = plan_auto(tail, a, f, dual, wg_ok, sms, wave);
      if (head.t + rest.t + kPlanLaunch < best.t) {
        KArgs h = a, r = a;
        h.o.M = M - tail;
        r.o.M = tail;
        r.x = a.x + size_t(M - tail) * size_t(a.ldx);
        const size_t off = size_t(M - tail) * size_t(a.o.ldo);
        if (r.o.out_h) r.o.out_h += off;
        if (r.o.out_f) r.o.out_f += off;
        e = run(h, f, ep, path, 0, 0, 0, 0, stream);
        return e != cudaSuccess ? e : run(r, f, ep, path, 0, 0, 0, 0, stream);
      }
    }
  }
  if (path == GemmPath::kWgmma || (path == GemmPath::kAuto && best.wgmma)) {
    const int bt = wg_tile ? wg_tile : best.wg.bt, ks = wg_splits ? wg_splits : best.wg.ks;
    // The plan's hybrid and blocks per SM (gemm_plan.h) unless the caller
    // forced the shape.
    const bool forced = wg_tile || wg_splits || wg_head;
    const int head = forced ? wg_head : best.wg.head;
    const int per_sm = wg_per_sm ? wg_per_sm : forced ? 1 : best.wg.per_sm;
    if (head > 0) {
      e = launch_wgmma(a, f, ep, bt, 1, 0, head, per_sm, stream);
      return e != cudaSuccess ? e : launch_wgmma(a, f, ep, bt, ks, head, 0, per_sm, stream);
    }
    return launch_wgmma(a, f, ep, bt, ks, 0, 0, per_sm, stream);
  }
  return launch_mma(a, f, ep, best.mma.large, best.mma.ks, dev, stream);
}

}  // namespace

int cols_multiple(WFormat f) {
  return dispatch_format(f, 32, [](auto t) { return qw::ColsMultiple<typename decltype(t)::T>::value; });
}

bool gemm_row_group_ok(const DWeight& w) {
  const bool row_major = dispatch_format(w.fmt, true, [](auto t) { return decltype(t)::T::kRowMajor; });
  return !row_major && w.rows % qw::kTileRows == 0;
}

bool gemm_supported(WFormat fmt, int64_t rows, int64_t cols, const char** why) {
  const char* r = nullptr;
  if (!dispatch_format(fmt, false, [](auto) { return true; })) {
    r = "unknown weight format";
  } else if (rows < 1 || cols < 1) {
    r = "empty matrix";
  } else if (cols % 32 != 0) {
    r = "K (cols) must be a multiple of 32: the kernels move K in 32-column halves of 64-column chunks";
  } else if (cols % cols_multiple(fmt) != 0) {
    r = "K (cols) must be a multiple of 256 for this format: its GGML super-blocks hold 256 weights of a row";
  } else if (rows > (int64_t(1) << 30) || cols > (int64_t(1) << 24) ||
             dweight_bytes(fmt, rows, cols) >= (size_t(1) << 32)) {
    r = "matrix too large: the kernels address weights with 32-bit offsets (< 4 GiB)";
  }
  if (why) *why = r;
  return r == nullptr;
}

bool gemm_stage_x_ok(int32_t M, int32_t K) {
  return M >= 1 && M <= 8 && K >= 8 && K % 8 == 0 && int64_t(M) * K <= 16384;
}

bool gemm_gemv_i8_ok(WFormat fmt, int32_t M) { return M == 1 && gemv_i8_runs(fmt); }
size_t gemm_i8_stage_bytes(int64_t K) {
  const int64_t groups = (qw::n_chunks(K) + 3) / 4;
  return size_t(groups) * i8::kStagedWords * sizeof(uint32_t);
}

// GemvI8::kAuto's choice for format f streaming `bytes` of weights
// (gemm_gemv_i8_ok checked by the caller). Measured on an H100 (bench/
// RESULTS.md, seventeenth and eighteenth sessions), the decode step against
// the fp16 GEMV: the K-quants win everywhere (8B Q4_K -18%, Q2_K -39%, Q3_K
// -26%, Q5_K -20%, Q6_K -20%; 0.6B Q4_K -4%, Q2_K -12%); Q4_0 and Q8_0 win
// where the GEMV streams more than 8 MB (8B Q4_0 -7%, Q8_0 -3%: 12288 x 4096
// 2613 GB/s against 2509; 4096 x 4096 equal) and Q4_0 loses on the 0.6B's
// 1-4 MB GEMVs (+2-4%: latency, the staging's chain), so those two take the
// integer GEMV above that size only. Q4_1 / Q5_0 / Q5_1 as Q4_0 (twentieth
// session, H100, 8B decode step against the fp16 GEMV: -5%, -9%, -11%).
constexpr size_t kI8SmallBytes = size_t(8) << 20;  // the GEMVs that are latency (as kPdlGemvSmallBytes)
bool gemv_i8_auto(WFormat f, size_t bytes) {
  static const bool all = [] {
    const char* v = std::getenv("QSP_GEMV_I8");
    return v && std::strcmp(v, "all") == 0;
  }();
  if (!switch_on(Switch::kGemvI8)) return false;
  if (all) return true;
  switch (f) {
    case WFormat::kQ2_K:
    case WFormat::kQ3_K:
    case WFormat::kQ4_K:
    case WFormat::kQ5_K:
    case WFormat::kQ6_K: return true;
    case WFormat::kQ4_0:
    case WFormat::kQ4_1:
    case WFormat::kQ5_0:
    case WFormat::kQ5_1:
    case WFormat::kQ8_0: return bytes > kI8SmallBytes;
    default: return false;
  }
}

bool gemm_norm_in_ok(int32_t M, int32_t K) {
  return M >= 1 && M <= 8 && K >= 4 && K % 4 == 0 && K <= 8192 && int64_t(M) * K <= 16384;
}

cudaError_t gemm(const GemmArgs& g, cudaStream_t stream) {
  const int64_t K = g.w.cols;
  const bool dual = g.ep == Epilogue::kSwiGLU;
  const bool norm_in = g.norm_in_x != nullptr;  // then x is not read
  if (!gemm_supported(g.w.fmt, g.w.rows, K, nullptr) || g.w.data == nullptr || (g.x == nullptr && !norm_in) ||
      g.M < 1) {
    return cudaErrorInvalidValue;
  }
  // Row groups: w, then wcat[0], wcat[1] where present (in that order).
  const DWeight* parts[3] = {&g.w, nullptr, nullptr};
  int n_parts = 1;
  for (const DWeight& c : g.wcat) {
    if (c.data == nullptr) continue;
    const DWeight& prev = *parts[n_parts - 1];
    if (dual || c.fmt != g.w.fmt || c.cols != K || !gemm_row_group_ok(prev) ||
        !gemm_supported(c.fmt, c.rows, K, nullptr)) {
      return cudaErrorInvalidValue;
    }
    parts[n_parts++] = &c;
  }
  int64_t N = 0;
  for (int i = 0; i < n_parts; ++i) N += parts[i]->rows;
  if (N > (int64_t(1) << 30)) return cudaErrorInvalidValue;
  // 16-byte activation loads: x and ldx aligned to 8 fp16.
  if (!norm_in && (g.ldx < K || g.ldx % 8 != 0 || reinterpret_cast<uintptr_t>(g.x) % 16 != 0))
    return cudaErrorInvalidValue;
  if (g.ldo < N) return cudaErrorInvalidValue;
  if (g.path != GemmPath::kAuto && g.path != GemmPath::kMma && g.path != GemmPath::kWgmma &&
      g.path != GemmPath::kGemv)
    return cudaErrorInvalidValue;
  if ((g.wg_tile != 0 || g.wg_splits != 0 || g.wg_head != 0 || g.wg_per_sm != 0) && g.path != GemmPath::kWgmma)
    return cudaErrorInvalidValue;
  if (g.wg_per_sm != 0 && g.wg_per_sm != 1 && !(g.wg_per_sm == 2 && g.wg_tile == wgmma::kTokTileTiny))
    return cudaErrorInvalidValue;
  if (g.wg_tile != 0 && g.wg_tile != wgmma::kTokTileLarge && g.wg_tile != wgmma::kTokTileSmall &&
      g.wg_tile != wgmma::kTokTileTiny) {
    return cudaErrorInvalidValue;
  }
  if (g.wg_splits != 0 && g.wg_splits != 1 && g.wg_splits != 2 && g.wg_splits != 4 && g.wg_splits != 8) {
    return cudaErrorInvalidValue;
  }
  if (int64_t(g.M) * g.ldx >= (int64_t(1) << 31)) return cudaErrorInvalidValue;  // 32-bit activation offsets
  if (g.wg_head < 0 || (g.wg_head > 0 && g.wg_head >= wgmma::row_blocks(int32_t(qw::n_tiles(N)), dual)))
    return cudaErrorInvalidValue;
  if (dual && (g.w2.data == nullptr || g.w2.fmt != g.w.fmt || g.w2.rows != g.w.rows || g.w2.cols != g.w.cols)) {
    return cudaErrorInvalidValue;
  }
  const bool half_out = g.ep == Epilogue::kStoreF16 || dual;
  if (g.ep != Epilogue::kStoreF16 && g.ep != Epilogue::kStoreF32 && g.ep != Epilogue::kAddF32 && !dual) {
    return cudaErrorInvalidValue;
  }
  if (half_out ? g.out_h == nullptr : g.out_f == nullptr) return cudaErrorInvalidValue;
  // The GEMV forming its input's norm: Q | K | V (fp32 out) and gate | up
  // only, float4 rows (rmsnorm_f16's vector path, whose bits it repeats).
  if (norm_in && (!gemm_norm_in_ok(g.M, int32_t(K)) || (g.ep != Epilogue::kStoreF32 && !dual) ||
                  g.path == GemmPath::kMma || g.path == GemmPath::kWgmma || !g.norm_in_w || g.norm_in_ldx < K ||
                  g.norm_in_ldx % 4 != 0 || reinterpret_cast<uintptr_t>(g.norm_in_x) % 16 != 0 ||
                  reinterpret_cast<uintptr_t>(g.norm_in_w) % 16 != 0 || !(g.norm_in_eps >= 0.0f))) {
    return cudaErrorInvalidValue;
  }
  // The GEMV's staged activations: its shapes, and rows the prologue may
  // read as 16-byte pieces (or the norm's float4s).
  const bool stage_ok = gemm_stage_x_ok(g.M, int32_t(K)) && g.path != GemmPath::kMma && g.path != GemmPath::kWgmma;
  KArgs a;
  a.x = g.x;
  a.ldx = g.ldx;
  a.K = int32_t(K);
  a.KC = int32_t(qw::n_chunks(K));
  a.tiles = int32_t(qw::n_tiles(N));
  a.w[0] = static_cast<const uint8_t*>(g.w.data);
  a.w[1] = static_cast<const uint8_t*>(dual ? g.w2.data : g.w.data);
  a.scale_off = scales_offset(g.w.fmt, N, K);
  a.scale_off32 = uint32_t(a.scale_off);
  {
    int32_t tile = 0;
    for (int i = 0; i < 3; ++i) {
      const DWeight& d = *parts[std::min(i, n_parts - 1)];
      a.grp.w[i] = static_cast<const uint8_t*>(d.data);
      a.grp.soff[i] = uint32_t(scales_offset(d.fmt, d.rows, K));
      if (i < n_parts) tile += int32_t(qw::n_tiles(d.rows));
      if (i < 2) a.grp.tend[i] = i + 1 < n_parts ? tile : a.tiles;
    }
  }
  a.chunks_per_split = a.KC;
  switch (g.wgmma_weights) {
    case WgmmaWeights::kAuto: a.tma_w = switch_on(Switch::kWgmmaTmaW) ? 1 : 0; break;
    case WgmmaWeights::kTensorMaps: a.tma_w = 2; break;
    case WgmmaWeights::kPerTile: a.tma_w = 0; break;
    default: return cudaErrorInvalidValue;
  }
  switch (g.wgmma_epilogue) {
    case WgmmaEpilogue::kAuto: a.wg_epi_batch = switch_on(Switch::kWgmmaEpiBatch) ? 1 : 0; break;
    case WgmmaEpilogue::kLoop: a.wg_epi_batch = 0; break;
    case WgmmaEpilogue::kBatched: a.wg_epi_batch = 1; break;
    default: return cudaErrorInvalidValue;
  }
  a.xin = g.norm_in_x;
  a.xin_ld = g.norm_in_ldx;
  a.xin_w = g.norm_in_w;
  a.xin_eps = g.norm_in_eps;
  switch (g.gemv_stage_x) {
    case StageX::kAuto: {
      static const bool every_m = std::getenv("QSP_GEMV_XSMEM") != nullptr;  // set and not "0": every M
      a.stage_x = switch_on(Switch::kGemvXsmem) && stage_ok && (g.M == 1 || every_m);
      break;
    }
    case StageX::kOff: a.stage_x = 0; break;
    case StageX::kOn:
      if (!stage_ok) return cudaErrorInvalidValue;
      a.stage_x = 1;
      break;
    default: return cudaErrorInvalidValue;
  }
  switch (g.gemv_i8) {
    case GemvI8::kAuto:
      a.i8 = gemm_gemv_i8_ok(g.w.fmt, g.M) &&
             gemv_i8_auto(g.w.fmt, dweight_bytes(g.w.fmt, N, K) * (dual ? 2 : 1));
      break;
    case GemvI8::kOff: a.i8 = 0; break;
    case GemvI8::kOn:
      if (!gemm_gemv_i8_ok(g.w.fmt, g.M) || g.path == GemmPath::kMma || g.path == GemmPath::kWgmma)
        return cudaErrorNotSupported;
      a.i8 = 1;
      break;
    default: return cudaErrorInvalidValue;
  }
  const bool ws_ok = g.i8_stage != nullptr && g.i8_stage_bytes >= gemm_i8_stage_bytes(K) &&
                     reinterpret_cast<uintptr_t>(g.i8_stage) % 16 == 0;
  switch (g.gemv_i8_stage) {
    case GemvI8Stage::kAuto:
      a.i8s = a.i8 && ws_ok && switch_on(Switch::kGemvI8Stage) ? static_cast<uint32_t*>(g.i8_stage) : nullptr;
      break;
    case GemvI8Stage::kOff: a.i8s = nullptr; break;
    case GemvI8Stage::kOn:
      if (!ws_ok) return cudaErrorInvalidValue;
      a.i8s = a.i8 ? static_cast<uint32_t*>(g.i8_stage) : nullptr;
      break;
    default: return cudaErrorInvalidValue;
  }
  switch (g.gemv_i8_wide) {
    case GemvI8Wide::kAuto: a.i8_wide = switch_on(Switch::kGemvI8Wide) ? 1 : 0; break;
    case GemvI8Wide::kOff: a.i8_wide = 0; break;
    case GemvI8Wide::kOn: a.i8_wide = 2; break;
    default: return cudaErrorInvalidValue;
  }
  a.resid_early = switch_on(Switch::kGemvResidEarly) ? 1 : 0;
  a.o.out_h = g.out_h;
  a.o.out_f = g.out_f;
  a.o.ldo = g.ldo;
  a.o.M = g.M;
  a.o.N = int32_t(N);
  const uintptr_t base = half_out ? reinterpret_cast<uintptr_t>(g.out_h) : reinterpret_cast<uintptr_t>(g.out_f);
  a.o.vec = g.ldo % 2 == 0 && base % (half_out ? 4 : 8) == 0;

  return run(a, g.w.fmt, g.ep, g.path, g.wg_tile, g.wg_splits, g.wg_head, g.wg_per_sm, stream);
}

}  // namespace kern
}  // namespace qsp
