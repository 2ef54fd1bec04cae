// The Hopper GEMM's own choices, each forced (kern::gemm on the wgmma path
// against the CPU backend's matmul, gemm_check.h): its token tiles and
// clustered K splits, and the weights of a stage by tensor-map copies
// ($QSP_WGMMA_TMA_W). Skipped, loudly, where the sm_90a kernel cannot run.
#include "ops/gemm_check.h"

using namespace qsp_test;

namespace {

constexpr GemmPath kWgmma = GemmPath::kWgmma;

// Whether the wgmma kernel runs here; prints the skip where it does not (a
// Hopper GPU must run it).
bool wgmma_here() {
  if (gemm_wgmma_runs()) return true;
  CHECK(device_major() != 9);
  std::printf("SKIPPED: wgmma GEMM path (needs sm_90a)\n");
  return false;
}

// The forced tile tests' shapes, each swept over `tiles` x K splits 1-8 and
// every epilogue, per_sm: GemmArgs::wg_per_sm (0: the default kernel): M
// inside one tile, across tiles and with a partial last tile; K splits
// that divide the chunks evenly, unevenly and leave ranks with no chunk at
// all (K = 160: 3 chunks over 4 or 8 ranks); a K-quant. The 64-token
// tile takes its chunks two a round: 64, 48 and 16 of them, 3 (a pair,
// then a lone round) and 1 (no pair at all). Every other shape with the
// weights copied per tile (the default is by tensor maps where they fit).
void forced_tile_sweep(const std::vector<int>& tiles, int per_sm, uint64_t seed) {
  const struct {
    int32_t dt;
    int64_t N, K;
    std::vector<int> Ms;
  } cases[] = {
      {QSP_DTYPE_Q4_0, 4096, 4096, {17, 64, 100}},  // Qwen3-8B q / o: the decode-batch and short-prompt sizes
      {QSP_DTYPE_Q8_0, 1024, 3072, {33, 300}},      // Qwen3-0.6B down (at 2 per SM: 5 stages within 100 KB)
      {QSP_DTYPE_Q4_0, 1000, 160, {17, 65}},        // 3 chunks: empty ranks; N % 128 != 0
      {QSP_DTYPE_Q4_K, 2048, 1024, {64}},           // a K-quant
      {QSP_DTYPE_Q8_0, 256, 64, {64}},              // 1 chunk: the 64-token tile's lone round, no pair
  };
  int i = 0;
  for (const auto& c : cases) {
    OpWeight w(c.dt, c.N, c.K, seed++), w2(c.dt, c.N, c.K, seed++);
    gemm_sweep(w, w2, c.Ms, seed++, kWgmma, tiles, {1, 2, 4, 8},
               i++ % 2 ? WgmmaWeights::kPerTile : WgmmaWeights::kAuto, per_sm);
  }
}

// The refusal checks' call: kStoreF32 forced onto the wgmma path, a 128 x 64
// Q4_0 weight, 32 rows (forced_wgmma).
struct TinyCall {
  OpWeight w{QSP_DTYPE_Q4_0, 128, 64, 11};
  OpActs x{32, 64, 64, 10};
  DevBuf out{size_t(32) * 128 * 4};
  GemmArgs args() { return forced_wgmma(w, x, out.as<float>()); }
};

}  // namespace

// The wgmma kernel's token tiles (256, 128, 64) and clustered K splits
// (1, 2, 4, 8) each forced (forced_tile_sweep), and the forcing fields'
// refusals.
TEST_CASE("op gemm: wgmma token tiles and K splits, each forced", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  if (!wgmma_here()) return;
  forced_tile_sweep({256, 128, 64}, 0, 2600);
  // What the forcing fields refuse.
  TinyCall t;
  GemmArgs a = t.args();
  a.wg_tile = 32;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.wg_tile = 128;
  a.wg_splits = 3;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.wg_splits = 2;
  a.path = GemmPath::kAuto;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.wg_splits = 0;
  a.wg_tile = 0;
  a.wgmma_weights = static_cast<qsp::kern::WgmmaWeights>(3);
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);

  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

// GemmArgs::wg_per_sm = 2: the 64-token tile's kernel built for two blocks
// per SM (104 consumer registers after setmaxnreg, stages within 100 KB),
// forced only until measured: every K split on the shapes of the forced
// tile test, both ways of copying the weights; and its refusals (without
// the 64-token tile forced, other counts). Its own case: a wrong register
// budget would hang setmaxnreg.inc, and this is where it would show.
TEST_CASE("op gemm: the 64-token wgmma tile at two blocks per SM", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  if (!wgmma_here()) return;
  forced_tile_sweep({64}, 2, 2700);
  TinyCall t;
  GemmArgs a = t.args();
  a.wg_per_sm = 2;  // only with the 64-token tile forced
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.wg_tile = 128;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.wg_tile = 64;
  a.wg_per_sm = 3;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.path = GemmPath::kAuto;
  a.wg_per_sm = 2;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.path = GemmPath::kWgmma;
  CUDA_REQUIRE(qsp::kern::gemm(a, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

// GemmArgs::wgmma_weights = kTensorMaps: a stage's weights as one tensor-map copy per
// matrix and array instead of one bulk copy per tile. Every format the wgmma
// kernel takes, every epilogue (kSwiGLU: gate and up, a box of 4 tiles
// each), both token tiles, unsplit and split, N past the last whole block
// (tiles read as zero past the end); row groups whose blocks each lie in one
// matrix (one map per matrix), whose blocks straddle two (copies per tile),
// and whose last matrix ends mid-block.
TEST_CASE("op gemm: the wgmma kernel's weights by tensor-map copies", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  if (!wgmma_here()) return;
  constexpr WgmmaWeights kTma = WgmmaWeights::kTensorMaps;
  uint64_t seed = 7100;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1, QSP_DTYPE_Q2_K,
                     QSP_DTYPE_Q3_K, QSP_DTYPE_Q4_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K}) {
    OpWeight w(dt, 1000, 512, seed++), w2(dt, 1000, 512, seed++);
    gemm_sweep(w, w2, {17, 130}, seed++, kWgmma, {256, 128, 64}, {1, 2}, kTma);
  }
  const struct {
    int32_t dt;
    int64_t q, k, v, K;
  } groups[] = {
      {QSP_DTYPE_Q4_0, 1024, 256, 256, 1024},  // boundaries at whole blocks (128 rows)
      {QSP_DTYPE_Q4_K, 160, 96, 96, 512},      // blocks across two matrices
      {QSP_DTYPE_Q8_0, 256, 128, 72, 512},     // V ends mid-block
      {QSP_DTYPE_Q6_K, 512, 128, 128, 256},
  };
  for (const auto& c : groups) {
    OpWeight wq(c.dt, c.q, c.K, seed++), wk(c.dt, c.k, c.K, seed++), wv(c.dt, c.v, c.K, seed++);
    const int64_t N = c.q + c.k + c.v;
    for (int M : {17, 300}) {
      OpActs x(M, int(c.K), int(c.K), seed++);
      const std::vector<int> rows = sample_rows(M);
      const std::vector<float> ref = group_ref(wq, wk, &wv, x, rows);
      for (int ks : {1, 2}) {
        check_gemm(wq, nullptr, x, Epilogue::kStoreF32, int(N) + 4, rows, ref, nullptr, seed++, kWgmma, &wk, &wv,
                   128, ks, kTma);
        check_gemm(wq, nullptr, x, Epilogue::kAddF32, int(N), rows, ref, nullptr, seed++, kWgmma, &wk, &wv, 256, ks,
                   kTma);
      }
    }
  }
}

// GemmArgs::wgmma_epilogue = kBatched: the epilogue's loads (the ranks'
// partials, the residual) a batch of elements at a time, then the same sums
// in the same order and the same stores: the same bits as kLoop. Every
// format, every epilogue, the three token tiles, unsplit and every split
// (2 / 4 / 8 ranks: 2 to 16 loads an element; those of more than a batch
// of 8 take the loop), M with ragged token tiles and a ragged last rank
// (17, 130), N past the last whole block (300), the two-per-SM kernel
// (which keeps the loop either way); then the refusal of an unknown value.
TEST_CASE("op gemm: the wgmma kernel's batched epilogue gives the same bits", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  if (!wgmma_here()) return;
  using qsp::kern::WgmmaEpilogue;
  uint64_t seed = 7400;
  int runs = 0;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1, QSP_DTYPE_Q2_K,
                     QSP_DTYPE_Q3_K, QSP_DTYPE_Q4_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K}) {
    const bool kq = dt != QSP_DTYPE_Q4_0 && dt != QSP_DTYPE_Q8_0 && dt != QSP_DTYPE_Q4_1 && dt != QSP_DTYPE_Q5_0 &&
                    dt != QSP_DTYPE_Q5_1;
    const int64_t N = 300, K = kq ? 2304 : 576;  // 36 or 9 chunks
    OpWeight w(dt, N, K, seed++), w2(dt, N, K, seed++);
    for (int M : {17, 64, 130}) {
      const OpActs x(M, int(K), int(K), seed++);
      for (Epilogue ep : {Epilogue::kStoreF16, Epilogue::kStoreF32, Epilogue::kAddF32, Epilogue::kSwiGLU})
        for (int tile : {256, 128, 64})
          for (int ks : {1, 2, 4, 8})
            for (int per_sm : {0, 2}) {
              if (per_sm == 2 && tile != 64) continue;
              const WgmmaWeights weights = (runs++ % 2) ? WgmmaWeights::kPerTile : WgmmaWeights::kAuto;
              INFO(qsp_dtype_name(dt) << " M " << M << " " << ep_name(ep) << " tile " << tile << " splits " << ks
                                      << " per SM " << per_sm << " weights " << int(weights));
              const bool half_out = ep == Epilogue::kStoreF16 || ep == Epilogue::kSwiGLU;
              const size_t bytes = size_t(M) * size_t(N) * (half_out ? 2 : 4);
              std::vector<uint8_t> init(bytes, 0xff);
              if (ep == Epilogue::kAddF32) {
                Rng rng(seed);
                float* f = reinterpret_cast<float*>(init.data());
                for (size_t i = 0; i < bytes / 4; ++i) f[i] = rng.normal();
              }
              ++seed;
              std::vector<uint8_t> got[2];
              for (int on = 0; on < 2; ++on) {
                DevBuf out(bytes);
                out.upload(init);
                GemmArgs a = gemm_args(w, ep == Epilogue::kSwiGLU ? &w2 : nullptr, x, ep, out, int(N));
                a.path = GemmPath::kWgmma;
                a.wg_tile = tile;
                a.wg_splits = ks;
                a.wg_per_sm = per_sm;
                a.wgmma_weights = weights;
                a.wgmma_epilogue = on ? WgmmaEpilogue::kBatched : WgmmaEpilogue::kLoop;
                CUDA_REQUIRE(qsp::kern::gemm(a, nullptr));
                CUDA_REQUIRE(cudaDeviceSynchronize());
                got[on] = out.download<uint8_t>();
              }
              REQUIRE(got[0] != init);  // the kernel ran
              CHECK(got[0] == got[1]);
            }
    }
  }
  TinyCall t;
  GemmArgs a = t.args();
  a.wgmma_epilogue = static_cast<WgmmaEpilogue>(3);
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

// GemmArgs::wg_head: the plan's hybrid forced, weight-row blocks [0, head)
// in one unsplit launch and the rest in a split launch of their own (each
// block's rows and output columns offset by its launch's first row block):
// heads of one block, most blocks and all but one, splits 1 / 2 / 4, both
// token tiles, every epilogue (kSwiGLU's blocks are 64 rows of gate and of
// up), N past the last whole block, row groups whose split part starts in
// K or in V or across matrices; then the auto path on the 8B gate | up shape
// at 512 tokens, where the plan takes the hybrid; and the refusals.
TEST_CASE("op gemm: the wgmma hybrid of whole waves and a split rest", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  if (!wgmma_here()) return;
  uint64_t seed = 7300;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q4_K, QSP_DTYPE_Q8_0}) {
    OpWeight w(dt, 1000, 512, seed++), w2(dt, 1000, 512, seed++);  // 8 row blocks (16 of 64 for kSwiGLU)
    for (int M : {17, 300}) {
      OpActs x(M, 512, 512, seed++);
      const std::vector<int> rows = sample_rows(M);
      const std::vector<float> ref = cpu_matmul(w, x, rows), ref2 = cpu_matmul(w2, x, rows);
      int v = 0;
      for (int head : {1, 5, 7})
        for (int ks : {1, 2, 4})
          for (Epilogue ep : {Epilogue::kStoreF16, Epilogue::kStoreF32, Epilogue::kAddF32, Epilogue::kSwiGLU}) {
            const int h = ep == Epilogue::kSwiGLU ? 2 * head + 1 : head;
            check_gemm(w, &w2, x, ep, 1000 + (v % 2 ? 8 : 0), rows, ref, &ref2, seed++, kWgmma, nullptr, nullptr,
                       v % 2 ? 128 : 256, ks, v % 3 == 2 ? WgmmaWeights::kPerTile : WgmmaWeights::kAuto, h);
            ++v;
          }
    }
  }
  const struct {
    int32_t dt;
    int64_t q, k, v, K;
    int head;
  } groups[] = {
      {QSP_DTYPE_Q4_0, 256, 128, 128, 512, 2},  // the split launch starts at K
      {QSP_DTYPE_Q4_0, 256, 128, 128, 512, 3},  // ... at V
      {QSP_DTYPE_Q6_K, 160, 96, 96, 256, 1},    // blocks across matrices
  };
  for (const auto& c : groups) {
    OpWeight wq(c.dt, c.q, c.K, seed++), wk(c.dt, c.k, c.K, seed++), wv(c.dt, c.v, c.K, seed++);
    const int64_t N = c.q + c.k + c.v;
    OpActs x(100, int(c.K), int(c.K), seed++);
    const std::vector<int> rows = sample_rows(100);
    const std::vector<float> ref = group_ref(wq, wk, &wv, x, rows);
    for (int ks : {1, 2}) {
      check_gemm(wq, nullptr, x, Epilogue::kStoreF32, int(N), rows, ref, nullptr, seed++, kWgmma, &wk, &wv, 256, ks,
                 WgmmaWeights::kPerTile, c.head);
      check_gemm(wq, nullptr, x, Epilogue::kAddF32, int(N) + 4, rows, ref, nullptr, seed++, kWgmma, &wk, &wv, 128, ks,
                 WgmmaWeights::kTensorMaps, c.head);
    }
  }
  {
    OpWeight gate(QSP_DTYPE_Q4_0, 14336, 4096, seed++), up(QSP_DTYPE_Q4_0, 14336, 4096, seed++);
    OpActs x(512, 4096, 4096, seed++);
    const std::vector<int> rows = sample_rows(512);
    const std::vector<float> rg = cpu_matmul(gate, x, rows), ru = cpu_matmul(up, x, rows);
    check_gemm(gate, &up, x, Epilogue::kSwiGLU, 14336, rows, rg, &ru, seed++);
  }
  // Refused: a head of every row block or more, and a head without the forced path.
  OpWeight wq(QSP_DTYPE_Q4_0, 256, 64, 11);
  OpActs x(32, 64, 64, 10);
  DevBuf out(size_t(32) * 256 * 4);
  GemmArgs a = forced_wgmma(wq, x, out.as<float>());
  a.ldo = 256;
  a.wg_head = 2;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.wg_head = -1;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.wg_head = 1;
  a.path = GemmPath::kAuto;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorInvalidValue);
  a.path = GemmPath::kWgmma;
  CUDA_REQUIRE(qsp::kern::gemm(a, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
}
