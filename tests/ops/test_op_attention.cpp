// Causal GQA flash attention (kern::attention) against the CPU backend's
// attention (attention_check.h has the comparison and its tolerance):
// prefill, chunked prefill (past > 0), decode (M = 1), split-KV with and
// without scratch, each kernel family forced, GQA groups 1, 2, 4, 5, 8 and
// MQA, head_dim 64 and 128, CUDA graph replay at moving positions. A case is
// one line: {head_dim, n_heads, n_kv_heads, M, past, max_seq}.
#include <array>
#include <memory>

#include "kernels/pdl.h"
#include "ops/attention_check.h"

using namespace qsp_test;

namespace {

constexpr kern::AttnPath kAuto = kern::AttnPath::kAuto, kMma = kern::AttnPath::kMma, kWgmma = kern::AttnPath::kWgmma,
                         kWgmmaOne = kern::AttnPath::kWgmmaOne, kCluster = kern::AttnPath::kCluster;

// A decode pass's qk_rope then attention `a` on `stream` (PDL on sm_90),
// from the case's old cache (qk_rope writes rows past..): the output, every
// element checked finite. qkv: [M][ld] fp32, the rope's input.
std::vector<uint16_t> rope_then_attention(AttnRig& rig, const AttnData& d, const DevBuf& qkv, int ld,
                                          const kern::AttnArgs& a, cudaStream_t stream) {
  rig.load(d);
  rig.out.poison();
  rig.scratch.poison();
  set_past(rig.past, d.c.past);
  CUDA_REQUIRE(cudaDeviceSynchronize());  // the stream is non-blocking: order the copies first
  kern::QkRopeArgs r = rig.rope_args(qkv.as<float>(), ld, nullptr, nullptr, 0);
  r.eps = 1e-6f;
  {
    kern::PdlPass pass(d.c.M);  // the launches of a pass of this size: PDL on sm_90
    CUDA_REQUIRE(kern::qk_rope(r, stream));
    CUDA_REQUIRE(kern::attention(a, stream));
  }
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  std::vector<uint16_t> out = rig.out.download<uint16_t>();
  size_t not_finite = 0;
  for (uint16_t h : out) not_finite += !h_is_finite(h);
  REQUIRE(not_finite == 0);
  return out;
}

// The mma.sync kernel's output for each case under PDL after qk_rope
// (rope_then_attention) with set(a, false) in trial 0, then set(a, true)
// in trials 1-3: the same bits every time.
template <class Set>
void check_same_bits(const std::vector<AttnCase>& cases, uint64_t seed, Set set) {
  Rng rng(seed);
  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const AttnCase& c : cases) {
    INFO(describe(c));
    const AttnData d(c, rng);
    AttnRig rig(c, true);
    const int D = c.head_dim, Q = c.n_heads * D, KV = c.n_kv_heads * D, ld = Q + 2 * KV;
    std::vector<float> qkv(size_t(c.M) * ld);
    for (float& x : qkv) x = rng.normal();
    DevBuf d_qkv(qkv.size() * 4);
    d_qkv.upload(qkv);
    std::vector<uint16_t> want;
    for (int trial = 0; trial < 4; ++trial) {
      kern::AttnArgs a = rig.args();
      a.path = kMma;
      set(a, trial > 0);
      const std::vector<uint16_t> out = rope_then_attention(rig, d, d_qkv, ld, a, stream);
      if (trial == 0) {
        want = out;
      } else {
        INFO("trial " << trial);
        CHECK(out == want);
      }
    }
  }
  cudaStreamDestroy(stream);
}

// One decode-step attention (path) captured once in a CUDA graph over a
// cache of 3000 slots filled to its end, replayed at each of `positions`
// (-1: the last slot): the CPU op's rows every time.
void check_graph_replay(int head_dim, kern::AttnPath path, std::initializer_list<int> positions, Rng& rng) {
  const int max_seq = 3000;
  const AttnCase full{head_dim, 32, 8, 1, max_seq - 1, max_seq};
  AttnData d(full, rng);
  AttnRig rig(full, true);
  rig.load(d);
  kern::AttnArgs a = rig.args();
  a.path = path;
  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  set_past(rig.past, 0);
  CUDA_REQUIRE(kern::attention(a, stream));  // warm-up outside the capture
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const cudaError_t launch = kern::attention(a, stream);
  CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
  CUDA_REQUIRE(launch);
  CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
  for (int pos : positions) {
    const int past = pos < 0 ? max_seq - 1 : pos;  // -1: the cache's last slot
    set_past(rig.past, past);
    rig.out.poison();
    CUDA_REQUIRE(cudaDeviceSynchronize());  // the stream is non-blocking: order the copies first
    CUDA_REQUIRE(cudaGraphLaunch(exec, stream));
    CUDA_REQUIRE(cudaStreamSynchronize(stream));
    INFO("graph replay at past " << past);
    check_attention(d, past, rig.out.download<uint16_t>(), rng);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace

TEST_CASE("op attention: prefill, chunked prefill, decode, GQA", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  REQUIRE(kern::attention_supported(64));
  REQUIRE(kern::attention_supported(128));
  REQUIRE_FALSE(kern::attention_supported(96));
  // The cross product: head_dim x GQA 1, 2, 4 x the prompt lengths x past 0,
  // a few, a long cached prefix; max_seq 37 past the end (poisoned tail).
  std::vector<AttnCase> cases;
  for (int D : {64, 128})
    for (const auto& hh : {std::make_pair(8, 8), std::make_pair(16, 8), std::make_pair(32, 8)})
      for (int M : {1, 3, 17, 100, 513, 2048})
        for (int past : {0, 5, 1000}) cases.push_back({D, hh.first, hh.second, M, past, past + M + 37});
  Rng rng(1234);
  for (const AttnCase& c : cases) run_attention_case(c, rng);
}

TEST_CASE("op attention: without split-KV scratch falls back and stays correct", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  const AttnCase cases[] = {
      {128, 32, 8, 1, 1500, 1601},
      {128, 32, 8, 3, 1500, 1603},
      {128, 32, 8, 100, 1500, 1700},
  };
  Rng rng(77);
  for (const AttnCase& c : cases) run_attention_case(c, rng, kAuto, /*with_scratch=*/false);
}

// Small enough for compute-sanitizer's racecheck (minutes, not hours): each
// tile configuration (kBig, kMid, kSmall with split-KV) once, auto and mma.sync.
TEST_CASE("op attention: every tile configuration on small shapes", "[gpu][attention][sanitize]") {
  QSP_REQUIRE_GPU();
  const AttnCase cases[] = {
      {128, 32, 8, 256, 64, 400},
      {128, 32, 8, 40, 100, 200},
      {128, 32, 8, 1, 900, 1000},
      {64, 16, 4, 7, 30, 60},
  };
  Rng rng(31);
  for (const AttnCase& c : cases) run_attention_case(c, rng);
  for (const AttnCase& c : cases) run_attention_case(c, rng, kMma);
  // The sm_90a kernel: a tile crossing the cache's valid end (the poisoned
  // V rows must be zeroed) and a group of 5 (125 useful rows per block).
  // Both block sizes (two consumer warpgroups, one).
  if (!run_attention_case({128, 32, 8, 40, 100, 200}, rng, kWgmma))
    std::printf("SKIPPED: wgmma attention (needs sm_90a), mma.sync attention still tested\n");
  run_attention_case({128, 10, 2, 33, 7, 60}, rng, kWgmma);
  run_attention_case({128, 32, 8, 40, 100, 200}, rng, kWgmmaOne);
  run_attention_case({128, 10, 2, 33, 7, 60}, rng, kWgmmaOne);
}

// Both kernel families forced on the prompt lengths, past 0 and a cached
// prefix, max_seq past the end (the poisoned tail), GQA groups 4, 5, 8 and 1
// (group 5 packs 125 of 128 rows); mma.sync from M = 100 on.
TEST_CASE("op attention: wgmma and mma.sync paths, each forced", "[gpu][attention][wgmma]") {
  QSP_REQUIRE_GPU();
  std::vector<AttnCase> cases;
  for (int M : {1, 3, 17, 100, 513, 2048}) {
    cases.push_back({128, 32, 8, M, 0, M + 37});
    cases.push_back({128, 32, 8, M, 300, 300 + M + 129});
  }
  cases.push_back({128, 40, 8, 700, 50, 800});
  cases.push_back({128, 64, 8, 257, 1000, 1300});
  cases.push_back({128, 8, 8, 300, 0, 300});
  cases.push_back({128, 32, 8, 4096, 4096, 8192});
  Rng rng(2026);
  bool wg = true;
  for (const AttnCase& c : cases) {
    wg = run_attention_case(c, rng, kWgmma) && wg;
    run_attention_case(c, rng, kWgmmaOne);  // blocks of one consumer warpgroup (64 rows)
    if (c.M >= 100) run_attention_case(c, rng, kMma);
  }
  if (!wg) std::printf("SKIPPED: wgmma attention (needs sm_90a), mma.sync attention still tested\n");
  // head_dim 64 has no wgmma kernel.
  AttnRig rig(AttnCase{64, 16, 4, 300, 0, 400}, true);
  kern::AttnArgs a = rig.args();
  a.path = kWgmma;
  CHECK(kern::attention(a, nullptr) == cudaErrorNotSupported);
  a.path = kWgmmaOne;
  CHECK(kern::attention(a, nullptr) == cudaErrorNotSupported);
  a.path = static_cast<kern::AttnPath>(7);
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("op attention: other GQA groupings (1 KV head, group 5, group 8) and real shapes", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  const AttnCase cases[] = {
      {128, 8, 1, 1, 700, 800},    {128, 8, 1, 64, 40, 200},     {64, 10, 2, 3, 300, 400},
      {128, 40, 8, 130, 20, 300},  {128, 64, 8, 1, 4000, 4097},  {64, 32, 1, 33, 0, 40},
      {128, 16, 8, 513, 0, 600},   // Qwen3-0.6B
      {128, 32, 8, 100, 17, 200},  // Qwen3-8B, a short second chunk
  };
  Rng rng(99);
  for (const AttnCase& c : cases) run_attention_case(c, rng);
}

TEST_CASE("op attention: decode step captured once in a CUDA graph is right at every position", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  Rng rng(4242);
  for (int D : {64, 128}) check_graph_replay(D, kAuto, {0, 1, 63, 64, 65, 700, 2047, -1}, rng);
}

// AttnArgs::prefetch: the mma.sync kernels copy the K / V tiles of keys
// below past before waiting for qk_rope (launched just before, with PDL as
// in a decode pass), which writes the chunk's keys at past... The output
// must be the bits of copying after the wait, on splits that start below,
// across and at past, for decode steps and chunks, trial after trial.
TEST_CASE("op attention: cache tiles copied before qk_rope's end give the same bits", "[gpu][attention][decode]") {
  QSP_REQUIRE_GPU();
  check_same_bits({{128, 32, 8, 1, 0, 40},
                   {128, 32, 8, 1, 31, 80},
                   {128, 32, 8, 1, 32, 100},
                   {128, 32, 8, 1, 64, 2065},
                   {128, 32, 8, 1, 2047, 2065},
                   {128, 16, 8, 1, 3000, 4100},
                   {64, 16, 4, 1, 700, 800},
                   {128, 32, 8, 3, 500, 600},
                   {128, 32, 8, 17, 65, 200},
                   {128, 32, 8, 100, 1000, 1200}},
                  6061, [](kern::AttnArgs& a, bool on) {
                    a.prefetch = on ? kern::AttnPrefetch::kOn : kern::AttnPrefetch::kOff;
                  });
  // An out-of-range value is refused.
  AttnRig rig(AttnCase{128, 8, 4, 4, 0, 16}, true);
  kern::AttnArgs a = rig.args();
  a.prefetch = static_cast<kern::AttnPrefetch>(5);
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaGetLastError());
}

// AttnPath::kCluster (kernels/attention_decode.cu): the decode step's
// split-KV merged inside one launch by a cluster of 8 blocks a KV head.
// Against the CPU op on GQA groups 1, 2, 4, 8, head_dim 64 / 128, from one
// cached key to three rounds of rows a warp (a round: 64 x 48 = 3072 keys
// for groups up to 4, 64 x 40 = 2560 for 8; both edges of it), the
// poisoned tail past the cache's end; under PDL after qk_rope (the rows
// below past copied before the wait) against the mma.sync kernel on the same
// data, the same bits trial after trial; a graph replayed at moving
// positions; the shapes it does not take refused.
TEST_CASE("op attention: the decode step's cluster kernel", "[gpu][attention][decode][cluster]") {
  QSP_REQUIRE_GPU();
  Rng rng(7070);
  bool ran = true;
  for (int D : {64, 128})
    for (const auto& hh : {std::make_pair(8, 8), std::make_pair(16, 8), std::make_pair(32, 8), std::make_pair(64, 8)})
      for (int past : {0, 1, 5, 31, 32, 100, 513, 2047, 2048, 2559, 2560, 3071, 3072, 4500, 6200})
        ran = run_attention_case({D, hh.first, hh.second, 1, past, past + 1 + 37}, rng, kCluster) && ran;
  ran = run_attention_case({128, 32, 8, 1, 999, 1000}, rng, kCluster) && ran;  // the cache full
  ran = run_attention_case({128, 16, 2, 1, 300, 400}, rng, kCluster) && ran;   // group 8, 2 KV heads
  if (!ran) {
    std::printf("SKIPPED: the cluster decode attention (needs sm_90)\n");
    return;
  }
  // Clusters of 16 blocks a KV head (non-portable): where the GPU holds 8
  // of them at once; one key to three rounds a warp (6144 / 5120 keys a
  // round).
  bool ran16 = true;
  for (int D : {64, 128})
    for (const auto& hh : {std::make_pair(8, 8), std::make_pair(16, 8), std::make_pair(32, 8), std::make_pair(64, 8)})
      for (int past : {0, 1, 33, 600, 2048, 4095, 4096, 6143, 6144, 12400})
        ran16 = run_attention_case({D, hh.first, hh.second, 1, past, past + 1 + 37}, rng, kCluster, true, 16) && ran16;
  if (!ran16) std::printf("  note: 16-block clusters of 8 KV heads do not fit this GPU at once (8 blocks ran)\n");
  {
    AttnRig rig(AttnCase{128, 32, 8, 1, 10, 40}, true);
    kern::AttnArgs a = rig.args();
    a.path = kCluster;
    a.cluster_ctas = 12;  // neither 8 nor 16
    CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  }

  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // After qk_rope under PDL, against the mma.sync kernel on the same data.
  const AttnCase pdl_cases[] = {{128, 32, 8, 1, 0, 40},      {128, 32, 8, 1, 64, 2065}, {128, 32, 8, 1, 2047, 2065},
                                {128, 16, 8, 1, 3000, 4100}, {64, 16, 4, 1, 700, 800}};
  for (const AttnCase& c : pdl_cases) {
    INFO(describe(c));
    const AttnData d(c, rng);
    AttnRig rig(c, true);
    const int D = c.head_dim, Q = c.n_heads * D, KV = c.n_kv_heads * D, ld = Q + 2 * KV;
    std::vector<float> qkv(static_cast<size_t>(ld));
    for (float& x : qkv) x = rng.normal();
    DevBuf d_qkv(qkv.size() * 4);
    d_qkv.upload(qkv);
    std::vector<uint16_t> ref, first;
    for (int trial = 0; trial < 4; ++trial) {
      kern::AttnArgs a = rig.args();
      a.path = trial == 0 ? kMma : kCluster;
      const std::vector<uint16_t> out = rope_then_attention(rig, d, d_qkv, ld, a, stream);
      if (trial == 0) {
        ref = out;
        continue;
      }
      INFO("trial " << trial);
      RelL2 err;
      for (size_t i = 0; i < out.size(); ++i) err.add(qsp::fp16_to_fp32(out[i]), qsp::fp16_to_fp32(ref[i]));
      INFO("relative L2 against mma.sync " << err.value() << ", max abs " << err.max_abs);
      CHECK(err.value() < 2e-3);
      CHECK(err.max_abs < 2e-2);
      if (trial == 1)
        first = out;
      else
        CHECK(out == first);
    }
  }

  cudaStreamDestroy(stream);
  // One graph, replayed at moving positions (the grid does not depend on past).
  check_graph_replay(128, kCluster, {0, 1, 63, 64, 65, 700, 2047, 2048, -1}, rng);

  // What it does not take: a chunk of more than one token, group 5.
  AttnRig rig(AttnCase{128, 32, 8, 3, 10, 40}, true);
  kern::AttnArgs a = rig.args();
  a.path = kCluster;
  CHECK(kern::attention(a, nullptr) == cudaErrorNotSupported);
  AttnRig rig5(AttnCase{128, 10, 2, 1, 10, 40}, true);
  a = rig5.args();
  a.path = kCluster;
  CHECK(kern::attention(a, nullptr) == cudaErrorNotSupported);
  CUDA_REQUIRE(cudaGetLastError());
}

// AttnArgs::rope: the cluster kernel doing the step's QK-norm / RoPE / KV
// write itself must give the bits of qk_rope() then the cluster kernel (both
// under PDL): the outputs and both caches whole, for GQA groups 1 / 2 / 4 / 8,
// head_dim 64 / 128, both rotation styles, with and without QK-norm, from an
// empty cache to three rounds a warp, clusters of 8 and 16 blocks. Refused:
// another kernel, a batched pass, arguments of another step.
TEST_CASE("op attention: the cluster kernel with qk_rope folded in gives qk_rope's bits",
          "[gpu][attention][decode][cluster]") {
  QSP_REQUIRE_GPU();
  if (device_major() < 9) {
    std::printf("SKIPPED: the cluster decode attention (needs sm_90)\n");
    return;
  }
  Rng rng(8181);
  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct Shape {
    int D, H, KVH;
  };
  int case_i = 0;
  for (const Shape sh : {Shape{128, 16, 8}, Shape{128, 32, 8}, Shape{128, 64, 8}, Shape{128, 8, 8}, Shape{64, 16, 4}})
    for (int past : {0, 1, 31, 300, 2047, 3000, 6200}) {
      const int style = (case_i & 1) ? QSP_ROPE_INTERLEAVED : QSP_ROPE_NEOX;
      const bool norms = (case_i & 2) == 0;
      const int ctas = (case_i % 3 == 2) ? 16 : 8;
      ++case_i;
      const AttnCase c{sh.D, sh.H, sh.KVH, 1, past, past + 1 + 20};
      INFO(describe(c) << ", style " << style << (norms ? ", QK-norm" : "") << ", clusters of " << ctas);
      const AttnData d(c, rng);
      AttnRig rig(c, true);
      const int D = c.head_dim, ld = (c.n_heads + 2 * c.n_kv_heads) * D + 8;
      std::vector<float> qkv(static_cast<size_t>(ld)), nw(static_cast<size_t>(2 * D));
      for (float& x : qkv) x = 2.0f * rng.normal();
      for (float& x : nw) x = 1.0f + 0.3f * rng.normal();
      DevBuf d_qkv(qkv.size() * 4), d_nw(nw.size() * 4);
      d_qkv.upload(qkv);
      d_nw.upload(nw);
      const float* qn = norms ? d_nw.as<float>() : nullptr;
      const float* kn = norms ? d_nw.as<float>() + D : nullptr;
      std::vector<uint16_t> out[2], kc[2], vc[2];
      for (int fused = 0; fused < 2; ++fused) {
        rig.load(d);
        rig.out.poison();
        set_past(rig.past, past);
        CUDA_REQUIRE(cudaDeviceSynchronize());
        kern::QkRopeArgs r = rig.rope_args(d_qkv.as<float>(), ld, qn, kn, style);
        r.eps = 1e-6f;
        kern::AttnArgs a = rig.args();
        a.path = kCluster;
        a.cluster_ctas = ctas;
        cudaError_t e;
        {
          kern::PdlPass pass(1);
          if (fused) {
            a.rope = &r;
          } else {
            CUDA_REQUIRE(kern::qk_rope(r, stream));
          }
          e = kern::attention(a, stream);
        }
        if (e == cudaErrorNotSupported && ctas == 16) break;  // 16-block clusters do not fit: nothing to compare
        CUDA_REQUIRE(e);
        CUDA_REQUIRE(cudaStreamSynchronize(stream));
        out[fused] = rig.out.download<uint16_t>();
        kc[fused] = rig.k.download<uint16_t>();
        vc[fused] = rig.v.download<uint16_t>();
      }
      if (out[1].empty()) continue;
      CHECK(out[1] == out[0]);
      CHECK(kc[1] == kc[0]);
      CHECK(vc[1] == vc[0]);
      size_t not_finite = 0;
      for (uint16_t h : out[1]) not_finite += !h_is_finite(h);
      CHECK(not_finite == 0);
    }
  cudaStreamDestroy(stream);

  // Refused: the mma.sync kernel; a rope of another position or cache.
  AttnRig rig(AttnCase{128, 32, 8, 1, 10, 40}, true);
  DevBuf d_qkv(size_t(48) * 128 * 4);
  kern::QkRopeArgs r = rig.rope_args(d_qkv.as<float>(), 48 * 128, nullptr, nullptr, QSP_ROPE_NEOX);
  kern::AttnArgs a = rig.args();
  a.rope = &r;
  a.path = kMma;
  CHECK(kern::attention(a, nullptr) == cudaErrorNotSupported);
  a.path = kCluster;
  DevBuf other_past(sizeof(int32_t));
  r.past = other_past.as<int32_t>();
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  r = rig.rope_args(d_qkv.as<float>(), 48 * 128 - 1, nullptr, nullptr, QSP_ROPE_NEOX);  // ld too short
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaGetLastError());
}

// A batched pass (AttnArgs::seqs) of decode-sized pieces, each with its own
// cache, position and length: every row the CPU op's for its piece, every
// element finite. (The model tests check batches end to end; this one
// checks the launch alone, on caches of different sizes side by side.)
TEST_CASE("op attention: a batched pass's decode pieces follow the CPU op",
          "[gpu][attention][batch][sanitize]") {
  QSP_REQUIRE_GPU();
  Rng rng(7341);
  struct Shape {
    int head_dim, n_heads, n_kv_heads;
  };
  for (const Shape sh : {Shape{128, 32, 8}, Shape{128, 16, 8}, Shape{64, 8, 8}}) {
    const int group = sh.n_heads / sh.n_kv_heads, D = sh.head_dim;
    // Pieces: {tokens, past, max_seq}; at most 16 / group tokens (decode-sized tiles).
    const int most = std::max(1, 16 / group);
    const std::vector<std::array<int, 3>> pieces = {{1, 0, 64},   {1, 1, 40},     {most, 37, 300}, {1, 512, 600},
                                                    {1, 1000, 1100}, {std::min(3, most), 130, 200}, {1, 63, 64}};
    INFO("head_dim " << D << ", heads " << sh.n_heads << "/" << sh.n_kv_heads);
    std::vector<AttnData> data;
    std::vector<std::unique_ptr<DevBuf>> caches;
    std::vector<kern::SeqDesc> seqs;
    std::vector<uint16_t> q_all;
    int M = 0, max_piece = 0;
    for (const auto& pc : pieces) {
      data.emplace_back(AttnCase{D, sh.n_heads, sh.n_kv_heads, pc[0], pc[1], pc[2]}, rng);
      const AttnData& d = data.back();
      caches.push_back(std::make_unique<DevBuf>(d.k.size() * 2));
      caches.push_back(std::make_unique<DevBuf>(d.v.size() * 2));
      caches[caches.size() - 2]->upload(d.k);
      caches.back()->upload(d.v);
      kern::SeqDesc sd;
      sd.k_cache = caches[caches.size() - 2]->as<__half>();
      sd.v_cache = caches.back()->as<__half>();
      sd.max_seq = pc[2];
      sd.past = pc[1];
      sd.start = M;
      sd.n = pc[0];
      seqs.push_back(sd);
      q_all.insert(q_all.end(), d.q.begin(), d.q.end());
      M += pc[0];
      max_piece = std::max(max_piece, pc[0]);
    }
    const int tile = kern::attention_batch_tile_tokens(max_piece, sh.n_heads, sh.n_kv_heads, D);
    REQUIRE(tile >= 1);
    std::vector<int2> tiles;
    for (size_t i = 0; i < pieces.size(); ++i)
      for (int t = 0; t < pieces[i][0]; t += tile) tiles.push_back(make_int2(int(i), t));
    DevBuf d_q(q_all.size() * 2), d_out(q_all.size() * 2), d_seqs(seqs.size() * sizeof(kern::SeqDesc)),
        d_tiles(tiles.size() * sizeof(int2));
    d_q.upload(q_all);
    d_seqs.upload(seqs);
    d_tiles.upload(tiles);
    {
      kern::AttnArgs a;
      a.q = d_q.as<__half>();
      a.out = d_out.as<__half>();
      a.M = M;
      a.n_heads = sh.n_heads;
      a.n_kv_heads = sh.n_kv_heads;
      a.head_dim = D;
      a.scale = 1.0f / std::sqrt(float(D));
      a.seqs = d_seqs.as<kern::SeqDesc>();
      a.tiles = d_tiles.as<int2>();
      a.n_tiles = int32_t(tiles.size());
      a.max_piece = max_piece;
      d_out.poison();
      CUDA_REQUIRE(kern::attention(a, nullptr));
      CUDA_REQUIRE(cudaDeviceSynchronize());
      const std::vector<uint16_t> out = d_out.download<uint16_t>();
      size_t not_finite = 0;
      for (uint16_t h : out) not_finite += !h_is_finite(h);
      REQUIRE(not_finite == 0);
      const size_t row = size_t(sh.n_heads) * D;
      RelL2 err;
      for (size_t i = 0; i < pieces.size(); ++i)
        for (int m = 0; m < pieces[i][0]; ++m) {
          const std::vector<float> want = data[i].cpu_row(m, pieces[i][1]);
          for (size_t e = 0; e < want.size(); ++e)
            err.add(qsp::fp16_to_fp32(out[(size_t(seqs[i].start) + m) * row + e]), want[e]);
        }
      INFO("relative L2 error " << err.value() << ", max abs error " << err.max_abs);
      CHECK(err.value() < 2e-3);
      CHECK(err.max_abs < 2e-2);
    }
  }
}

TEST_CASE("op attention: rejects unsupported arguments", "[gpu][attention]") {
  QSP_REQUIRE_GPU();
  AttnRig rig(AttnCase{128, 8, 4, 4, 0, 16}, true);
  kern::AttnArgs a = rig.args();
  a.head_dim = 96;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.n_kv_heads = 3;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.past = nullptr;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.M = 0;
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  a = rig.args();
  a.max_seq = 2;  // fewer slots than the chunk
  CHECK(kern::attention(a, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
}
