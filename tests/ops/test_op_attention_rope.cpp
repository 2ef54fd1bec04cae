// The decode step's QK-norm / RoPE / KV write inside the attention kernel
// (AttnArgs::rope, the CUDA backend's $QSP_FUSE_ROPE) against the same
// work as two launches, kern::qk_rope then kern::attention on its queries
// (each checked against its CPU twin in test_op_qk_rope.cpp and
// test_op_attention.cpp): the same bits in the output and in both caches
// (the fused prologue runs qk_rope's own math, kernels/qk_rope.cuh, and the
// kernel after it is the same code). Cases: both head sizes and RoPE
// styles, with and without QK-norm, GQA groups 1 .. 8 (fused) and 16 (the
// qk_rope launch first), the new token at the first position, inside a
// tile, at a tile's and a split's edge and deep in the cache; one token
// (fused) and three (not fused); and the arguments it refuses.
#include <sstream>

#include "ops/attention_check.h"

using namespace qsp_test;
namespace kern = qsp::kern;

namespace {

struct FusedCase {
  int head_dim, n_heads, n_kv_heads, M, past, style;
  bool norm;
};

// Runs c both ways on the same inputs; returns nothing, CHECKs equality.
void run_fused_case(const FusedCase& c, Rng& rng) {
  std::ostringstream what;
  what << "head_dim " << c.head_dim << ", heads " << c.n_heads << "/" << c.n_kv_heads << ", M " << c.M << ", past "
       << c.past << ", style " << c.style << ", qk-norm " << c.norm;
  INFO(what.str());
  const int D = c.head_dim, Q = c.n_heads * D, KV = c.n_kv_heads * D, ld = Q + 2 * KV;
  const int max_seq = c.past + c.M + 40;
  std::vector<float> qkv(size_t(c.M) * ld);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = rng.normal(0, (i % size_t(ld)) < size_t(Q) ? 1.5f : 4.0f);
  const std::vector<float> qn = randn(size_t(D), 0.2f, rng, 1.0f), kn = randn(size_t(D), 0.2f, rng, 1.0f);
  // Caches: keys and values of the earlier positions, poison after them.
  std::vector<uint16_t> kc(size_t(c.n_kv_heads) * max_seq * D, kPoison16), vc(kc.size(), kPoison16);
  for (int h = 0; h < c.n_kv_heads; ++h)
    for (int j = 0; j < c.past; ++j)
      for (int i = 0; i < D; ++i) {
        const size_t idx = (size_t(h) * max_seq + j) * D + i;
        kc[idx] = qsp::fp32_to_fp16(rng.normal(0, 2.0f));
        vc[idx] = qsp::fp32_to_fp16(rng.normal());
      }
  DevBuf d_qkv(qkv.size() * 4), d_qn(size_t(D) * 4), d_kn(size_t(D) * 4);
  d_qkv.upload(qkv);
  d_qn.upload(qn);
  d_kn.upload(kn);

  // One run on fresh buffers: fused (AttnArgs::rope) or two launches.
  struct Result {
    std::vector<uint16_t> out, k, v;
  };
  const auto run = [&](bool fused) {
    AttnRig rig(AttnCase{D, c.n_heads, c.n_kv_heads, c.M, c.past, max_seq}, true);
    rig.q.poison();
    rig.out.poison();
    rig.k.upload(kc);
    rig.v.upload(vc);
    set_past(rig.past, c.past);
    const kern::QkRopeArgs r = rig.rope_args(d_qkv.as<float>(), ld, c.norm ? d_qn.as<float>() : nullptr,
                                             c.norm ? d_kn.as<float>() : nullptr, c.style);
    kern::AttnArgs a = rig.args();
    if (fused) {
      a.q = nullptr;  // unused with rope
      a.rope = &r;
    } else {
      CUDA_REQUIRE(kern::qk_rope(r, nullptr));
    }
    CUDA_REQUIRE(kern::attention(a, nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    return Result{rig.out.download<uint16_t>(), rig.k.download<uint16_t>(), rig.v.download<uint16_t>()};
  };
  const Result two = run(false), one = run(true);
  size_t nan = 0;
  for (uint16_t x : one.out) nan += h_is_nan(x);
  CHECK(nan == 0);
  CHECK(one.out == two.out);
  CHECK(one.k == two.k);
  CHECK(one.v == two.v);
}

}  // namespace

TEST_CASE("op attention: the decode step's QK-norm / RoPE / KV write in the kernel", "[gpu][attention][qk_rope]") {
  QSP_REQUIRE_GPU();
  std::vector<FusedCase> cases;
  for (int D : {64, 128})
    for (int style : {QSP_ROPE_NEOX, QSP_ROPE_INTERLEAVED})
      for (bool norm : {false, true})
        for (int past : {0, 5, 31, 32, 64, 1000, 3000}) cases.push_back({D, 16, 8, 1, past, style, norm});
  // Qwen3-8B / -0.6B / Llama-8B groups, group 1 and 8, group 16 (not fused),
  // three tokens (not fused).
  for (int past : {0, 17, 511, 2047}) {
    cases.push_back({128, 32, 8, 1, past, QSP_ROPE_NEOX, true});
    cases.push_back({128, 32, 8, 1, past, QSP_ROPE_INTERLEAVED, false});
    cases.push_back({128, 8, 8, 1, past, QSP_ROPE_NEOX, true});
    cases.push_back({64, 16, 2, 1, past, QSP_ROPE_NEOX, true});
    cases.push_back({128, 32, 2, 1, past, QSP_ROPE_NEOX, true});
    cases.push_back({128, 32, 8, 3, past, QSP_ROPE_NEOX, true});
  }
  Rng rng(777);
  for (const FusedCase& c : cases) run_fused_case(c, rng);

  // Refused: rope arguments that are not the attention's.
  AttnRig rig(AttnCase{128, 32, 8, 1, 3, 64}, true), other(AttnCase{128, 32, 8, 1, 3, 64}, false);
  DevBuf d_qkv(size_t(48) * 128 * 4);
  set_past(rig.past, 3);
  kern::QkRopeArgs r = rig.rope_args(d_qkv.as<float>(), 48 * 128, nullptr, nullptr, QSP_ROPE_NEOX);
  kern::AttnArgs a = rig.args();
  a.q = nullptr;
  a.rope = &r;
  r.k_cache = other.k.as<__half>();  // another cache
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  r.k_cache = rig.k.as<__half>();
  r.n_kv_heads = 4;  // another shape
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  r.n_kv_heads = 8;
  r.rope_style = 7;  // not a style
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  r.rope_style = QSP_ROPE_NEOX;
  CUDA_REQUIRE(kern::attention(a, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
}
