// The whole model on the CUDA backend against the CPU reference, through the
// public C API: random models of realistic scale in real layer shapes,
// Qwen3 and Llama style, Q4_0 / Q8_0 / mixed, one-shot, chunked and decode.
// QSP_POISON=1 makes the CUDA backend fill its scratch and logits with NaN
// before every chunk, so an element a kernel forgets to write fails here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "support/api.h"
#include "support/cuda.h"
#include "support/logits.h"
#include "support/model.h"

using namespace qsp_test;

namespace {

ModelSpec qwen3_shape(int32_t wtype, uint64_t seed) { return qwen3_06b_layers(wtype, seed); }

ModelSpec llama_shape(int32_t wtype, uint64_t seed) {
  ModelSpec s;  // Llama style: interleaved RoPE, no QK-norm, GQA 4, head_dim 64
  s.n_layers = 2;
  s.hidden = 512;
  s.ffn = 1536;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.vocab = 32000;
  s.max_seq = 4096 + 64;
  s.qwen3 = false;
  s.wtype = wtype;
  s.embd_type = QSP_DTYPE_F16;
  s.tied = false;
  s.rope_theta = 500000.0f;
  s.seed = seed;
  return s;
}

// QSP_POISON=1 for the scope: NaN in scratch and logits before each chunk.
struct Poison : ScopedEnv {
  Poison() : ScopedEnv("QSP_POISON", "1") {}
};

// The projections of layer l get dtype types[l % size][slot] (kWGate and
// kWUp one dtype: the SwiGLU pair shares a format on the GPU).
struct LayerTypes {
  int32_t q, k, v, o, gate_up, down;
};
void retype(TestModel& m, const std::vector<LayerTypes>& types, int32_t embd, int32_t head) {
  qsp_test::retype(
      m,
      [&](uint32_t l, LayerSlot s) {
        const LayerTypes& t = types[l % types.size()];
        switch (s) {
          case kWq: return t.q;
          case kWk: return t.k;
          case kWv: return t.v;
          case kWo: return t.o;
          case kWDown: return t.down;
          default: return t.gate_up;
        }
      },
      embd, head);
}

void compare_model(const TestModel& m, const char* label, const std::vector<uint32_t>& lengths, double tol = 1e-2) {
  const ModelSpec& spec = m.spec;
  Poison poison;
  qsp_context* cpu = m.create(QSP_BACKEND_CPU);
  qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
  REQUIRE(cpu);
  REQUIRE(gpu);
  for (uint32_t n : lengths) {
    std::printf("  %s %s n=%u\n", spec.qwen3 ? "qwen3" : "llama", label, n);
    std::vector<int32_t> tokens = random_tokens(n, spec.vocab, spec.seed * 1000 + n);
    REQUIRE(qsp_kv_clear(cpu) == QSP_OK);
    REQUIRE(qsp_kv_clear(gpu) == QSP_OK);
    Logits ref = run(cpu, tokens, {n});
    Logits one = run(gpu, tokens, {n});
    check_close(one, ref, tol);
    if (n >= 3) {
      // The same prompt in uneven chunks: positions continue from the cache.
      REQUIRE(qsp_kv_clear(gpu) == QSP_OK);
      const uint32_t a = n / 3, b = n / 2;
      Logits chunked = run(gpu, tokens, {a, b, n - a - b});
      check_close(chunked, ref);
      CHECK(rel_l2(chunked.v.data(), one.v.data(), one.v.size()) <= 5e-3);
    }
  }
  qsp_context_destroy(cpu);
  qsp_context_destroy(gpu);
}

void compare_lengths(const ModelSpec& spec, const std::vector<uint32_t>& lengths) {
  TestModel m = make_model(spec);
  compare_model(m, spec.wtype < 0 ? "mixed" : qsp_dtype_name(spec.wtype), lengths);
}

// A K-quant mix as llama.cpp's quantizer writes it: `main` for most matrices
// and the embedding, `big` for every ffn_down, the attn_v of every other
// layer (llama.cpp: the first and last eighth and every third between) and
// the (untied) LM head (Q4_K_M: Q4_K + Q6_K; Q5_K_M: Q5_K + Q6_K). Built from
// a spec of `main`, then those tensors re-drawn in `big` under the same
// handles. The layers whose V is `big` run Q | K as one GEMM and V apart.
TestModel kquant_mix_model(ModelSpec spec, int32_t main, int32_t big) {
  spec.wtype = main;
  spec.embd_type = main;
  spec.tied = false;
  TestModel m = make_model(spec);
  std::mt19937_64 rng(spec.seed * 7919 + 3);
  const uint64_t H = spec.hidden;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    auto& L = m.layers[l];
    HostTensor& d = L[kWDown];
    d = make_tensor(rng, d.handle, big, d.rows, d.cols, 0.0f, 0.6f / std::sqrt(float(spec.ffn)));
    if (l % 2 == 0) {
      HostTensor& v = L[kWv];
      v = make_tensor(rng, v.handle, big, v.rows, v.cols, 0.0f, 0.6f / std::sqrt(float(H)));
    }
  }
  m.lm_head = make_tensor(rng, m.lm_head.handle, big, spec.vocab, H, 0.0f, 2.0f / std::sqrt(float(H)));
  return m;
}

}  // namespace

// The bar for the K-quant mixes: last-token logits within rel L2 2e-3
// of the CPU reference and the same greedy token (check_close), one-shot and
// chunked, odd token counts.
TEST_CASE("cuda model: Qwen3 shape, Q4_K_M-like mix (Q4_K, ffn_down and LM head Q6_K)", "[gpu][model][kquant]") {
  QSP_REQUIRE_GPU();
  compare_model(kquant_mix_model(qwen3_shape(QSP_DTYPE_Q4_K, 61), QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K), "q4_K_m-like",
                {1, 3, 17, 100, 513, 2048}, 2e-3);
}

TEST_CASE("cuda model: Llama style, Q5_K_M-like and Q6_K", "[gpu][model][kquant]") {
  QSP_REQUIRE_GPU();
  compare_model(kquant_mix_model(llama_shape(QSP_DTYPE_Q5_K, 62), QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K), "q5_K_m-like",
                {1, 17, 513}, 2e-3);
  compare_model(kquant_mix_model(llama_shape(QSP_DTYPE_Q6_K, 63), QSP_DTYPE_Q6_K, QSP_DTYPE_Q6_K), "q6_K",
                {3, 100}, 2e-3);
  compare_model(kquant_mix_model(llama_shape(QSP_DTYPE_Q4_K, 64), QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K), "q4_K_m-like",
                {3, 100, 2048}, 2e-3);
}

TEST_CASE("cuda model: decode steps of a Q4_K_M-like model follow the CPU", "[gpu][model][decode][kquant]") {
  QSP_REQUIRE_GPU();
  Poison poison;
  TestModel m = kquant_mix_model(llama_shape(QSP_DTYPE_Q4_K, 65), QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K);
  qsp_context* cpu = m.create(QSP_BACKEND_CPU);
  qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
  REQUIRE(cpu);
  REQUIRE(gpu);
  std::vector<int32_t> prompt = random_tokens(17, m.spec.vocab, 78);
  Logits ref = run(cpu, prompt, {17});
  check_close(run(gpu, prompt, {17}), ref, 2e-3);
  for (int step = 0; step < 8; ++step) {  // the decode graph: captured once, replayed
    std::vector<int32_t> t{ref.greedy};
    Logits r = run(cpu, t, {1});
    check_close(run(gpu, t, {1}), r, 2e-3);
    ref = r;
  }
  qsp_context_destroy(cpu);
  qsp_context_destroy(gpu);
}

TEST_CASE("cuda model: Qwen3 shape, Q4_0, one-shot and chunked", "[gpu][model]") {
  QSP_REQUIRE_GPU();
  compare_lengths(qwen3_shape(QSP_DTYPE_Q4_0, 11), {1, 3, 17, 100, 513, 2048});
}

TEST_CASE("cuda model: Qwen3 shape, Q8_0", "[gpu][model]") {
  QSP_REQUIRE_GPU();
  compare_lengths(qwen3_shape(QSP_DTYPE_Q8_0, 12), {1, 17, 513, 2048});
}

TEST_CASE("cuda model: Qwen3 shape, mixed Q4_0/Q8_0 layers", "[gpu][model]") {
  QSP_REQUIRE_GPU();
  compare_lengths(qwen3_shape(-1, 13), {3, 100, 2048});
}

TEST_CASE("cuda model: Llama style, Q4_0", "[gpu][model]") {
  QSP_REQUIRE_GPU();
  compare_lengths(llama_shape(QSP_DTYPE_Q4_0, 21), {1, 3, 17, 100, 513, 2048});
}

TEST_CASE("cuda model: Llama style, Q8_0 and mixed", "[gpu][model]") {
  QSP_REQUIRE_GPU();
  compare_lengths(llama_shape(QSP_DTYPE_Q8_0, 22), {1, 17, 513});
  compare_lengths(llama_shape(-1, 23), {3, 100, 2048});
}

// ---- Q4_1 / Q5_0 / Q5_1 / Q2_K / Q3_K: llama-quantize-like mixes (K-quant
// layers with legacy fallbacks), Q | K | V grouped (one format) and not.
TEST_CASE("cuda model: Qwen3 shape, mixed Q4_1 / Q5_0 / Q5_1 layers", "[gpu][model][legacy]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(qwen3_shape(QSP_DTYPE_Q4_0, 71));
  retype(m,
         {{QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_0, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_1, QSP_DTYPE_Q4_1},
          {QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1}},
         QSP_DTYPE_Q5_1, QSP_DTYPE_Q5_1);  // tied: the Q5_1 embedding is the LM head
  compare_model(m, "q4_1/q5_0/q5_1 mix", {1, 3, 17, 100, 513, 2048}, 2e-3);
}

TEST_CASE("cuda model: Llama style, mixed Q4_1 / Q5_0 / Q5_1", "[gpu][model][legacy]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(llama_shape(QSP_DTYPE_Q4_0, 72));
  retype(m,
         {{QSP_DTYPE_Q4_1, QSP_DTYPE_Q4_1, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1, QSP_DTYPE_Q5_0},
          {QSP_DTYPE_Q5_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q4_1, QSP_DTYPE_Q4_1, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_1}},
         QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_0);
  compare_model(m, "q4_1/q5_0/q5_1 mix", {1, 17, 513}, 2e-3);
}

// As llama-quantize's Q2_K / Q3_K_M: K-quant projections with legacy
// fallbacks, every format of this group in some slot.
TEST_CASE("cuda model: Qwen3 shape, mixed Q2_K / Q3_K / legacy layers", "[gpu][model][kquant]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(qwen3_shape(QSP_DTYPE_Q4_0, 73));
  retype(m,
         {{QSP_DTYPE_Q3_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K},
          {QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q5_0, QSP_DTYPE_Q4_1, QSP_DTYPE_Q3_K, QSP_DTYPE_Q5_1}},
         QSP_DTYPE_Q3_K, QSP_DTYPE_Q3_K);  // tied
  compare_model(m, "q2_K/q3_K/legacy mix", {1, 3, 17, 100, 513, 2048}, 2e-3);
}

TEST_CASE("cuda model: Llama style, mixed Q2_K / Q3_K", "[gpu][model][kquant]") {
  QSP_REQUIRE_GPU();
  TestModel m = make_model(llama_shape(QSP_DTYPE_Q4_0, 74));
  retype(m,
         {{QSP_DTYPE_Q2_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K},
          {QSP_DTYPE_Q3_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q5_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q3_K, QSP_DTYPE_Q2_K}},
         QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K);
  compare_model(m, "q2_K/q3_K mix", {1, 17, 513}, 2e-3);
}

TEST_CASE("cuda model: decode steps of a Q2_K / Q3_K / legacy mix follow the CPU", "[gpu][model][decode][kquant]") {
  QSP_REQUIRE_GPU();
  Poison poison;
  TestModel m = make_model(llama_shape(QSP_DTYPE_Q4_0, 75));
  retype(m,
         {{QSP_DTYPE_Q3_K, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_0, QSP_DTYPE_Q2_K, QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_1},
          {QSP_DTYPE_Q2_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q2_K, QSP_DTYPE_Q5_1, QSP_DTYPE_Q3_K, QSP_DTYPE_Q4_1}},
         QSP_DTYPE_Q5_0, QSP_DTYPE_Q3_K);
  qsp_context* cpu = m.create(QSP_BACKEND_CPU);
  qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
  REQUIRE(cpu);
  REQUIRE(gpu);
  std::vector<int32_t> prompt = random_tokens(17, m.spec.vocab, 79);
  Logits ref = run(cpu, prompt, {17});
  check_close(run(gpu, prompt, {17}), ref, 2e-3);
  for (int step = 0; step < 8; ++step) {  // the decode graph: captured once, replayed
    std::vector<int32_t> t{ref.greedy};
    Logits r = run(cpu, t, {1});
    check_close(run(gpu, t, {1}), r, 2e-3);
    ref = r;
  }
  qsp_context_destroy(cpu);
  qsp_context_destroy(gpu);
}

// The decode path with the attention's and the FFN's RMSNorm formed in the
// prologue of the GEMVs that read them (the default; QSP_NORM_IN=0, read
// when a context is created, launches rmsnorm instead): the same bits as
// the rmsnorm launches, so the logits equal the unfused GPU context's exactly, through prompts the GEMV takes whole (up
// to 8 tokens), past them (9, 17: nothing fused) and decode steps through
// the graph; a context of 2 shards on one rank fuses nothing (its shards
// add into x between their GEMMs) and still follows the CPU.
TEST_CASE("cuda model: the RMSNorm formed in the GEMV's prologue equals the rmsnorm launches",
          "[gpu][model][decode][fuse]") {
  QSP_REQUIRE_GPU();
  Poison poison;
  for (int variant = 0; variant < 2; ++variant) {
    const bool qwen = variant == 0;
    TestModel m = qwen ? make_model(qwen3_shape(QSP_DTYPE_Q4_0, 93))
                       : kquant_mix_model(llama_shape(QSP_DTYPE_Q4_K, 94), QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K);
    const double tol = qwen ? 1e-2 : 2e-3;  // as the plain model tests of these types
    qsp_context* cpu = m.create(QSP_BACKEND_CPU);
    qsp_context* fused = m.create(QSP_BACKEND_CUDA);
    qsp_context* plain = nullptr;
    qsp_context* shards = nullptr;
    {
      qsp_context_params p = m.params;
      p.backend = QSP_BACKEND_CUDA;
      p.n_devices = 2;
      p.device_mask = 0x1;
      REQUIRE(qsp_context_create(&p, &shards) == QSP_OK);
      REQUIRE(m.upload(shards) == QSP_OK);
      ScopedEnv off("QSP_NORM_IN", "0");
      plain = m.create(QSP_BACKEND_CUDA);
    }
    REQUIRE(cpu);
    REQUIRE(plain);
    REQUIRE(fused);
    REQUIRE(shards);
    auto same = [](const Logits& a, const Logits& b) {
      REQUIRE(a.v.size() == b.v.size());
      size_t diff = 0;
      for (size_t i = 0; i < a.v.size(); ++i) diff += a.v[i] != b.v[i];
      CHECK(diff == 0);
      CHECK(a.greedy == b.greedy);
    };
    Logits ref;
    for (uint32_t n : {1u, 3u, 8u, 9u, 17u}) {
      std::printf("  %s norm in prologue n=%u\n", qwen ? "qwen3 q4_0" : "llama q4_K_m-like", n);
      const std::vector<int32_t> tokens = random_tokens(n, m.spec.vocab, 950 + n);
      for (qsp_context* c : {cpu, plain, fused, shards}) REQUIRE(qsp_kv_clear(c) == QSP_OK);
      ref = run(cpu, tokens, {n});
      const Logits f = run(fused, tokens, {n});
      check_close(f, ref, tol);
      same(f, run(plain, tokens, {n}));
      check_close(run(shards, tokens, {n}), ref, tol);
    }
    for (int step = 0; step < 6; ++step) {  // the decode graph, captured with the prologue GEMVs
      const std::vector<int32_t> t{ref.greedy};
      const Logits r = run(cpu, t, {1});
      const Logits f = run(fused, t, {1});
      check_close(f, r, tol);
      same(f, run(plain, t, {1}));
      check_close(run(shards, t, {1}), r, tol);
      ref = r;
    }
    for (qsp_context* c : {cpu, plain, fused, shards}) qsp_context_destroy(c);
  }
}

TEST_CASE("cuda model: decode steps through the CUDA graph follow the CPU", "[gpu][model][decode]") {
  QSP_REQUIRE_GPU();
  Poison poison;
  for (bool qwen : {true, false}) {
    ModelSpec spec = qwen ? qwen3_shape(QSP_DTYPE_Q4_0, 31) : llama_shape(QSP_DTYPE_Q8_0, 32);
    TestModel m = make_model(spec);
    qsp_context* cpu = m.create(QSP_BACKEND_CPU);
    qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
    REQUIRE(cpu);
    REQUIRE(gpu);
    std::vector<int32_t> prompt = random_tokens(17, spec.vocab, 77);
    Logits ref = run(cpu, prompt, {17});
    check_close(run(gpu, prompt, {17}), ref);
    // Feed the reference's greedy token back, one step at a time: the graph
    // is captured on the first step and replayed at every later position.
    for (int step = 0; step < 8; ++step) {
      std::vector<int32_t> t{ref.greedy};
      Logits r = run(cpu, t, {1});
      Logits g = run(gpu, t, {1});
      check_close(g, r);
      ref = r;
    }
    uint32_t len = 0;
    REQUIRE(qsp_kv_length(gpu, &len) == QSP_OK);
    CHECK(len == 25);
    // Truncate and redo: the graph must read the new position.
    REQUIRE(qsp_kv_truncate(gpu, 17) == QSP_OK);
    REQUIRE(qsp_kv_truncate(cpu, 17) == QSP_OK);
    std::vector<int32_t> t{int32_t(spec.vocab - 1)};
    check_close(run(gpu, t, {1}), run(cpu, t, {1}));
    qsp_context_destroy(cpu);
    qsp_context_destroy(gpu);
  }
}

// The decode step keeps two graphs: one for caches short enough for the
// attention's one-launch kernel (kern::attention_cluster_keys: its bound,
// $QSP_ATTN_CLUSTER_KEYS or by GQA group; 0 when off) and one for the
// rest. Steps from below the bound to past it, then truncated back below
// it and on: each against the CPU (whatever the bound; with it 0 every
// step takes the one graph).
TEST_CASE("cuda model: decode steps across the short-cache bound follow the CPU", "[gpu][model][decode][cluster]") {
  QSP_REQUIRE_GPU();
  Poison poison;
  for (bool qwen : {true, false}) {
    ModelSpec spec = qwen ? qwen3_shape(QSP_DTYPE_Q4_0, 41) : llama_shape(QSP_DTYPE_Q8_0, 42);
    // GQA 4 and one layer: the default bound is then 1024 keys, a prompt the
    // CPU reference runs in seconds (GQA 2's is 3072).
    spec.n_kv_heads = spec.n_heads / 4;
    spec.n_layers = 1;
    TestModel m = make_model(spec);
    const int32_t bound = qsp::kern::attention_cluster_keys(int32_t(spec.n_heads), int32_t(spec.n_kv_heads),
                                                            int32_t(spec.head_dim));
    std::printf("  %s: short-cache bound %d keys%s\n", qwen ? "qwen3" : "llama", bound,
                bound ? "" : " (QSP_ATTN_CLUSTER=0 or not this device: one regime)");
    // Around the bound (or a few steps of the one regime).
    const uint32_t prompt_n = bound > 4 ? uint32_t(bound) - 4 : 9, steps = 8;
    qsp_context* cpu = m.create(QSP_BACKEND_CPU);
    qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
    REQUIRE(cpu);
    REQUIRE(gpu);
    const std::vector<int32_t> prompt = random_tokens(prompt_n, spec.vocab, 91);
    Logits ref = run(cpu, prompt, {prompt_n});
    check_close(run(gpu, prompt, {prompt_n}), ref);
    uint32_t past = prompt_n;
    for (int round = 0; round < 2; ++round) {
      for (uint32_t step = 0; step < steps; ++step, ++past) {
        INFO("round " << round << ", step " << step << " at past " << past);
        const std::vector<int32_t> t{ref.greedy};
        const Logits r = run(cpu, t, {1});
        check_close(run(gpu, t, {1}), r);
        ref = r;
      }
      // Back below the bound: the short-cache graph again, at the new position.
      REQUIRE(qsp_kv_truncate(gpu, prompt_n - 2) == QSP_OK);
      REQUIRE(qsp_kv_truncate(cpu, prompt_n - 2) == QSP_OK);
      const std::vector<int32_t> t{int32_t(spec.vocab - 3)};
      ref = run(cpu, t, {1});
      check_close(run(gpu, t, {1}), ref);
      past = prompt_n - 1;
    }
    qsp_context_destroy(cpu);
    qsp_context_destroy(gpu);
  }
}

// Chunks of a repeated shape replay a captured graph (captured at the
// shape's second run): 13-token chunks at moving positions, two per prompt,
// after a truncate, and with more shapes than the cache holds in between
// (the least recently used is dropped and captured again), each step
// against the CPU.
TEST_CASE("cuda model: repeated chunk shapes through CUDA graphs follow the CPU", "[gpu][model][graph]") {
  QSP_REQUIRE_GPU();
  Poison poison;
  ModelSpec spec = qwen3_shape(QSP_DTYPE_Q4_0, 33);
  TestModel m = make_model(spec);
  qsp_context* cpu = m.create(QSP_BACKEND_CPU);
  qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
  REQUIRE(cpu);
  REQUIRE(gpu);
  uint64_t seed = 500;
  for (int step = 0; step < 6; ++step) {
    std::vector<int32_t> t = random_tokens(13, spec.vocab, seed++);
    check_close(run(gpu, t, {13}), run(cpu, t, {13}));  // eager, capture, then replays
  }
  // 26 tokens as two 13-token qsp_prefill calls.
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> t = random_tokens(26, spec.vocab, seed++);
    check_close(run(gpu, t, {13, 13}), run(cpu, t, {26}));
  }
  REQUIRE(qsp_kv_truncate(gpu, 5) == QSP_OK);
  REQUIRE(qsp_kv_truncate(cpu, 5) == QSP_OK);
  {
    std::vector<int32_t> t = random_tokens(13, spec.vocab, seed++);
    check_close(run(gpu, t, {13}), run(cpu, t, {13}));
  }
  // Ten other shapes twice each (more than the cache holds), then 13 again.
  for (int rep = 0; rep < 2; ++rep)
    for (uint32_t n = 2; n < 12; ++n) {
      REQUIRE(qsp_kv_truncate(gpu, 3) == QSP_OK);
      REQUIRE(qsp_kv_truncate(cpu, 3) == QSP_OK);
      std::vector<int32_t> t = random_tokens(n, spec.vocab, seed++);
      check_close(run(gpu, t, {n}), run(cpu, t, {n}));
    }
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> t = random_tokens(13, spec.vocab, seed++);
    check_close(run(gpu, t, {13}), run(cpu, t, {13}));
  }
  qsp_context_destroy(cpu);
  qsp_context_destroy(gpu);
}

TEST_CASE("cuda model: a second context shares the device weight cache", "[gpu][model][cache]") {
  QSP_REQUIRE_GPU();
  ModelSpec spec = llama_shape(QSP_DTYPE_Q4_0, 41);
  TestModel m = make_model(spec);
  qsp_cache_stats s0, s1, s2, s3;
  qsp_cache_stats_init(&s0);
  s1 = s2 = s3 = s0;
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CUDA, 0, &s0) == QSP_OK);
  qsp_context* a = m.create(QSP_BACKEND_CUDA);
  REQUIRE(a);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CUDA, 0, &s1) == QSP_OK);
  const uint64_t tensors = s1.n_tensors - s0.n_tensors;
  CHECK(tensors == 2 * 9 + 3);  // Llama style: 9 per layer, embedding, output norm, LM head
  qsp_context* b = m.create(QSP_BACKEND_CUDA);
  REQUIRE(b);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CUDA, 0, &s2) == QSP_OK);
  CHECK(s2.n_tensors == s1.n_tensors);
  CHECK(s2.n_uploads == s1.n_uploads);
  CHECK(s2.n_hits - s1.n_hits == tensors);
  std::vector<int32_t> tokens = random_tokens(100, spec.vocab, 5);
  Logits la = run(a, tokens, {100});
  qsp_context_destroy(a);  // b keeps the weights alive
  Logits lb = run(b, tokens, {100});
  CHECK(rel_l2(la.v.data(), lb.v.data(), la.v.size()) == 0.0);
  qsp_context_destroy(b);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CUDA, 0, &s3) == QSP_OK);
  CHECK(s3.n_tensors == s0.n_tensors);
  CHECK(s3.n_bytes == s0.n_bytes);
}

TEST_CASE("cuda model: bad input leaves the GPU context usable", "[gpu][model][errors]") {
  QSP_REQUIRE_GPU();
  ModelSpec spec = llama_shape(QSP_DTYPE_Q4_0, 51);
  spec.max_seq = 64;
  TestModel m = make_model(spec);
  qsp_context* gpu = m.create(QSP_BACKEND_CUDA);
  REQUIRE(gpu);
  std::vector<int32_t> tokens = random_tokens(40, spec.vocab, 9);
  Logits first = run(gpu, tokens, {40});
  std::vector<int32_t> bad{1, int32_t(spec.vocab)};
  CHECK(qsp_prefill(gpu, bad.data(), 2) == QSP_ERR_OUT_OF_RANGE);
  CHECK(qsp_prefill(gpu, tokens.data(), 40) == QSP_ERR_CONTEXT_FULL);
  uint32_t len = 0;
  REQUIRE(qsp_kv_length(gpu, &len) == QSP_OK);
  CHECK(len == 40);
  REQUIRE(qsp_kv_clear(gpu) == QSP_OK);
  Logits again = run(gpu, tokens, {40});
  CHECK(rel_l2(again.v.data(), first.v.data(), first.v.size()) == 0.0);
  qsp_context_destroy(gpu);
}
