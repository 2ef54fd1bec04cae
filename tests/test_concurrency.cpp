// Concurrency: several contexts on several threads sharing one weight cache,
// uploading and prefilling at once, give the same logits as one context
// alone; destroying contexts while others use the shared weights is safe.
// Run under ThreadSanitizer in CI (scripts/test-sanitizers).
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "support/model.h"

using namespace qsp_test;

namespace {

// No Catch2 assertion here: it runs on worker threads (Catch2 is not
// thread-safe); an empty vector reports the failure.
std::vector<float> logits_of(qsp_context* ctx, const std::vector<int32_t>& tokens) {
  if (qsp_kv_clear(ctx) != QSP_OK || qsp_prefill(ctx, tokens.data(), uint32_t(tokens.size())) != QSP_OK) return {};
  const float* p = nullptr;
  uint32_t n = 0;
  if (qsp_get_logits(ctx, &p, &n) != QSP_OK) return {};
  return std::vector<float>(p, p + n);
}

ModelSpec small_spec(uint64_t seed) {
  ModelSpec s;
  s.n_layers = 2;
  s.hidden = 64;
  s.ffn = 128;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.vocab = 300;
  s.max_seq = 64;
  s.seed = seed;
  s.handle_base = seed << 32;
  return s;
}

}  // namespace

TEST_CASE("concurrency: contexts on threads sharing weights match one context alone", "[concurrency]") {
  const TestModel m = make_model(small_spec(9001));
  qsp_context_params p = m.params;
  p.n_threads = 1;
  const std::vector<int32_t> tokens = random_tokens(20, m.spec.vocab, 3);
  std::vector<float> ref;
  {
    qsp_context* ctx = nullptr;
    REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
    REQUIRE(m.upload(ctx) == QSP_OK);
    ref = logits_of(ctx, tokens);
    qsp_context_destroy(ctx);
  }
  REQUIRE(!ref.empty());

  constexpr int kThreads = 6, kRounds = 4;
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        qsp_context* ctx = nullptr;
        if (qsp_context_create(&p, &ctx) != QSP_OK) { ++failures; return; }
        // Every thread uploads the same handles at the same time: the cache
        // must upload each once and hand the same tensor to all.
        if (m.upload(ctx) != QSP_OK) { ++failures; qsp_context_destroy(ctx); return; }
        for (int k = 0; k < 2; ++k)
          if (logits_of(ctx, tokens) != ref) ++mismatches;
        // Destroy while the other threads still prefill with the same weights.
        if ((t + r) % 2 == 0) std::this_thread::yield();
        qsp_context_destroy(ctx);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(mismatches == 0);
}

TEST_CASE("concurrency: the cache frees shared weights only after the last user", "[concurrency]") {
  const TestModel m = make_model(small_spec(9002));
  qsp_context_params p = m.params;
  p.n_threads = 1;
  qsp_cache_stats before;
  qsp_cache_stats_init(&before);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &before) == QSP_OK);

  qsp_context* keeper = nullptr;
  REQUIRE(qsp_context_create(&p, &keeper) == QSP_OK);
  REQUIRE(m.upload(keeper) == QSP_OK);
  const std::vector<int32_t> tokens = random_tokens(9, m.spec.vocab, 4);
  const std::vector<float> ref = logits_of(keeper, tokens);

  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  // One thread churns contexts of the same model; the keeper keeps computing.
  std::thread churn([&] {
    while (!stop) {
      qsp_context* c = nullptr;
      if (qsp_context_create(&p, &c) != QSP_OK || m.upload(c) != QSP_OK) ++bad;
      qsp_context_destroy(c);
    }
  });
  for (int i = 0; i < 20; ++i)
    if (logits_of(keeper, tokens) != ref) ++bad;
  stop = true;
  churn.join();
  CHECK(bad == 0);
  qsp_context_destroy(keeper);

  qsp_cache_stats after;
  qsp_cache_stats_init(&after);
  REQUIRE(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &after) == QSP_OK);
  CHECK(after.n_tensors == before.n_tensors);
  CHECK(after.n_bytes == before.n_bytes);
}

TEST_CASE("concurrency: global functions are thread-safe", "[concurrency]") {
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        qsp_cache_stats s;
        qsp_cache_stats_init(&s);
        if (qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &s) != QSP_OK) ++bad;
        if (qsp_dtype_size(QSP_DTYPE_Q4_0, 2, 64) != 72) ++bad;
        qsp_context* c = nullptr;
        if (qsp_context_create(nullptr, &c) != QSP_ERR_INVALID_ARGUMENT) ++bad;
        if (qsp_last_error()[0] == '\0') ++bad;  // thread-local: set by this thread's failure
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad == 0);
}
