// QK-norm + RoPE + KV-cache write (kern::qk_rope) against the CPU backend's
// ops on the same fp32 GEMM output: cpu::qk_norm_rope on the q heads and on
// the k heads at positions past.., then cpu::kv_write of k and v into a
// cache. Tolerance (as the fp64-reference test this replaces): rel L2 < 1e-3
// for q, k and v (fp16 outputs: ~3e-4 of rounding); exactly the chunk's
// cache slots written, none NaN, every other slot untouched; the wide kernel
// gives the narrow one's bytes. A case is one
// line: {head_dim, n_heads, n_kv_heads, M, past, max_seq, rope style, qk-norm}.
#include <sstream>

#include "ops/attention_check.h"

using namespace qsp_test;
namespace kern = qsp::kern;

namespace {

struct RopeCase {
  int head_dim, n_heads, n_kv_heads, M, past, max_seq, style;
  bool norm;
};

void run_rope_case(const RopeCase& c, Rng& rng) {
  std::ostringstream what;
  what << "head_dim " << c.head_dim << ", heads " << c.n_heads << "/" << c.n_kv_heads << ", M " << c.M << ", past "
       << c.past << ", max_seq " << c.max_seq << ", style " << c.style << ", qk-norm " << c.norm;
  INFO(what.str());
  const int D = c.head_dim, Q = c.n_heads * D, KV = c.n_kv_heads * D;
  const int ld = Q + 2 * KV + 4;  // padded rows
  // Raw GEMM output: k heads larger than q heads, as in Qwen3 before norm;
  // the padding holds a huge value that must not leak in.
  std::vector<float> qkv(size_t(c.M) * ld);
  for (int m = 0; m < c.M; ++m)
    for (int i = 0; i < ld; ++i)
      qkv[size_t(m) * ld + i] =
          i < Q ? rng.normal(0, 1.5f) : i < Q + KV ? rng.normal(0, 6.0f) : i < Q + 2 * KV ? rng.normal() : 1e30f;
  const std::vector<float> qn = randn(size_t(D), 0.2f, rng, 1.0f), kn = randn(size_t(D), 0.2f, rng, 1.0f);
  const float eps = 1e-6f, theta = c.head_dim == 64 ? 10000.0f : 1000000.0f;

  DevBuf d_qkv(qkv.size() * 4), d_qn(size_t(D) * 4), d_kn(size_t(D) * 4);
  AttnRig rig(AttnCase{D, c.n_heads, c.n_kv_heads, c.M, c.past, c.max_seq}, false);
  DevBuf &d_q = rig.q, &d_k = rig.k, &d_v = rig.v;
  d_qkv.upload(qkv);
  d_qn.upload(qn);
  d_kn.upload(kn);
  d_q.poison();
  d_k.poison();
  d_v.poison();
  set_past(rig.past, c.past);

  kern::QkRopeArgs a =
      rig.rope_args(d_qkv.as<float>(), ld, c.norm ? d_qn.as<float>() : nullptr, c.norm ? d_kn.as<float>() : nullptr,
                    c.style);
  a.eps = eps;
  a.theta = theta;
  a.wide = 1;
  CUDA_REQUIRE(kern::qk_rope(a, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
  const std::vector<uint16_t> gq = d_q.download<uint16_t>(), gk = d_k.download<uint16_t>(),
                              gv = d_v.download<uint16_t>();
  // The wide kernel (QkRopeArgs::wide: four vectors a warp, loads before the
  // angles) computes each vector with the same code: the same bytes, the
  // same untouched slots.
  d_q.poison();
  d_k.poison();
  d_v.poison();
  a.wide = 2;
  CUDA_REQUIRE(kern::qk_rope(a, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
  CHECK(d_q.download<uint16_t>() == gq);
  CHECK(d_k.download<uint16_t>() == gk);
  CHECK(d_v.download<uint16_t>() == gv);

  // The CPU backend's ops on the same rows.
  std::vector<float> q(size_t(c.M) * Q), k(size_t(c.M) * KV), v(size_t(c.M) * KV);
  for (int m = 0; m < c.M; ++m) {
    const float* row = &qkv[size_t(m) * ld];
    std::copy(row, row + Q, q.begin() + size_t(m) * Q);
    std::copy(row + Q, row + Q + KV, k.begin() + size_t(m) * KV);
    std::copy(row + Q + KV, row + Q + 2 * KV, v.begin() + size_t(m) * KV);
  }
  qsp::cpu::qk_norm_rope(q.data(), c.M, c.n_heads, D, c.norm ? qn.data() : nullptr, eps, c.past, theta, c.style,
                         cpu_pool());
  qsp::cpu::qk_norm_rope(k.data(), c.M, c.n_kv_heads, D, c.norm ? kn.data() : nullptr, eps, c.past, theta, c.style,
                         cpu_pool());
  std::vector<float> kc(size_t(c.n_kv_heads) * c.max_seq * D), vc(kc.size());
  qsp::cpu::kv_write(k.data(), v.data(), c.M, c.past, c.n_kv_heads, D, c.max_seq, kc.data(), vc.data());

  RelL2 eq, ek, ev;
  for (size_t i = 0; i < q.size(); ++i) eq.add(qsp::fp16_to_fp32(gq[i]), q[i]);
  for (int h = 0; h < c.n_kv_heads; ++h)
    for (int pos = c.past; pos < c.past + c.M; ++pos)
      for (int i = 0; i < D; ++i) {
        const size_t idx = (size_t(h) * c.max_seq + pos) * D + i;
        ek.add(qsp::fp16_to_fp32(gk[idx]), kc[idx]);
        ev.add(qsp::fp16_to_fp32(gv[idx]), vc[idx]);
      }
  INFO("rel L2: q " << eq.value() << ", k " << ek.value() << ", v " << ev.value());
  CHECK(eq.value() < 1e-3);
  CHECK(ek.value() < 1e-3);
  CHECK(ev.value() < 1e-3);

  // Written: exactly positions past .. past+M-1 of every KV head, and none
  // of them NaN; everything else untouched.
  size_t bad_written = 0, touched = 0;
  for (int h = 0; h < c.n_kv_heads; ++h)
    for (int j = 0; j < c.max_seq; ++j)
      for (int i = 0; i < D; ++i) {
        const size_t idx = (size_t(h) * c.max_seq + j) * D + i;
        const bool in_chunk = j >= c.past && j < c.past + c.M;
        for (const std::vector<uint16_t>* cache : {&gk, &gv}) {
          const uint16_t x = (*cache)[idx];
          if (in_chunk)
            bad_written += h_is_nan(x);
          else
            touched += x != kPoison16;
        }
      }
  size_t q_nan = 0;
  for (uint16_t x : gq) q_nan += h_is_nan(x);
  CHECK(bad_written == 0);
  CHECK(touched == 0);
  CHECK(q_nan == 0);
}

}  // namespace

TEST_CASE("op qk_rope: matches the CPU op and writes exactly the chunk's cache slots", "[gpu][qk_rope]") {
  QSP_REQUIRE_GPU();
  std::vector<RopeCase> cases;
  for (int D : {64, 128})
    for (int style : {QSP_ROPE_NEOX, QSP_ROPE_INTERLEAVED})
      for (bool norm : {false, true})
        for (int M : {1, 7, 100})
          for (int past : {0, 5, 1000}) cases.push_back({D, 16, 8, M, past, past + M + 50, style, norm});
  // Real shapes: Qwen3-8B (32/8) and -0.6B (16/8) at the prompt lengths.
  for (int M : {1, 3, 17, 100, 513}) {
    cases.push_back({128, 32, 8, M, 0, M + 8, QSP_ROPE_NEOX, true});
    cases.push_back({128, 16, 8, M, 40, M + 48, QSP_ROPE_NEOX, true});
  }
  Rng rng(555);
  for (const RopeCase& c : cases) run_rope_case(c, rng);
}

TEST_CASE("op qk_rope: angles stay accurate at long positions", "[gpu][qk_rope]") {
  QSP_REQUIRE_GPU();
  Rng rng(556);
  for (int style : {QSP_ROPE_NEOX, QSP_ROPE_INTERLEAVED})
    for (bool norm : {false, true}) {
      run_rope_case(RopeCase{128, 4, 2, 9, 32759, 32768, style, norm}, rng);  // ends at the last slot
      run_rope_case(RopeCase{64, 4, 1, 3, 30000, 30100, style, norm}, rng);
    }
}

TEST_CASE("op qk_rope: rejects unsupported arguments", "[gpu][qk_rope]") {
  QSP_REQUIRE_GPU();
  DevBuf buf(1 << 20), past(4);
  kern::QkRopeArgs a;
  a.qkv = buf.as<float>();
  a.q_out = a.k_cache = a.v_cache = buf.as<__half>();
  a.past = past.as<int32_t>();
  a.M = 1, a.n_heads = 2, a.n_kv_heads = 1, a.head_dim = 96, a.max_seq = 8, a.ld = 4 * 96;
  CHECK(kern::qk_rope(a, nullptr) == cudaErrorInvalidValue);
  a.head_dim = 64, a.ld = 100;  // ld shorter than q + k + v
  CHECK(kern::qk_rope(a, nullptr) == cudaErrorInvalidValue);
  a.ld = 256, a.rope_style = 7;
  CHECK(kern::qk_rope(a, nullptr) == cudaErrorInvalidValue);
  a.rope_style = QSP_ROPE_NEOX, a.wide = 3;
  CHECK(kern::qk_rope(a, nullptr) == cudaErrorInvalidValue);
}
