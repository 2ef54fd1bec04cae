// The CPU forward pass, driven through the public C API, against a naive
// float64 transformer written from the specification in qsp.h (nothing
// from src/cpu is used; tests/support/ref_model.h). Weights are the exact dequantized values of the
// random test models (tests/support/model.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/api.h"
#include "support/model.h"
#include "support/ref.h"
#include "support/ref_model.h"
#include "qsp/qsp.h"

using namespace qsp_test;
using ref::embed;
using ref::reference_logits;
using ref::Vec;

namespace {

// ---- Helpers around the C API ------------------------------------------------

double rel_l2_ref(const std::vector<float>& a, const Vec& ref) {
  REQUIRE(a.size() == ref.size());
  return rel_l2(a, ref);
}

double rel_l2_f(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  return rel_l2(a.data(), b.data(), a.size());
}

TestModel make(ModelSpec s) {
  TestModel m = make_model(s);
  m.params.n_threads = 2;
  return m;
}

qsp_context* create_ctx(const TestModel& m, uint32_t max_seq = 0) {
  qsp_context* ctx = m.create(QSP_BACKEND_CPU, max_seq);
  REQUIRE(ctx != nullptr);
  return ctx;
}

// qsp_greedy_token is the argmax of the library's logits (lowest id on ties) and,
// unless the reference's top two are closer than the fp32 error, the reference's argmax.
void check_argmax(qsp_context* ctx, const std::vector<float>& lib, const Vec& ref) {
  int32_t g = -1;
  REQUIRE(qsp_greedy_token(ctx, &g) == QSP_OK);
  const int32_t lib_arg = int32_t(std::max_element(lib.begin(), lib.end()) - lib.begin());
  REQUIRE(g == lib_arg);
  const int32_t ref_arg = int32_t(std::max_element(ref.begin(), ref.end()) - ref.begin());
  double rms = 0;
  for (double v : ref) rms += v * v;
  rms = std::sqrt(rms / ref.size());
  INFO("greedy " << g << " (ref " << ref[g] << "), reference argmax " << ref_arg << " (" << ref[ref_arg] << ")");
  if (g != ref_arg) REQUIRE(ref[ref_arg] - ref[g] <= 1e-4 * rms);
}

// The main check: prompts of 1, 3, 17 and 100 tokens against the reference.
void check_against_reference(const TestModel& m, uint64_t token_seed) {
  qsp_context* ctx = create_ctx(m);
  const std::vector<int32_t> tokens = random_tokens(100, m.spec.vocab, token_seed);
  const std::vector<size_t> lens = {1, 3, 17, 100};
  std::vector<size_t> positions;
  for (size_t n : lens) positions.push_back(n - 1);
  const std::vector<Vec> ref = reference_logits(m, embed(m, tokens), positions);
  for (size_t i = 0; i < lens.size(); ++i) {
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    prefill_ok(ctx, tokens.data(), uint32_t(lens[i]));
    REQUIRE(kv_len(ctx) == lens[i]);
    const std::vector<float> lib = logits_of(ctx, m.spec.vocab);
    const double rel = rel_l2_ref(lib, ref[i]);
    INFO("n_tokens " << lens[i] << ": rel L2 of the logits vs float64 = " << rel);
    CHECK(rel <= 1e-5);
    check_argmax(ctx, lib, ref[i]);
  }
  qsp_context_destroy(ctx);
}

uint64_t handles(uint64_t test_id) { return 0x7E57F0000000000ull + (test_id << 28); }

ModelSpec spec(uint64_t test_id) {
  ModelSpec s;
  s.seed = 1000 + test_id;
  s.handle_base = handles(test_id);
  return s;
}


}  // namespace

// ---- Model variants against the float64 reference ---------------------------

TEST_CASE("forward: Qwen3-style, Q4_0 projections, Q8_0 embedding", "[forward]") {
  ModelSpec s = spec(1);
  check_against_reference(make(s), 11);
}

TEST_CASE("forward: Qwen3-style, Q8_0 projections, F16 embedding", "[forward]") {
  ModelSpec s = spec(2);
  s.wtype = QSP_DTYPE_Q8_0;
  s.embd_type = QSP_DTYPE_F16;
  check_against_reference(make(s), 12);
}

TEST_CASE("forward: Llama-style (interleaved RoPE, no QK-norm), Q4_0, theta 1e4", "[forward]") {
  ModelSpec s = spec(3);
  s.qwen3 = false;
  s.rope_theta = 10000.0f;
  check_against_reference(make(s), 13);
}

TEST_CASE("forward: Llama-style, Q8_0 projections, BF16 embedding", "[forward]") {
  ModelSpec s = spec(4);
  s.qwen3 = false;
  s.wtype = QSP_DTYPE_Q8_0;
  s.embd_type = QSP_DTYPE_BF16;
  check_against_reference(make(s), 14);
}

TEST_CASE("forward: Qwen3-style, mixed Q4_0/Q8_0 layers, 4 layers", "[forward]") {
  ModelSpec s = spec(5);
  s.wtype = -1;
  s.n_layers = 4;
  check_against_reference(make(s), 15);
}

TEST_CASE("forward: Llama-style, mixed layers, tied Q8_0 embedding", "[forward]") {
  ModelSpec s = spec(6);
  s.qwen3 = false;
  s.wtype = -1;
  s.tied = true;
  check_against_reference(make(s), 16);
}

TEST_CASE("forward: F16 projections, tied F16 embedding", "[forward]") {
  ModelSpec s = spec(7);
  s.wtype = QSP_DTYPE_F16;
  s.embd_type = QSP_DTYPE_F16;
  s.tied = true;
  check_against_reference(make(s), 17);
}

TEST_CASE("forward: BF16 projections and embedding", "[forward]") {
  ModelSpec s = spec(8);
  s.wtype = QSP_DTYPE_BF16;
  s.embd_type = QSP_DTYPE_BF16;
  check_against_reference(make(s), 18);
}

TEST_CASE("forward: F32 projections and embedding, Llama-style", "[forward]") {
  ModelSpec s = spec(9);
  s.qwen3 = false;
  s.wtype = QSP_DTYPE_F32;
  s.embd_type = QSP_DTYPE_F32;
  check_against_reference(make(s), 19);
}

TEST_CASE("forward: tied Q4_0 embedding / LM head", "[forward]") {
  ModelSpec s = spec(10);
  s.embd_type = QSP_DTYPE_Q4_0;
  s.tied = true;
  check_against_reference(make(s), 20);
}

TEST_CASE("forward: q_dim != hidden (8 heads x 32 over hidden 128), one KV head (MQA)", "[forward]") {
  ModelSpec s = spec(11);
  s.n_heads = 8;
  s.n_kv_heads = 1;
  s.ffn = 320;
  check_against_reference(make(s), 21);
}

TEST_CASE("forward: multi-head attention (n_kv_heads = n_heads), head_dim 64", "[forward]") {
  ModelSpec s = spec(12);
  s.n_heads = 2;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.wtype = QSP_DTYPE_Q8_0;
  s.qwen3 = false;
  check_against_reference(make(s), 22);
}

TEST_CASE("forward: QK-norm with interleaved RoPE, and NEOX without QK-norm", "[forward]") {
  SECTION("qk_norm 1, interleaved") {
    ModelSpec s = spec(13);
    TestModel m = make(s);
    m.params.rope_style = QSP_ROPE_INTERLEAVED;
    check_against_reference(m, 23);
  }
  SECTION("qk_norm 0, NEOX") {
    ModelSpec s = spec(14);
    s.qwen3 = false;
    TestModel m = make(s);
    m.params.rope_style = QSP_ROPE_NEOX;
    check_against_reference(m, 24);
  }
}

TEST_CASE("forward: norm weights in F16 and BF16", "[forward]") {
  ModelSpec s = spec(15);
  TestModel m = make(s);
  std::mt19937_64 rng(777);
  uint64_t h = handles(15) + (1ull << 24);
  for (auto& L : m.layers) {
    L[kAttnNorm] = make_tensor(rng, ++h, QSP_DTYPE_F16, 1, s.hidden, 1.0f, 0.2f);
    L[kQNorm] = make_tensor(rng, ++h, QSP_DTYPE_BF16, 1, s.head_dim, 1.0f, 0.2f);
    L[kKNorm] = make_tensor(rng, ++h, QSP_DTYPE_F16, 1, s.head_dim, 1.0f, 0.2f);
    L[kFfnNorm] = make_tensor(rng, ++h, QSP_DTYPE_BF16, 1, s.hidden, 1.0f, 0.2f);
  }
  m.out_norm = make_tensor(rng, ++h, QSP_DTYPE_BF16, 1, s.hidden, 1.0f, 0.2f);
  check_against_reference(m, 25);
}

TEST_CASE("forward: a prompt longer than the backend's internal chunk", "[forward]") {
  ModelSpec s = spec(16);
  s.max_seq = 320;
  s.wtype = -1;
  TestModel m = make(s);
  qsp_context* ctx = create_ctx(m);
  const std::vector<int32_t> tokens = random_tokens(300, s.vocab, 26);
  const std::vector<Vec> ref = reference_logits(m, embed(m, tokens), {255, 256, 299});
  // 256 + 1 token, then the whole 300 at once (split internally), then 150 + 150.
  prefill_ok(ctx, tokens.data(), 256);
  const double r255 = rel_l2_ref(logits_of(ctx, s.vocab), ref[0]);
  prefill_ok(ctx, tokens.data() + 256, 1);
  const double r256 = rel_l2_ref(logits_of(ctx, s.vocab), ref[1]);
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  prefill_ok(ctx, tokens.data(), 300);
  REQUIRE(kv_len(ctx) == 300);
  const std::vector<float> all = logits_of(ctx, s.vocab);
  const double r299 = rel_l2_ref(all, ref[2]);
  check_argmax(ctx, all, ref[2]);
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  prefill_ok(ctx, tokens.data(), 150);
  prefill_ok(ctx, tokens.data() + 150, 150);
  const double rchunk = rel_l2_f(logits_of(ctx, s.vocab), all);
  INFO("rel L2 vs float64 at positions 255 / 256 / 299: " << r255 << " / " << r256 << " / " << r299
                                                       << "; 150+150 vs 300 at once: " << rchunk);
  CHECK(r255 <= 1e-5);
  CHECK(r256 <= 1e-5);
  CHECK(r299 <= 1e-5);
  CHECK(rchunk <= 1e-5);
  qsp_context_destroy(ctx);
}

// ---- Chunking, embeddings, KV-cache operations ------------------------------

TEST_CASE("forward: a prompt fed in chunks equals the prompt fed at once", "[forward]") {
  ModelSpec s = spec(17);
  s.wtype = -1;
  TestModel m = make(s);
  qsp_context* ctx = create_ctx(m);
  const std::vector<int32_t> tokens = random_tokens(100, s.vocab, 27);

  SECTION("100 = 1 + 30 + 69") {
    const std::vector<Vec> ref = reference_logits(m, embed(m, tokens), {0, 30, 99});
    prefill_ok(ctx, tokens.data(), 100);
    const std::vector<float> whole = logits_of(ctx, s.vocab);
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    prefill_ok(ctx, tokens.data(), 1);
    REQUIRE(kv_len(ctx) == 1);
    const double r0 = rel_l2_ref(logits_of(ctx, s.vocab), ref[0]);
    prefill_ok(ctx, tokens.data() + 1, 30);
    REQUIRE(kv_len(ctx) == 31);
    const double r30 = rel_l2_ref(logits_of(ctx, s.vocab), ref[1]);
    prefill_ok(ctx, tokens.data() + 31, 69);
    REQUIRE(kv_len(ctx) == 100);
    const std::vector<float> chunked = logits_of(ctx, s.vocab);
    const double r99 = rel_l2_ref(chunked, ref[2]);
    const double rc = rel_l2_f(chunked, whole);
    INFO("chunk ends vs float64: " << r0 << " / " << r30 << " / " << r99 << "; chunked vs at once: " << rc);
    CHECK(r0 <= 1e-5);
    CHECK(r30 <= 1e-5);
    CHECK(r99 <= 1e-5);
    CHECK(rc <= 1e-5);
  }
  SECTION("17 tokens one at a time") {
    std::vector<size_t> positions;
    for (size_t i = 0; i < 17; ++i) positions.push_back(i);
    const std::vector<Vec> ref = reference_logits(m, embed(m, std::vector<int32_t>(tokens.begin(), tokens.begin() + 17)), positions);
    prefill_ok(ctx, tokens.data(), 17);
    const std::vector<float> whole = logits_of(ctx, s.vocab);
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    double worst = 0;
    std::vector<float> last;
    for (uint32_t i = 0; i < 17; ++i) {
      prefill_ok(ctx, tokens.data() + i, 1);
      REQUIRE(kv_len(ctx) == i + 1);
      last = logits_of(ctx, s.vocab);
      worst = std::max(worst, rel_l2_ref(last, ref[i]));
      check_argmax(ctx, last, ref[i]);
    }
    const double rc = rel_l2_f(last, whole);
    INFO("worst step vs float64: " << worst << "; one-by-one vs at once: " << rc);
    CHECK(worst <= 1e-5);
    CHECK(rc <= 1e-5);
  }
  qsp_context_destroy(ctx);
}

TEST_CASE("forward: qsp_prefill_embeddings with the embedded rows equals qsp_prefill", "[forward]") {
  ModelSpec s = spec(18);
  s.embd_type = QSP_DTYPE_Q4_0;
  TestModel m = make(s);
  qsp_context* ctx = create_ctx(m);
  const std::vector<int32_t> tokens = random_tokens(60, s.vocab, 28);
  std::vector<float> rows;
  for (int32_t t : tokens)
    rows.insert(rows.end(), m.embd.values.begin() + uint64_t(t) * s.hidden,
                m.embd.values.begin() + uint64_t(t + 1) * s.hidden);
  prefill_ok(ctx, tokens.data(), 60);
  const std::vector<float> by_id = logits_of(ctx, s.vocab);
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);

  SECTION("all at once") {
    REQUIRE(qsp_prefill_embeddings(ctx, rows.data(), 60) == QSP_OK);
    REQUIRE(kv_len(ctx) == 60);
    const double r = rel_l2_f(logits_of(ctx, s.vocab), by_id);
    INFO("embeddings vs ids: " << r);
    CHECK(r <= 1e-6);
  }
  SECTION("ids, then embeddings, then ids again (the positions continue)") {
    prefill_ok(ctx, tokens.data(), 20);
    REQUIRE(qsp_prefill_embeddings(ctx, rows.data() + 20 * s.hidden, 25) == QSP_OK);
    prefill_ok(ctx, tokens.data() + 45, 15);
    REQUIRE(kv_len(ctx) == 60);
    const double r = rel_l2_f(logits_of(ctx, s.vocab), by_id);
    INFO("mixed vs ids: " << r);
    CHECK(r <= 1e-5);
  }
  SECTION("a context without an embedding table runs from embeddings") {
    qsp_context_params p = m.params;
    qsp_context* bare = nullptr;
    REQUIRE(qsp_context_create(&p, &bare) == QSP_OK);
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      qsp_layer_weights w = m.layer_weights(l);
      REQUIRE(qsp_upload_layer(bare, l, &w) == QSP_OK);
    }
    qsp_output_weights o = m.output_weights();
    REQUIRE(qsp_upload_output(bare, &o) == QSP_OK);
    REQUIRE(qsp_prefill(bare, tokens.data(), 1) == QSP_ERR_NOT_READY);
    REQUIRE(qsp_prefill_embeddings(bare, rows.data(), 60) == QSP_OK);
    CHECK(rel_l2_f(logits_of(bare, s.vocab), by_id) <= 1e-6);
    qsp_context_destroy(bare);
  }
  qsp_context_destroy(ctx);
}

TEST_CASE("forward: kv_truncate then re-prefill reproduces the logits", "[forward]") {
  ModelSpec s = spec(19);
  s.qwen3 = false;
  TestModel m = make(s);
  qsp_context* ctx = create_ctx(m);
  const std::vector<int32_t> tokens = random_tokens(100, s.vocab, 29);
  prefill_ok(ctx, tokens.data(), 100);
  const std::vector<float> full = logits_of(ctx, s.vocab);

  SECTION("truncate to 40, feed the dropped 60 again") {
    REQUIRE(qsp_kv_truncate(ctx, 40) == QSP_OK);
    REQUIRE(kv_len(ctx) == 40);
    const float* p = nullptr;
    REQUIRE(qsp_get_logits(ctx, &p, nullptr) == QSP_ERR_NOT_READY);  // truncation forgets the logits
    prefill_ok(ctx, tokens.data() + 40, 60);
    REQUIRE(kv_len(ctx) == 100);
    const double r = rel_l2_f(logits_of(ctx, s.vocab), full);
    INFO("after truncate + re-prefill: " << r);
    CHECK(r <= 1e-5);
  }
  SECTION("truncate to 40, continue with other tokens: matches the reference of the new prompt") {
    std::vector<int32_t> other(tokens.begin(), tokens.begin() + 40);
    const std::vector<int32_t> tail = random_tokens(20, s.vocab, 30);
    other.insert(other.end(), tail.begin(), tail.end());
    const std::vector<Vec> ref = reference_logits(m, embed(m, other), {59});
    REQUIRE(qsp_kv_truncate(ctx, 40) == QSP_OK);
    prefill_ok(ctx, tail.data(), 20);
    REQUIRE(kv_len(ctx) == 60);
    const std::vector<float> lib = logits_of(ctx, s.vocab);
    const double r = rel_l2_ref(lib, ref[0]);
    INFO("truncated + new tail vs float64: " << r);
    CHECK(r <= 1e-5);
    check_argmax(ctx, lib, ref[0]);
  }
  SECTION("truncate to the current length and to 0") {
    REQUIRE(qsp_kv_truncate(ctx, 100) == QSP_OK);
    REQUIRE(kv_len(ctx) == 100);
    REQUIRE(qsp_kv_truncate(ctx, 0) == QSP_OK);
    REQUIRE(kv_len(ctx) == 0);
    prefill_ok(ctx, tokens.data(), 100);
    REQUIRE(bit_equal(logits_of(ctx, s.vocab), full));
  }
  qsp_context_destroy(ctx);
}

TEST_CASE("forward: kv_clear then prefill reproduces the first run", "[forward]") {
  ModelSpec s = spec(20);
  TestModel m = make(s);
  qsp_context* ctx = create_ctx(m);
  const std::vector<int32_t> tokens = random_tokens(17, s.vocab, 31);
  const std::vector<int32_t> more = random_tokens(33, s.vocab, 32);
  prefill_ok(ctx, tokens.data(), 17);
  const std::vector<float> first = logits_of(ctx, s.vocab);
  prefill_ok(ctx, more.data(), 33);  // something else in the cache
  REQUIRE(kv_len(ctx) == 50);
  REQUIRE_FALSE(bit_equal(logits_of(ctx, s.vocab), first));
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  REQUIRE(kv_len(ctx) == 0);
  const float* p = nullptr;
  REQUIRE(qsp_get_logits(ctx, &p, nullptr) == QSP_ERR_NOT_READY);
  prefill_ok(ctx, tokens.data(), 17);
  REQUIRE(kv_len(ctx) == 17);
  REQUIRE(bit_equal(logits_of(ctx, s.vocab), first));
  qsp_context_destroy(ctx);
}

// ---- The weight cache ---------------------------------------------------------

TEST_CASE("forward: a second context uploads nothing, destroying all contexts frees the weights", "[forward][cache]") {
  ModelSpec s = spec(21);
  TestModel m = make(s);
  const uint64_t n_per_model = uint64_t(s.n_layers) * 11 + 3;
  const std::vector<int32_t> tokens = random_tokens(17, s.vocab, 33);

  const qsp_cache_stats s0 = cache_stats();
  qsp_context* a = create_ctx(m);
  const qsp_cache_stats s1 = cache_stats();
  CHECK(s1.n_tensors == s0.n_tensors + n_per_model);
  CHECK(s1.n_uploads == s0.n_uploads + n_per_model);
  CHECK(s1.n_hits == s0.n_hits);
  CHECK(s1.n_bytes > s0.n_bytes);
  prefill_ok(a, tokens.data(), 17);
  const std::vector<float> la = logits_of(a, s.vocab);

  qsp_context* b = create_ctx(m);
  const qsp_cache_stats s2 = cache_stats();
  CHECK(s2.n_tensors == s1.n_tensors);
  CHECK(s2.n_bytes == s1.n_bytes);
  CHECK(s2.n_uploads == s1.n_uploads);
  CHECK(s2.n_hits == s1.n_hits + n_per_model);
  prefill_ok(b, tokens.data(), 17);
  REQUIRE(bit_equal(logits_of(b, s.vocab), la));

  // The weights live as long as any context uses them.
  qsp_context_destroy(a);
  CHECK(cache_stats().n_tensors == s1.n_tensors);
  REQUIRE(qsp_kv_clear(b) == QSP_OK);
  prefill_ok(b, tokens.data(), 17);
  REQUIRE(bit_equal(logits_of(b, s.vocab), la));
  qsp_context_destroy(b);
  const qsp_cache_stats s3 = cache_stats();
  CHECK(s3.n_tensors == s0.n_tensors);
  CHECK(s3.n_bytes == s0.n_bytes);

  // A new context after that uploads again.
  qsp_context* c = create_ctx(m);
  CHECK(cache_stats().n_uploads == s3.n_uploads + n_per_model);
  prefill_ok(c, tokens.data(), 17);
  REQUIRE(bit_equal(logits_of(c, s.vocab), la));
  qsp_context_destroy(c);
  CHECK(cache_stats().n_tensors == s0.n_tensors);
}

TEST_CASE("forward: tied embeddings are stored once", "[forward][cache]") {
  for (bool qwen3 : {true, false}) {
    ModelSpec s = spec(qwen3 ? 22 : 23);
    s.qwen3 = qwen3;
    s.tied = true;
    TestModel m = make(s);
    const uint64_t expect = uint64_t(s.n_layers) * (qwen3 ? 11 : 9) + 2;  // embedding, final norm
    INFO((qwen3 ? "Qwen3" : "Llama") << " style: " << expect << " tensors expected");
    const qsp_cache_stats s0 = cache_stats();
    qsp_context* ctx = create_ctx(m);
    const qsp_cache_stats s1 = cache_stats();
    CHECK(s1.n_tensors - s0.n_tensors == expect);
    CHECK(s1.n_uploads - s0.n_uploads == expect);
    CHECK(s1.n_hits - s0.n_hits == 1);  // the LM head found the embedding
    qsp_context_destroy(ctx);
    CHECK(cache_stats().n_tensors == s0.n_tensors);
  }
}

TEST_CASE("forward: contexts sharing weights run concurrently from two threads", "[forward][threads]") {
  ModelSpec s = spec(24);
  s.wtype = QSP_DTYPE_Q8_0;
  TestModel m = make(s);
  m.params.n_threads = 1;
  const std::vector<int32_t> t1 = random_tokens(40, s.vocab, 34), t2 = random_tokens(40, s.vocab, 35);
  // Serial results first.
  std::vector<float> want1, want2;
  {
    qsp_context* c = create_ctx(m);
    prefill_ok(c, t1.data(), 40);
    want1 = logits_of(c, s.vocab);
    REQUIRE(qsp_kv_clear(c) == QSP_OK);
    prefill_ok(c, t2.data(), 40);
    want2 = logits_of(c, s.vocab);
    qsp_context_destroy(c);
  }
  const qsp_cache_stats s0 = cache_stats();
  // Two threads create contexts of the same model at once (the cache uploads each
  // handle once) and prefill concurrently.
  std::vector<float> got1(s.vocab), got2(s.vocab);
  qsp_status st1 = -100, st2 = -100;
  std::atomic<int> created{0};
  auto work = [&](const std::vector<int32_t>& toks, std::vector<float>& out, qsp_status& st) {
    qsp_context* c = m.create(QSP_BACKEND_CPU);
    // Both contexts exist before either is destroyed: the second registration must hit.
    created.fetch_add(1);
    while (created.load() < 2) std::this_thread::yield();
    if (!c) { st = -99; return; }
    st = QSP_OK;
    for (int rep = 0; rep < 3 && st == QSP_OK; ++rep) {
      st = qsp_kv_clear(c);
      if (st == QSP_OK) st = qsp_prefill(c, toks.data(), uint32_t(toks.size()));
      if (st == QSP_OK) st = qsp_copy_logits(c, out.data(), out.size());
    }
    qsp_context_destroy(c);
  };
  std::thread th1(work, std::cref(t1), std::ref(got1), std::ref(st1));
  std::thread th2(work, std::cref(t2), std::ref(got2), std::ref(st2));
  th1.join();
  th2.join();
  REQUIRE(st1 == QSP_OK);
  REQUIRE(st2 == QSP_OK);
  REQUIRE(bit_equal(got1, want1));
  REQUIRE(bit_equal(got2, want2));
  const qsp_cache_stats s1 = cache_stats();
  const uint64_t n_per_model = uint64_t(s.n_layers) * 11 + 3;
  CHECK(s1.n_uploads - s0.n_uploads == n_per_model);
  CHECK(s1.n_hits - s0.n_hits == n_per_model);
  CHECK(s1.n_tensors == s0.n_tensors);
}
