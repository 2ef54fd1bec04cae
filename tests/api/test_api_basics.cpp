// The C API contract of qsp.h, part 1: versions, status strings, init
// functions, NULL arguments, struct_size rules and the model shape at create.
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

// ---- Global functions -----------------------------------------------------------

TEST_CASE("api: version functions match the macros", "[api]") {
  REQUIRE(std::string(qsp_version_string()) == QSP_VERSION_STRING);
  REQUIRE(qsp_version_number() == uint32_t(QSP_VERSION_NUMBER));
  REQUIRE(qsp_version_number() == uint32_t(QSP_VERSION_MAJOR * 10000 + QSP_VERSION_MINOR * 100 + QSP_VERSION_PATCH));
  REQUIRE(qsp_abi_version() == uint32_t(QSP_ABI_VERSION));
  REQUIRE(QSP_ABI_VERSION == QSP_VERSION_MAJOR);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d.%d.%d", QSP_VERSION_MAJOR, QSP_VERSION_MINOR, QSP_VERSION_PATCH);
  REQUIRE(std::string(qsp_version_string()) == buf);
}

// (No ";" in test names: catch_discover_tests cuts the ctest name there, and
// the cut name matches no test, so ctest would pass without running it.)
TEST_CASE("api: every status has a distinct non-empty string, unknown ones say so", "[api]") {
  const qsp_status all[] = {QSP_OK,
                            QSP_ERR_INVALID_ARGUMENT,
                            QSP_ERR_STRUCT_SIZE,
                            QSP_ERR_SHAPE,
                            QSP_ERR_DTYPE,
                            QSP_ERR_OUT_OF_RANGE,
                            QSP_ERR_NOT_READY,
                            QSP_ERR_CONTEXT_FULL,
                            QSP_ERR_HANDLE_CONFLICT,
                            QSP_ERR_NO_DEVICE,
                            QSP_ERR_OUT_OF_MEMORY,
                            QSP_ERR_DEVICE_OUT_OF_MEMORY,
                            QSP_ERR_DEVICE,
                            QSP_ERR_UNSUPPORTED,
                            QSP_ERR_INTERNAL,
                            QSP_ERR_IO,
                            QSP_ERR_BAD_FORMAT,
                            QSP_ERR_BUFFER_TOO_SMALL};
  std::set<std::string> seen;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
    REQUIRE(all[i] == -qsp_status(i));  // the values are fixed: 0, -1, ..., -17
    const char* s = qsp_status_string(all[i]);
    REQUIRE(s != nullptr);
    INFO("status " << all[i] << ": \"" << s << "\"");
    REQUIRE(std::strlen(s) > 0);
    REQUIRE(std::string(s) != "unknown status");
    seen.insert(s);
  }
  REQUIRE(seen.size() == sizeof all / sizeof all[0]);
  for (qsp_status s : {1, 2, -18, -100, 1000, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
    REQUIRE(qsp_status_string(s) != nullptr);
    REQUIRE(std::string(qsp_status_string(s)) == "unknown status");
  }
}

TEST_CASE("api: backend availability", "[api]") {
  REQUIRE(qsp_backend_available(QSP_BACKEND_CPU) == 1);
  REQUIRE(qsp_backend_available(QSP_BACKEND_AUTO) == 1);
  const int32_t cuda = qsp_backend_available(QSP_BACKEND_CUDA);
  REQUIRE((cuda == 0 || cuda == 1));
  for (int32_t b : {-1, 3, 99}) REQUIRE(qsp_backend_available(b) == 0);
}

TEST_CASE("api: init functions set defaults and are NULL-safe, destroy(NULL) is a no-op", "[api]") {
  qsp_context_params_init(nullptr);
  qsp_context_info_init(nullptr);
  qsp_layer_weights_init(nullptr);
  qsp_output_weights_init(nullptr);
  qsp_cache_stats_init(nullptr);
  qsp_context_destroy(nullptr);

  qsp_context_params p;
  std::memset(&p, 0xCD, sizeof p);
  qsp_context_params_init(&p);
  REQUIRE(p.struct_size == sizeof p);
  REQUIRE(p.backend == QSP_BACKEND_AUTO);
  REQUIRE(p.n_threads == 0);
  REQUIRE(p.rms_eps == 1e-6f);
  REQUIRE(p.rope_theta == 1e6f);
  REQUIRE(p.rope_style == QSP_ROPE_NEOX);
  REQUIRE(p.qk_norm == 1);
  REQUIRE(p.log_level == QSP_LOG_WARN);
  REQUIRE(p.log_callback == nullptr);
  REQUIRE(p.log_user_data == nullptr);
  REQUIRE(p.n_devices == 0);    // the unsplit model (1.3; reserved0 before)
  REQUIRE(p.device_mask == 0);  // (1.3; reserved2 before)
  REQUIRE(p.reserved1 == 0);
  REQUIRE(p.device_index == 0);
  REQUIRE((p.n_layers | p.hidden_size | p.intermediate_size | p.n_heads | p.n_kv_heads | p.head_dim |
           p.vocab_size | p.max_seq_len) == 0);
  // The zero model shape must be filled in.
  expect_create_fails(p, QSP_ERR_SHAPE, "n_layers");

  qsp_layer_weights w;
  std::memset(&w, 0xCD, sizeof w);
  qsp_layer_weights_init(&w);
  REQUIRE(w.struct_size == sizeof w);
  REQUIRE(w.reserved == 0);
  REQUIRE(w.wq.handle == 0);
  REQUIRE(w.w_down.data == nullptr);
  REQUIRE(w.k_norm.n_bytes == 0);

  qsp_output_weights o;
  std::memset(&o, 0xCD, sizeof o);
  qsp_output_weights_init(&o);
  REQUIRE(o.struct_size == sizeof o);
  REQUIRE(o.reserved == 0);
  REQUIRE(o.lm_head.handle == 0);

  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(info.struct_size == sizeof info);
  qsp_cache_stats cs;
  qsp_cache_stats_init(&cs);
  REQUIRE(cs.struct_size == sizeof cs);
}

// ---- NULL arguments --------------------------------------------------------------

TEST_CASE("api: NULL arguments give INVALID_ARGUMENT and a message naming them", "[api]") {
  Fixture fx(1);
  qsp_context* ctx = fx.create();
  REQUIRE(std::string(qsp_context_last_error(ctx)).empty());  // no failure yet on this context
  fx.works(ctx);
  const int32_t tok[3] = {1, 2, 3};
  std::vector<float> hidden(3 * fx.m.spec.hidden, 0.01f);
  float buf[1000];
  const float* lp = nullptr;
  uint32_t u = 0;
  int32_t t = 0;
  qsp_layer_weights lw = fx.m.layer_weights(0);
  qsp_output_weights ow = fx.m.output_weights();
  qsp_tensor emb = fx.m.embd.view();
  qsp_context_info info;
  qsp_context_info_init(&info);
  qsp_cache_stats cs;
  qsp_cache_stats_init(&cs);
  qsp_context_params p = fx.m.params;

  SECTION("a NULL context") {
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_context_get_info(nullptr, &info));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_upload_layer(nullptr, 0, &lw));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_upload_embedding(nullptr, &emb));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_upload_output(nullptr, &ow));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_prefill(nullptr, tok, 3));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_prefill_embeddings(nullptr, hidden.data(), 3));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_get_logits(nullptr, &lp, &u));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_copy_logits(nullptr, buf, 1000));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_greedy_token(nullptr, &t));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_kv_length(nullptr, &u));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_kv_clear(nullptr));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_kv_truncate(nullptr, 0));
    // A NULL context's last error is the thread's.
    REQUIRE(std::string(qsp_context_last_error(nullptr)) == qsp_last_error());
  }
  SECTION("NULL output and input pointers, named as in qsp.h") {
    qsp_context* out = kSentinel;
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "params|NULL", qsp_context_create(nullptr, &out));
    CHECK(out == nullptr);
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "out|NULL", qsp_context_create(&p, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "info|NULL", qsp_context_get_info(ctx, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "w|NULL", qsp_upload_layer(ctx, 0, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "w|NULL", qsp_upload_output(ctx, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "tokens|NULL", qsp_prefill(ctx, nullptr, 3));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "hidden|NULL", qsp_prefill_embeddings(ctx, nullptr, 3));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "logits|NULL", qsp_get_logits(ctx, nullptr, &u));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "out|NULL", qsp_copy_logits(ctx, nullptr, 1000));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token|NULL", qsp_greedy_token(ctx, nullptr));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "length|NULL", qsp_kv_length(ctx, nullptr));
    // After the failures above the logits of the last prefill are still there.
    REQUIRE(qsp_get_logits(ctx, &lp, &u) == QSP_OK);
    REQUIRE(u == fx.vocab());
    REQUIRE(std::memcmp(lp, fx.ref.data(), fx.vocab() * sizeof(float)) == 0);
  }
  SECTION("NULL pointers named differently from qsp.h's parameter names") {
    // qsp.h calls these token_embd and stats.
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token_embd|NULL", qsp_upload_embedding(ctx, nullptr));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "stats|NULL", qsp_cache_stats_get(QSP_BACKEND_CPU, 0, nullptr));
  }
  SECTION("NULL tensor data for a handle the cache does not hold") {
    qsp_layer_weights w = fx.m.layer_weights(1);
    w.w_gate.handle ^= 0x5A5A5A5A00ull;  // a new handle
    w.w_gate.data = nullptr;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 1 w_gate|data", qsp_upload_layer(ctx, 1, &w));
    qsp_tensor e = fx.m.embd.view();
    e.handle ^= 0x5A5A5A5A00ull;
    e.data = nullptr;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token_embd|data", qsp_upload_embedding(ctx, &e));
  }
  SECTION("zero-sized and out-of-enum arguments") {
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "n_tokens", qsp_prefill(ctx, tok, 0));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "n_tokens", qsp_prefill_embeddings(ctx, hidden.data(), 0));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "backend", qsp_cache_stats_get(QSP_BACKEND_AUTO, 0, &cs));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "backend", qsp_cache_stats_get(42, 0, &cs));
    EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "device_index", qsp_cache_stats_get(QSP_BACKEND_CUDA, -1, &cs));
    fx.works(ctx);
  }
  qsp_context_destroy(ctx);
}

// ---- struct_size -------------------------------------------------------------------

TEST_CASE("api: a wrong struct_size on every option struct gives STRUCT_SIZE", "[api]") {
  Fixture fx(2);
  qsp_context* ctx = fx.create();
  for (uint32_t bad : {0u, 1u, 2u}) {
    SECTION("struct_size variant " + std::to_string(bad)) {
      auto size_of = [&](size_t real) -> uint32_t { return bad == 0 ? 0u : bad == 1 ? uint32_t(real - 1) : 4u; };
      qsp_context_params p = fx.m.params;
      p.struct_size = size_of(sizeof p);
      expect_create_fails(p, QSP_ERR_STRUCT_SIZE, "struct_size");

      qsp_context_info info;
      qsp_context_info_init(&info);
      info.struct_size = size_of(sizeof info);
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_context_get_info(ctx, &info));

      qsp_layer_weights w = fx.m.layer_weights(0);
      w.struct_size = size_of(sizeof w);
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_upload_layer(ctx, 0, &w));

      qsp_output_weights o = fx.m.output_weights();
      o.struct_size = size_of(sizeof o);
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_upload_output(ctx, &o));

      qsp_cache_stats cs;
      qsp_cache_stats_init(&cs);
      cs.struct_size = size_of(sizeof cs);
      EXPECT_FAIL(nullptr, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &cs));
    }
  }
  qsp_context_destroy(ctx);
}

// ---- Model shape at create --------------------------------------------------------

TEST_CASE("api: inconsistent model parameters at create", "[api]") {
  Fixture fx(3);
  const qsp_context_params good = fx.m.params;
  {
    qsp_context* ctx = nullptr;
    REQUIRE(qsp_context_create(&good, &ctx) == QSP_OK);
    qsp_context_destroy(ctx);
  }
  const CreateCase cases[] = {
      {"n_layers 0", [](qsp_context_params& p) { p.n_layers = 0; }, QSP_ERR_SHAPE, "n_layers"},
      {"hidden 0", [](qsp_context_params& p) { p.hidden_size = 0; }, QSP_ERR_SHAPE, "hidden_size"},
      {"ffn 0", [](qsp_context_params& p) { p.intermediate_size = 0; }, QSP_ERR_SHAPE, "intermediate_size"},
      {"n_heads 0", [](qsp_context_params& p) { p.n_heads = 0; }, QSP_ERR_SHAPE, "n_heads"},
      {"n_kv_heads 0", [](qsp_context_params& p) { p.n_kv_heads = 0; }, QSP_ERR_SHAPE, "n_kv_heads"},
      {"head_dim 0", [](qsp_context_params& p) { p.head_dim = 0; }, QSP_ERR_SHAPE, "head_dim"},
      {"vocab 0", [](qsp_context_params& p) { p.vocab_size = 0; }, QSP_ERR_SHAPE, "vocab_size"},
      {"max_seq 0", [](qsp_context_params& p) { p.max_seq_len = 0; }, QSP_ERR_SHAPE, "max_seq_len"},
      {"4 heads over 3 kv heads", [](qsp_context_params& p) { p.n_kv_heads = 3; }, QSP_ERR_SHAPE, "n_heads|n_kv_heads"},
      {"2 heads over 4 kv heads", [](qsp_context_params& p) { p.n_heads = 2; p.n_kv_heads = 4; }, QSP_ERR_SHAPE, "n_kv_heads"},
      {"odd head_dim", [](qsp_context_params& p) { p.head_dim = 31; }, QSP_ERR_SHAPE, "head_dim"},
      {"rope_style 2", [](qsp_context_params& p) { p.rope_style = 2; }, QSP_ERR_INVALID_ARGUMENT, "rope_style"},
      {"rope_style -1", [](qsp_context_params& p) { p.rope_style = -1; }, QSP_ERR_INVALID_ARGUMENT, "rope_style"},
      {"backend 3", [](qsp_context_params& p) { p.backend = 3; }, QSP_ERR_INVALID_ARGUMENT, "backend"},
      {"backend -1", [](qsp_context_params& p) { p.backend = -1; }, QSP_ERR_INVALID_ARGUMENT, "backend"},
      {"reserved1", [](qsp_context_params& p) { p.reserved1 = 0x80000000u; }, QSP_ERR_INVALID_ARGUMENT, "reserved"},
      {"qk_norm 2", [](qsp_context_params& p) { p.qk_norm = 2; }, QSP_ERR_INVALID_ARGUMENT, "qk_norm"},
      {"n_threads -1", [](qsp_context_params& p) { p.n_threads = -1; }, QSP_ERR_INVALID_ARGUMENT, "n_threads"},
      {"device_index -1", [](qsp_context_params& p) { p.device_index = -1; }, QSP_ERR_INVALID_ARGUMENT, "device_index"},
      {"rms_eps 0", [](qsp_context_params& p) { p.rms_eps = 0.0f; }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rms_eps < 0", [](qsp_context_params& p) { p.rms_eps = -1e-6f; }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rms_eps NaN", [](qsp_context_params& p) { p.rms_eps = std::nanf(""); }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rms_eps inf", [](qsp_context_params& p) { p.rms_eps = INFINITY; }, QSP_ERR_INVALID_ARGUMENT, "rms_eps"},
      {"rope_theta 0", [](qsp_context_params& p) { p.rope_theta = 0.0f; }, QSP_ERR_INVALID_ARGUMENT, "rope_theta"},
      {"rope_theta NaN", [](qsp_context_params& p) { p.rope_theta = std::nanf(""); }, QSP_ERR_INVALID_ARGUMENT, "rope_theta"},
  };
  expect_create_cases(good, cases);
}

TEST_CASE("api: a KV cache too large to allocate is OUT_OF_MEMORY, not a crash", "[api]") {
#if QSP_TEST_SANITIZED
  WARN("skipped under a sanitizer: it aborts on impossible allocations (allocator_may_return_null=0)");
  return;
#endif
  Fixture fx(19);
  qsp_context_params p = fx.m.params;
  // 4096 layers x 1024 KV features x 16M tokens x 2 x 4 bytes = 2^49 bytes: past any address space.
  p.n_layers = 4096;
  p.n_heads = 8;
  p.n_kv_heads = 8;
  p.head_dim = 128;
  p.max_seq_len = 1u << 24;
  expect_create_fails(p, QSP_ERR_OUT_OF_MEMORY, "memory");
}
