// The C API contract of qsp.h, part 3: prefill errors, logits and KV cache,
// backends, logging, context info and the per-thread last error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/fixture.h"

using namespace qsp_test;

// ---- Prefill ----------------------------------------------------------------------

TEST_CASE("api: prefill before all weights are uploaded is NOT_READY, naming what is missing", "[api]") {
  Fixture fx(10);
  qsp_context* ctx = fx.bare();
  const TestModel& m = fx.m;
  std::vector<float> rows;
  for (int32_t t : fx.toks)
    rows.insert(rows.end(), m.embd.values.begin() + uint64_t(t) * m.spec.hidden,
                m.embd.values.begin() + uint64_t(t + 1) * m.spec.hidden);
  const uint32_t n = uint32_t(fx.toks.size());

  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "layer 0", qsp_prefill(ctx, fx.toks.data(), n));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "layer 0", qsp_prefill_embeddings(ctx, rows.data(), n));
  qsp_layer_weights w = m.layer_weights(0);
  REQUIRE(qsp_upload_layer(ctx, 0, &w) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "layer 1", qsp_prefill(ctx, fx.toks.data(), n));
  w = m.layer_weights(1);
  REQUIRE(qsp_upload_layer(ctx, 1, &w) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "output", qsp_prefill(ctx, fx.toks.data(), n));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "output", qsp_prefill_embeddings(ctx, rows.data(), n));
  qsp_output_weights o = m.output_weights();
  REQUIRE(qsp_upload_output(ctx, &o) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "embedding", qsp_prefill(ctx, fx.toks.data(), n));
  REQUIRE(kv_len(ctx) == 0);
  const float* lp = nullptr;
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_get_logits(ctx, &lp, nullptr));
  // Embeddings need no table; they give the same logits as the token ids.
  REQUIRE(qsp_prefill_embeddings(ctx, rows.data(), n) == QSP_OK);
  REQUIRE(kv_len(ctx) == n);
  CHECK(rel_l2(fx.logits(ctx).data(), fx.ref.data(), fx.vocab()) <= 1e-6);
  qsp_tensor e = m.embd.view();
  REQUIRE(qsp_upload_embedding(ctx, &e) == QSP_OK);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: token ids outside the vocabulary are OUT_OF_RANGE and change nothing", "[api]") {
  Fixture fx(11);
  qsp_context* ctx = fx.create();
  fx.works(ctx);  // leaves 17 tokens and their logits
  for (int32_t bad : {int32_t(fx.vocab()), int32_t(fx.vocab()) + 12345, -1, std::numeric_limits<int32_t>::min()}) {
    INFO("bad id " << bad);
    std::vector<int32_t> t = {5, 6, bad, 7};
    EXPECT_FAIL(ctx, QSP_ERR_OUT_OF_RANGE, std::to_string(bad), qsp_prefill(ctx, t.data(), 4));
    REQUIRE(kv_len(ctx) == fx.toks.size());
    REQUIRE(bit_equal(fx.logits(ctx), fx.ref));  // the previous logits are untouched
  }
  const int32_t last = int32_t(fx.vocab()) - 1, zero = 0;
  REQUIRE(qsp_prefill(ctx, &last, 1) == QSP_OK);
  REQUIRE(qsp_prefill(ctx, &zero, 1) == QSP_OK);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: prefill past max_seq_len is CONTEXT_FULL and keeps the KV length", "[api]") {
  Fixture fx(12);
  qsp_context* ctx = fx.create(20);  // 17 prompt tokens + 3
  const std::vector<int32_t> more = random_tokens(8, fx.vocab(), 77);
  std::vector<float> row(fx.m.spec.hidden, 0.02f);
  fx.works(ctx);
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill(ctx, more.data(), 4));
  REQUIRE(kv_len(ctx) == 17);
  REQUIRE(bit_equal(fx.logits(ctx), fx.ref));
  REQUIRE(qsp_prefill(ctx, more.data(), 3) == QSP_OK);  // exactly full is fine
  REQUIRE(kv_len(ctx) == 20);
  const std::vector<float> full = fx.logits(ctx);
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill(ctx, more.data(), 1));
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill_embeddings(ctx, row.data(), 1));
  REQUIRE(kv_len(ctx) == 20);
  REQUIRE(bit_equal(fx.logits(ctx), full));
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  std::vector<int32_t> long_prompt = random_tokens(21, fx.vocab(), 78);
  EXPECT_FAIL(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill(ctx, long_prompt.data(), 21));
  REQUIRE(kv_len(ctx) == 0);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: NaN / Inf embeddings are not rejected and propagate", "[api]") {
  Fixture fx(13);
  qsp_context* ctx = fx.create();
  std::vector<float> rows(3 * fx.m.spec.hidden, 0.01f);
  rows[fx.m.spec.hidden + 5] = std::numeric_limits<float>::quiet_NaN();
  rows[2 * fx.m.spec.hidden + 7] = std::numeric_limits<float>::infinity();
  REQUIRE(qsp_prefill_embeddings(ctx, rows.data(), 3) == QSP_OK);
  const std::vector<float> l = fx.logits(ctx);
  REQUIRE(std::any_of(l.begin(), l.end(), [](float v) { return !std::isfinite(v); }));
  int32_t g = -1;
  REQUIRE(qsp_greedy_token(ctx, &g) == QSP_OK);
  REQUIRE((g >= 0 && g < int32_t(fx.vocab())));
  fx.works(ctx);  // the poisoned KV entries are gone after a clear
  qsp_context_destroy(ctx);
}

// ---- Logits and KV cache ----------------------------------------------------------

TEST_CASE("api: logits and KV-cache errors", "[api]") {
  Fixture fx(14);
  qsp_context* ctx = fx.create();
  const float* lp = nullptr;
  uint32_t nv = 0;
  int32_t tok = 0;
  std::vector<float> buf(fx.vocab() + 1);

  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_get_logits(ctx, &lp, &nv));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_copy_logits(ctx, buf.data(), buf.size()));
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_greedy_token(ctx, &tok));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "18", qsp_kv_truncate(ctx, 18));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, std::to_string(fx.vocab() - 1),
                         qsp_copy_logits(ctx, buf.data(), fx.vocab() - 1));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "0", qsp_copy_logits(ctx, buf.data(), 0));
  REQUIRE(qsp_copy_logits(ctx, buf.data(), buf.size()) == QSP_OK);  // larger is fine
  REQUIRE(std::memcmp(buf.data(), fx.ref.data(), fx.vocab() * sizeof(float)) == 0);
  REQUIRE(qsp_greedy_token(ctx, &tok) == QSP_OK);
  REQUIRE(tok == int32_t(std::max_element(fx.ref.begin(), fx.ref.end()) - fx.ref.begin()));
  // Truncation and clearing forget the logits.
  REQUIRE(qsp_kv_truncate(ctx, 17) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_get_logits(ctx, &lp, &nv));
  fx.works(ctx);
  REQUIRE(qsp_kv_truncate(ctx, 3) == QSP_OK);
  REQUIRE(kv_len(ctx) == 3);
  EXPECT_FAIL(ctx, QSP_ERR_OUT_OF_RANGE, "4", qsp_kv_truncate(ctx, 4));
  REQUIRE(kv_len(ctx) == 3);
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  EXPECT_FAIL(ctx, QSP_ERR_NOT_READY, "logits", qsp_greedy_token(ctx, &tok));
  EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "1", qsp_kv_truncate(ctx, 1));
  qsp_context_destroy(ctx);
}

// ---- Backends, logging, info ---------------------------------------------------------

TEST_CASE("api: the CUDA backend without a device is NO_DEVICE", "[api]") {
  if (qsp_backend_available(QSP_BACKEND_CUDA) != 0) {
    WARN("a CUDA device is present: NO_DEVICE cannot be provoked here");
    return;
  }
  Fixture fx(15);
  qsp_context_params p = fx.m.params;
  p.backend = QSP_BACKEND_CUDA;
  expect_create_fails(p, QSP_ERR_NO_DEVICE, "CUDA");
}

TEST_CASE("api: AUTO falls back to the CPU, logs it, and reports the CPU backend", "[api]") {
  if (qsp_backend_available(QSP_BACKEND_CUDA) != 0) {
    WARN("a CUDA device is present: AUTO does not fall back here");
    return;
  }
  Fixture fx(16);
  LogCapture log;
  qsp_context_params p = fx.m.params;
  p.backend = QSP_BACKEND_AUTO;
  p.log_callback = &LogCapture::cb;
  p.log_user_data = &log;
  p.log_level = QSP_LOG_INFO;
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  REQUIRE(ctx != nullptr);
  REQUIRE_FALSE(log.lines.empty());
  bool fallback = false;
  for (const auto& l : log.lines) {
    INFO("log line (" << l.first << "): " << l.second);
    CHECK(l.first <= QSP_LOG_INFO);
    CHECK_FALSE(l.second.empty());
    if (l.second.find("CPU") != std::string::npos) fallback = true;
  }
  CHECK(fallback);

  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  CHECK(info.backend == QSP_BACKEND_CPU);
  CHECK(info.device_index == -1);
  CHECK(info.n_threads == 2);
  CHECK(std::memchr(info.device_name, 0, sizeof info.device_name) != nullptr);
  CHECK(std::strlen(info.device_name) > 0);
  const uint64_t kv_elems = uint64_t(2) * fx.m.spec.n_layers * fx.m.spec.max_seq * fx.m.spec.n_kv_heads * fx.m.spec.head_dim;
  CHECK(info.kv_cache_bytes >= kv_elems * 2);  // at least fp16 keys and values
  CHECK(info.scratch_bytes > 0);
  REQUIRE(fx.m.upload(ctx) == QSP_OK);
  fx.works(ctx);
  qsp_context_destroy(ctx);

  // At WARN the informational fallback line is filtered out.
  LogCapture quiet;
  p.log_user_data = &quiet;
  p.log_level = QSP_LOG_WARN;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  for (const auto& l : quiet.lines) CHECK(l.first <= QSP_LOG_WARN);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: the process-wide log sink serves contexts without their own", "[api]") {
  if (qsp_backend_available(QSP_BACKEND_CUDA) != 0) {
    WARN("a CUDA device is present: AUTO does not fall back here");
    return;
  }
  Fixture fx(17);
  LogCapture global, own;
  qsp_set_log_callback(&LogCapture::cb, &global, QSP_LOG_INFO);
  qsp_context_params p = fx.m.params;
  p.backend = QSP_BACKEND_AUTO;
  qsp_context* a = nullptr;
  const qsp_status sa = qsp_context_create(&p, &a);
  p.log_callback = &LogCapture::cb;
  p.log_user_data = &own;
  p.log_level = QSP_LOG_INFO;
  qsp_context* b = nullptr;
  const size_t global_after_a = global.lines.size();
  const qsp_status sb = qsp_context_create(&p, &b);
  qsp_set_log_callback(nullptr, nullptr, QSP_LOG_WARN);  // restore the default before any REQUIRE
  REQUIRE(sa == QSP_OK);
  REQUIRE(sb == QSP_OK);
  CHECK(global_after_a > 0);
  CHECK(global.lines.size() == global_after_a);  // b logged to its own sink only
  CHECK_FALSE(own.lines.empty());
  qsp_context_destroy(a);
  qsp_context_destroy(b);
  // Restored: nothing more reaches the capture.
  const size_t n = global.lines.size();
  p.log_callback = nullptr;
  REQUIRE(qsp_context_create(&p, &a) == QSP_OK);
  qsp_context_destroy(a);
  CHECK(global.lines.size() == n);
}

TEST_CASE("api: qsp_context_get_info on the CPU backend", "[api]") {
  Fixture fx(18);
  qsp_context* ctx = fx.create();
  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  CHECK(info.backend == QSP_BACKEND_CPU);
  CHECK(info.device_index == -1);
  CHECK(info.n_threads == 2);
  CHECK(std::strlen(info.device_name) > 0);
  CHECK(info.kv_cache_bytes > 0);
  qsp_context_params p = fx.m.params;
  p.n_threads = 1;
  qsp_context* one = nullptr;
  REQUIRE(qsp_context_create(&p, &one) == QSP_OK);
  REQUIRE(qsp_context_get_info(one, &info) == QSP_OK);
  CHECK(info.n_threads == 1);
  REQUIRE(fx.m.upload(one) == QSP_OK);
  // The thread count changes nothing in the CPU results.
  REQUIRE(qsp_prefill(one, fx.toks.data(), uint32_t(fx.toks.size())) == QSP_OK);
  CHECK(rel_l2(fx.logits(one).data(), fx.ref.data(), fx.vocab()) <= 1e-6);
  qsp_context_destroy(one);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: the last error is kept per thread", "[api]") {
  qsp_cache_stats cs;
  qsp_cache_stats_init(&cs);
  REQUIRE(qsp_cache_stats_get(123, 0, &cs) == QSP_ERR_INVALID_ARGUMENT);
  const std::string mine = qsp_last_error();
  REQUIRE_FALSE(mine.empty());
  std::string before, after;
  std::thread th([&] {
    before = qsp_last_error();
    qsp_kv_clear(nullptr);
    after = qsp_last_error();
  });
  th.join();
  CHECK(before.empty());  // a new thread has no failure yet
  CHECK(has_word(after, "ctx"));
  CHECK(std::string(qsp_last_error()) == mine);  // untouched by the other thread
}
