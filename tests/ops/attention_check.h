// The attention comparison shared by the attention op tests: random fp16 Q
// and a cache filled at positions 0 .. past+M-1 (the rest stays poisoned),
// kern::attention against cpu::attention on the same values widened to fp32
// (run per sampled token with n = 1 at its position: the same causal op).
//
// Tolerance (as the fp64-reference tests this replaces): rel L2 < 2e-3 and
// max abs error < 2e-2 over the sampled tokens' outputs (fp16 output
// rounding ~5e-4, fp16 P in the P.V product); every output element finite.
#pragma once

#include <set>
#include <sstream>
#include <string>

#include "ops/harness.h"

namespace qsp_test {

namespace kern = qsp::kern;

struct AttnCase {
  int head_dim, n_heads, n_kv_heads, M, past, max_seq;
};

inline std::string describe(const AttnCase& c) {
  std::ostringstream s;
  s << "head_dim " << c.head_dim << ", heads " << c.n_heads << "/" << c.n_kv_heads << ", M " << c.M << ", past "
    << c.past << ", max_seq " << c.max_seq;
  return s.str();
}

struct AttnData {
  AttnCase c;
  std::vector<uint16_t> q, k, v;  // q [M][H][D]; k, v [KVH][max_seq][D], 0xFFFF where unwritten
  std::vector<float> qf, kf, vf;  // the same values widened: the CPU op's input
  AttnData(const AttnCase& cs, Rng& rng) : c(cs) {
    const size_t D = size_t(c.head_dim);
    q.resize(size_t(c.M) * c.n_heads * D);
    k.assign(size_t(c.n_kv_heads) * c.max_seq * D, kPoison16);
    v.assign(k.size(), kPoison16);
    // Post-QK-norm scale (~1 per element) with a spread of per-key amplitudes
    // so that softmax rows range from flat to peaked.
    for (auto& x : q) x = qsp::fp32_to_fp16(rng.normal());
    const int L = c.past + c.M;
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int j = 0; j < L; ++j) {
        const float a = std::fabs(rng.normal(1.0f, 0.5f)) + 0.25f;
        for (size_t d = 0; d < D; ++d) {
          const size_t i = (size_t(h) * c.max_seq + j) * D + d;
          k[i] = qsp::fp32_to_fp16(a * rng.normal());
          v[i] = qsp::fp32_to_fp16(rng.normal());
        }
      }
    qf = widen_f16(q);
    kf = widen_f16(k);
    vf = widen_f16(v);
  }
  // The CPU op's output rows [n_heads][head_dim] for token m of the chunk,
  // attending to keys 0 .. past_at + m.
  std::vector<float> cpu_row(int m, int past_at) const {
    const size_t D = size_t(c.head_dim);
    std::vector<float> out(size_t(c.n_heads) * D);
    qsp::cpu::attention(qf.data() + size_t(m) * c.n_heads * D, kf.data(), vf.data(), out.data(), 1, past_at + m,
                        c.n_heads, c.n_kv_heads, c.head_dim, c.max_seq, cpu_pool());
    return out;
  }
};

// Tokens compared with the CPU op: all for short chunks; the first and last
// few plus random ones for long chunks (every row is still checked for being
// written).
inline std::vector<int> sample_tokens(int M, Rng& rng) {
  std::set<int> t;
  if (M <= 40) {
    for (int m = 0; m < M; ++m) t.insert(m);
  } else {
    for (int m = 0; m < 6; ++m) t.insert(m), t.insert(M - 1 - m);
    while (int(t.size()) < 28) t.insert(int(rng.below(M)));
  }
  return std::vector<int>(t.begin(), t.end());
}

// Device state for one attention shape.
struct AttnRig {
  AttnCase c;
  DevBuf q, k, v, out, past, scratch;
  size_t scratch_bytes;
  AttnRig(const AttnCase& cs, bool with_scratch)
      : c(cs),
        q(size_t(cs.M) * cs.n_heads * cs.head_dim * 2),
        k(size_t(cs.n_kv_heads) * cs.max_seq * cs.head_dim * 2),
        v(size_t(cs.n_kv_heads) * cs.max_seq * cs.head_dim * 2),
        out(size_t(cs.M) * cs.n_heads * cs.head_dim * 2),
        past(sizeof(int32_t)),
        scratch(with_scratch
                    ? std::max<size_t>(kern::attention_scratch_bytes(cs.M, cs.n_heads, cs.head_dim, cs.max_seq), 16)
                    : 16),
        scratch_bytes(with_scratch ? kern::attention_scratch_bytes(cs.M, cs.n_heads, cs.head_dim, cs.max_seq) : 0) {}
  void load(const AttnData& d) {
    q.upload(d.q);
    k.upload(d.k);
    v.upload(d.v);
  }
  kern::AttnArgs args() const {
    kern::AttnArgs a;
    a.q = q.as<__half>();
    a.k_cache = k.as<__half>();
    a.v_cache = v.as<__half>();
    a.out = out.as<__half>();
    a.M = c.M;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.max_seq = c.max_seq;
    a.past = past.as<int32_t>();
    a.scale = 1.0f / std::sqrt(float(c.head_dim));  // the scale cpu::attention uses
    a.scratch = scratch_bytes ? scratch.p : nullptr;
    a.scratch_bytes = scratch_bytes;
    return a;
  }
  // qk_rope's arguments over this rig: queries into q, keys and values into
  // the caches at past (qkv: [M][ld] fp32; norms may be nullptr).
  kern::QkRopeArgs rope_args(const float* qkv, int ld, const float* q_norm, const float* k_norm, int style) const {
    kern::QkRopeArgs r;
    r.qkv = qkv;
    r.ld = ld;
    r.q_norm = q_norm;
    r.k_norm = k_norm;
    r.q_out = q.as<__half>();
    r.k_cache = k.as<__half>();
    r.v_cache = v.as<__half>();
    r.M = c.M;
    r.n_heads = c.n_heads;
    r.n_kv_heads = c.n_kv_heads;
    r.head_dim = c.head_dim;
    r.max_seq = c.max_seq;
    r.past = past.as<int32_t>();
    r.theta = c.head_dim == 64 ? 10000.0f : 1000000.0f;
    r.rope_style = style;
    return r;
  }
};

// Every output element written and finite; the sampled rows match the CPU op
// at position past_at (the data's own past unless a graph replays elsewhere).
inline void check_attention(const AttnData& d, int past_at, const std::vector<uint16_t>& out, Rng& rng) {
  const AttnCase& c = d.c;
  INFO(describe(c) << " (run at past " << past_at << ")");
  size_t not_finite = 0;
  for (uint16_t h : out) not_finite += !h_is_finite(h);
  REQUIRE(not_finite == 0);
  RelL2 err;
  for (int m : sample_tokens(c.M, rng)) {
    const std::vector<float> want = d.cpu_row(m, past_at);
    for (size_t i = 0; i < want.size(); ++i)
      err.add(qsp::fp16_to_fp32(out[size_t(m) * want.size() + i]), want[i]);
  }
  INFO("relative L2 error " << err.value() << ", max abs error " << err.max_abs);
  CHECK(err.value() < 2e-3);
  CHECK(err.max_abs < 2e-2);
}

// One case with split-KV scratch (or none), outputs and scratch poisoned,
// against the CPU op; `path` forces a kernel family (cluster_ctas: the
// cluster kernel's blocks a KV head, AttnArgs::cluster_ctas). Returns false
// (nothing run) when a forced kWgmma reports itself unsupported, which only
// a non-Hopper device (or head_dim != 128) may do, or a forced kCluster,
// which only a device before sm_90 may do on its shapes (M = 1, group 1 / 2
// / 4 / 8), or one that cannot hold a 16-block cluster a KV head at once.
inline bool run_attention_case(const AttnCase& c, Rng& rng, kern::AttnPath path = kern::AttnPath::kAuto,
                               bool with_scratch = true, int cluster_ctas = 0) {
  AttnData d(c, rng);
  AttnRig rig(c, with_scratch);
  rig.load(d);
  rig.out.poison();
  rig.scratch.poison();
  set_past(rig.past, c.past);
  kern::AttnArgs a = rig.args();
  a.path = path;
  a.cluster_ctas = cluster_ctas;
  const cudaError_t e = kern::attention(a, nullptr);
  if ((path == kern::AttnPath::kWgmma || path == kern::AttnPath::kWgmmaOne) && e == cudaErrorNotSupported) {
    CHECK((device_major() != 9 || c.head_dim != 128));  // Hopper must run it for head_dim 128
    return false;
  }
  if (path == kern::AttnPath::kCluster && e == cudaErrorNotSupported) {
    if (cluster_ctas != 16) CHECK(device_major() < 9);
    return false;
  }
  CUDA_REQUIRE(e);
  CUDA_REQUIRE(cudaDeviceSynchronize());
  check_attention(d, c.past, rig.out.download<uint16_t>(), rng);
  return true;
}

}  // namespace qsp_test
