// The Q | K | V GEMM with its QK-norm, RoPE and KV-cache write
// (kern::GemmArgs::qk, the CUDA backend's QSP_FUSE_QK) against the two ops
// it replaces, on the GPU: kern::gemm into fp32 qkv, then kern::qk_rope
// (itself checked against the CPU ops in test_op_qk_rope.cpp). The wgmma
// GEMM does the work in its epilogue, with the angles from kern::rope_table
// and qk_rope's own per-head code (kernels/rope.cuh): forced onto it (every
// token tile, K splits, the 64-token tile at one and two blocks per SM), q
// and the cache rows must be the same bits as the two ops on the same GEMM
// path (2026-12-06, H100: every case whose GEMM matched was bit-identical;
// the rest differed only by the GEMM's sums) and qkv stays untouched.
// Forced onto mma.sync, with heads of 64, or through the GEMV, gemm() runs
// qk_rope after the GEMM. Every cache row outside the chunk keeps its
// poison. A case is one line.
#include <algorithm>
#include <sstream>

#include "ops/gemm_check.h"
#include "ops/harness.h"

using namespace qsp_test;
namespace kern = qsp::kern;
using kern::Epilogue;
using kern::GemmArgs;
using kern::GemmPath;

namespace {

struct QkvCase {
  int32_t dt;
  int K, n_heads, n_kv_heads, D, style;
  bool norm;
  std::vector<int> Ms;
  GemmPath path;
  int tile, splits, per_sm;  // the wgmma kernel's, with path kWgmma (0: the plan's)
};

struct QkvOut {
  DevBuf qkv, q, k, v;
  QkvOut(int M, int ld, int n_heads, int n_kv_heads, int D, int max_seq)
      : qkv(size_t(M) * ld * 4), q(size_t(M) * n_heads * D * 2), k(size_t(n_kv_heads) * max_seq * D * 2),
        v(size_t(n_kv_heads) * max_seq * D * 2) {
    qkv.poison();
    q.poison();
    k.poison();
    v.poison();
  }
};

// Rows [row0, row0 + rows) of every (row_stride)-row plane of b against a:
// within 1e-3 (the report when bits differ), no NaN; every other row
// poison. Returns the differing halves.
size_t compare_rows(const DevBuf& a, const DevBuf& b, size_t row_elems, size_t row0, size_t rows, size_t row_stride,
                    const char* what) {
  const std::vector<uint16_t> va = a.download<uint16_t>(), vb = b.download<uint16_t>();
  RelL2 err;
  size_t nan_in = 0, touched_out = 0, differ = 0;
  for (size_t i = 0; i < vb.size(); ++i) {
    const size_t row = (i / row_elems) % row_stride;
    if (row < row0 || row >= row0 + rows) {
      touched_out += vb[i] != kPoison16;
      continue;
    }
    nan_in += h_is_nan(vb[i]);
    differ += va[i] != vb[i];
    err.add(qsp::fp16_to_fp32(vb[i]), qsp::fp16_to_fp32(va[i]));
  }
  INFO(what << ": rel L2 " << err.value() << ", NaN " << nan_in << ", written outside " << touched_out
            << ", differing halves " << differ);
  CHECK(err.value() <= 1e-3);
  CHECK(nan_in == 0);
  CHECK(touched_out == 0);
  return differ;
}

void run_case(const QkvCase& c, uint64_t seed) {
  const int D = c.D, Q = c.n_heads * D, KV = c.n_kv_heads * D, ld = Q + 2 * KV;
  OpWeight wq(c.dt, Q, c.K, seed), wk(c.dt, KV, c.K, seed + 1), wv(c.dt, KV, c.K, seed + 2);
  Rng rng(seed + 3);
  const std::vector<float> qn = randn(size_t(D), 0.2f, rng, 1.0f), kn = randn(size_t(D), 0.2f, rng, 1.0f);
  DevBuf d_qn(size_t(D) * 4), d_kn(size_t(D) * 4), d_past(4);
  d_qn.upload(qn);
  d_kn.upload(kn);
  for (int M : c.Ms)
    for (int past : {0, 37}) {
      std::ostringstream what;
      what << qsp_dtype_name(c.dt) << " K " << c.K << ", heads " << c.n_heads << "/" << c.n_kv_heads << " x " << D
           << ", style " << c.style << ", norm " << c.norm << ", M " << M << ", past " << past << ", path "
           << int(c.path) << " tile " << c.tile << " splits " << c.splits << " per SM " << c.per_sm;
      INFO(what.str());
      const int max_seq = past + M + 8;
      d_past.upload(std::vector<int32_t>{past});
      OpActs x(M, c.K, c.K, seed + 100 + M);
      QkvOut ref(M, ld, c.n_heads, c.n_kv_heads, D, max_seq), got(M, ld, c.n_heads, c.n_kv_heads, D, max_seq);
      DevBuf table(size_t(M) * D * 4);
      table.poison();
      const auto rope_args = [&](QkvOut& o) {
        kern::QkRopeArgs r;
        r.qkv = o.qkv.as<float>();
        r.ld = ld;
        r.q_norm = c.norm ? d_qn.as<float>() : nullptr;
        r.k_norm = c.norm ? d_kn.as<float>() : nullptr;
        r.q_out = o.q.as<__half>();
        r.k_cache = o.k.as<__half>();
        r.v_cache = o.v.as<__half>();
        r.M = M;
        r.n_heads = c.n_heads;
        r.n_kv_heads = c.n_kv_heads;
        r.head_dim = D;
        r.max_seq = max_seq;
        r.past = d_past.as<int32_t>();
        r.eps = 1e-6f;
        r.theta = D == 64 ? 10000.0f : 1000000.0f;
        r.rope_style = c.style;
        return r;
      };
      const auto gemm_args = [&](QkvOut& o) {
        GemmArgs g;
        g.x = x.ptr();
        g.ldx = c.K;
        g.M = M;
        g.w = wq.dw;
        g.wcat[0] = wk.dw;
        g.wcat[1] = wv.dw;
        g.ep = Epilogue::kStoreF32;
        g.out_f = o.qkv.as<float>();
        g.ldo = ld;
        return g;
      };
      // The two ops, as the backend runs them without QSP_FUSE_QK, on the
      // same GEMM path (the same fp32 sums).
      const kern::QkRopeArgs r_ref = rope_args(ref);
      GemmArgs g_ref = gemm_args(ref);
      g_ref.path = c.path;
      g_ref.wg_tile = c.tile;
      g_ref.wg_splits = c.splits;
      g_ref.wg_per_sm = c.per_sm;
      CUDA_REQUIRE(kern::gemm(g_ref, nullptr));
      CUDA_REQUIRE(kern::qk_rope(r_ref, nullptr));
      // The same in one call, on the forced path, with the pass's angles.
      const kern::QkRopeArgs r_got = rope_args(got);
      CUDA_REQUIRE(kern::rope_table(r_got, table.as<float>(), nullptr));
      GemmArgs g = gemm_args(got);
      g.qk = &r_got;
      g.qk_table = table.as<float>();
      g.path = c.path;
      g.wg_tile = c.tile;
      g.wg_splits = c.splits;
      g.wg_per_sm = c.per_sm;
      CUDA_REQUIRE(kern::gemm(g, nullptr));
      CUDA_REQUIRE(cudaDeviceSynchronize());

      size_t differ = compare_rows(ref.q, got.q, size_t(Q), 0, size_t(M), size_t(M), "q");
      differ += compare_rows(ref.k, got.k, size_t(D), size_t(past), size_t(M), size_t(max_seq), "k cache");
      differ += compare_rows(ref.v, got.v, size_t(D), size_t(past), size_t(M), size_t(max_seq), "v cache");
      CHECK(differ == 0);  // the same bits as gemm + qk_rope
      // The wgmma epilogue does the work itself: qkv is never written.
      if (c.path == GemmPath::kWgmma && D == 128) {
        const std::vector<uint32_t> q32 = got.qkv.download<uint32_t>();
        CHECK(std::count(q32.begin(), q32.end(), 0xffffffffu) == std::ptrdiff_t(q32.size()));
      }
    }
}

}  // namespace

TEST_CASE("op gemm: QK-norm, RoPE and the KV write fused into the Q | K | V GEMM", "[gpu][gemm][wgmma][qk_rope]") {
  QSP_REQUIRE_GPU();
  const bool wg = gemm_wgmma_runs();
  if (!wg) {
    CHECK(device_major() != 9);
    std::printf("SKIPPED: the wgmma epilogue (needs sm_90a); only the fallback path runs\n");
  }
  const GemmPath kWg = GemmPath::kWgmma, kAuto = GemmPath::kAuto, kMma = GemmPath::kMma;
  const int neox = QSP_ROPE_NEOX, inter = QSP_ROPE_INTERLEAVED;
  const QkvCase cases[] = {
      {QSP_DTYPE_Q4_0, 4096, 32, 8, 128, neox, true, {17, 300}, kWg, 0, 0, 0},  // Qwen3-8B, the plan's tile
      {QSP_DTYPE_Q4_0, 4096, 32, 8, 128, neox, true, {2048}, kAuto, 0, 0, 0},
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {512}, kAuto, 0, 0, 0},   // Qwen3-0.6B
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {100}, kWg, 256, 1, 0},
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {100}, kWg, 128, 2, 0},
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {513}, kWg, 128, 4, 0},
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {64, 65}, kWg, 64, 1, 1},
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {64}, kWg, 64, 2, 2},
      {QSP_DTYPE_Q4_K, 1024, 16, 8, 128, neox, true, {65}, kWg, 256, 2, 0},
      {QSP_DTYPE_Q6_K, 1024, 16, 8, 128, neox, true, {33}, kWg, 64, 8, 2},
      {QSP_DTYPE_Q8_0, 512, 8, 2, 128, inter, false, {17, 513}, kWg, 0, 0, 0},  // interleaved pairs, no norm
      {QSP_DTYPE_Q8_0, 512, 8, 2, 64, inter, false, {17, 100}, kWg, 0, 0, 0},   // heads of 64: qk_rope after
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {100}, kMma, 0, 0, 0},      // the fallback: GEMM, then qk_rope
      {QSP_DTYPE_Q4_0, 1024, 16, 8, 128, neox, true, {1, 5}, kAuto, 0, 0, 0},    // M <= 16: the GEMV, then qk_rope
  };
  uint64_t seed = 5100;
  for (const QkvCase& c : cases) {
    if (c.path == kWg && !wg) continue;
    run_case(c, seed);
    seed += 10;
  }
  // What it refuses: another epilogue, a qkv that is not the output, another
  // M, a batched pass, a misaligned table.
  OpWeight w(QSP_DTYPE_Q4_0, 3 * 128, 256, 5200);
  OpActs x(32, 256, 256, 5201);
  QkvOut o(32, 384, 1, 1, 128, 64);
  DevBuf d_past(4), table(32 * 128 * 4 + 16);
  d_past.upload(std::vector<int32_t>{0});
  kern::QkRopeArgs r;
  r.qkv = o.qkv.as<float>();
  r.ld = 384;
  r.q_out = o.q.as<__half>();
  r.k_cache = o.k.as<__half>();
  r.v_cache = o.v.as<__half>();
  r.M = 32;
  r.n_heads = r.n_kv_heads = 1;
  r.head_dim = 128;
  r.max_seq = 64;
  r.past = d_past.as<int32_t>();
  CUDA_REQUIRE(kern::rope_table(r, table.as<float>(), nullptr));
  GemmArgs g;
  g.x = x.ptr();
  g.ldx = 256;
  g.M = 32;
  g.w = w.dw;
  g.ep = Epilogue::kStoreF32;
  g.out_f = o.qkv.as<float>();
  g.ldo = 384;
  g.qk = &r;
  g.qk_table = table.as<float>();
  CUDA_REQUIRE(kern::gemm(g, nullptr));
  std::vector<GemmArgs> bad(5, g);
  bad[0].ep = Epilogue::kAddF32;
  bad[1].ldo = 388;
  bad[2].M = 31;
  kern::QkRopeArgs rb = r;
  std::vector<kern::SeqDesc> seqs(1);
  rb.seqs = seqs.data();
  bad[3].qk = &rb;
  bad[4].qk_table = reinterpret_cast<const float*>(table.as<char>() + 4);
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("bad case " << i);
    CHECK(kern::gemm(bad[i], nullptr) == cudaErrorInvalidValue);
  }
  CHECK(kern::rope_table(rb, table.as<float>(), nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}
