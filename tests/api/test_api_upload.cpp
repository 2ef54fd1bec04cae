// The C API contract of qsp.h, part 2: weight uploads (validation, a failed
// upload keeps the previous weights, the handle cache and its conflicts).
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

// ---- Uploads ------------------------------------------------------------------------

TEST_CASE("api: upload validation errors, the context keeps working after each", "[api]") {
  Fixture fx(4);
  qsp_context* ctx = fx.create();
  const TestModel& m = fx.m;
  const uint32_t nl = m.spec.n_layers;

  SECTION("layer index out of range") {
    qsp_layer_weights w = m.layer_weights(0);
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "layer 2", qsp_upload_layer(ctx, nl, &w));
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_OUT_OF_RANGE, "layer 4294967295", qsp_upload_layer(ctx, 0xFFFFFFFFu, &w));
  }
  SECTION("wrong shapes name the slot") {
    qsp_layer_weights w = m.layer_weights(0);
    w.wq = m.layers[0][2].view();  // wk's tensor (64 x 128) where 128 x 128 is needed
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 0 wq", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(1);
    w.w_down = m.layers[1][8].view();  // w_gate's (256 x 128) where 128 x 256 is needed
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 1 w_down", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(1);
    w.k_norm.n_cols = m.spec.head_dim * 2;
    w.k_norm.n_bytes = w.k_norm.n_cols * 4;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 1 k_norm", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(0);
    w.attn_norm.n_rows = 2;
    w.attn_norm.n_cols = m.spec.hidden / 2;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "layer 0 attn_norm", qsp_upload_layer(ctx, 0, &w));
    qsp_tensor e = m.embd.view();
    e.n_rows -= 1;
    e.n_bytes = qsp_dtype_size(e.dtype, e.n_rows, e.n_cols);
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "token_embd", qsp_upload_embedding(ctx, &e));
    qsp_output_weights o = m.output_weights();
    o.lm_head = m.layers[0][1].view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "lm_head", qsp_upload_output(ctx, &o));
    o = m.output_weights();
    o.norm = m.layers[0][4].view();  // q_norm: 1 x head_dim, not 1 x hidden
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_SHAPE, "output_norm", qsp_upload_output(ctx, &o));
  }
  SECTION("wrong byte sizes, unknown dtypes and quantized norms give DTYPE") {
    qsp_layer_weights w = m.layer_weights(0);
    w.wk.n_bytes -= 1;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 wk", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(0);
    w.wk.n_bytes += 18;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 wk", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(0);
    w.w_up.dtype = QSP_DTYPE_Q8_0;  // Q4_0 bytes declared as Q8_0: the byte size is wrong for it
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 w_up", qsp_upload_layer(ctx, 0, &w));
    for (int32_t bad : {4, 5, 31, -1}) {
      INFO("dtype " << bad);
      w = m.layer_weights(1);
      w.wv.dtype = bad;
      EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 1 wv", qsp_upload_layer(ctx, 1, &w));
    }
    qsp_tensor e = m.embd.view();
    e.dtype = 16;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "token_embd", qsp_upload_embedding(ctx, &e));
    // Norm vectors must be f32 / f16 / bf16: a correctly sized Q8_0 / Q4_0 vector is refused.
    std::mt19937_64 rng(4);
    const HostTensor q8 = make_tensor(rng, 0xA910FFFF0001ull, QSP_DTYPE_Q8_0, 1, m.spec.hidden, 1.0f, 0.2f);
    const HostTensor q4 = make_tensor(rng, 0xA910FFFF0002ull, QSP_DTYPE_Q4_0, 1, m.spec.head_dim, 1.0f, 0.2f);
    w = m.layer_weights(1);
    w.attn_norm = q8.view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 1 attn_norm", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(0);
    w.k_norm = q4.view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "layer 0 k_norm", qsp_upload_layer(ctx, 0, &w));
    qsp_output_weights o = m.output_weights();
    o.norm = q8.view();
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_DTYPE, "output_norm", qsp_upload_output(ctx, &o));
  }
  SECTION("a quantized slot whose column count is not a multiple of 32 gives DTYPE") {
    // head_dim 20: wo is hidden x 80, which Q4_0 / Q8_0 cannot store.
    qsp_context_params p = m.params;
    p.head_dim = 20;
    qsp_context* c2 = nullptr;
    REQUIRE(qsp_context_create(&p, &c2) == QSP_OK);
    std::mt19937_64 rng(5);
    const HostTensor wo = make_tensor(rng, 0xA910FFFF0010ull, QSP_DTYPE_F32, m.spec.hidden, 80, 0.0f, 0.05f);
    qsp_layer_weights w;
    qsp_layer_weights_init(&w);
    w.wo = wo.view();
    w.wo.dtype = QSP_DTYPE_Q4_0;
    w.wo.n_bytes = 0;  // what qsp_dtype_size reports for it
    const HostTensor an = make_tensor(rng, 0xA910FFFF0011ull, QSP_DTYPE_F32, 1, m.spec.hidden, 1.0f, 0.2f);
    const HostTensor wq = make_tensor(rng, 0xA910FFFF0012ull, QSP_DTYPE_Q8_0, 80, m.spec.hidden, 0.0f, 0.05f);
    const HostTensor wk = make_tensor(rng, 0xA910FFFF0013ull, QSP_DTYPE_Q8_0, 40, m.spec.hidden, 0.0f, 0.05f);
    const HostTensor wv = make_tensor(rng, 0xA910FFFF0014ull, QSP_DTYPE_Q8_0, 40, m.spec.hidden, 0.0f, 0.05f);
    const HostTensor qn = make_tensor(rng, 0xA910FFFF0015ull, QSP_DTYPE_F32, 1, 20, 1.0f, 0.2f);
    w.attn_norm = an.view();
    w.wq = wq.view();
    w.wk = wk.view();
    w.wv = wv.view();
    w.q_norm = qn.view();
    w.k_norm = qn.view();
    EXPECT_FAIL(c2, QSP_ERR_DTYPE, "layer 0 wo", qsp_upload_layer(c2, 0, &w));
    qsp_context_destroy(c2);
    fx.works(ctx);
  }
  SECTION("handle 0, reserved fields and stray QK-norm tensors give INVALID_ARGUMENT") {
    qsp_layer_weights w = m.layer_weights(0);
    w.wo.handle = 0;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 0 wo", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(1);
    w.q_norm.handle = 0;  // required: the model has qk_norm 1
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 1 q_norm", qsp_upload_layer(ctx, 1, &w));
    w = m.layer_weights(0);
    w.w_up.reserved = 1;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "layer 0 w_up|reserved", qsp_upload_layer(ctx, 0, &w));
    w = m.layer_weights(0);
    w.reserved = 7;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "reserved", qsp_upload_layer(ctx, 0, &w));
    qsp_output_weights o = m.output_weights();
    o.reserved = 1;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "reserved", qsp_upload_output(ctx, &o));
    o = m.output_weights();
    o.lm_head.handle = 0;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "lm_head", qsp_upload_output(ctx, &o));
    qsp_tensor e = m.embd.view();
    e.handle = 0;
    EXPECT_FAIL_THEN_WORKS(fx, ctx, QSP_ERR_INVALID_ARGUMENT, "token_embd", qsp_upload_embedding(ctx, &e));
  }
  SECTION("q_norm / k_norm on a model without QK-norm") {
    Fixture ll(5, /*qwen3=*/false);
    qsp_context* lc = ll.create();
    qsp_layer_weights w = ll.m.layer_weights(0);
    w.q_norm = ll.m.layers[0][4].view();
    w.k_norm = ll.m.layers[0][5].view();
    EXPECT_FAIL_THEN_WORKS(ll, lc, QSP_ERR_INVALID_ARGUMENT, "q_norm", qsp_upload_layer(lc, 0, &w));
    qsp_context_destroy(lc);
  }
  qsp_context_destroy(ctx);
}

TEST_CASE("api: a failed upload_layer keeps the layer's previous weights", "[api]") {
  Fixture fx(6);
  Fixture other(7);  // same shape, other weights and handles
  qsp_context* ctx = fx.create();
  fx.works(ctx);
  const qsp_cache_stats before = cache_stats();

  SECTION("new weights in every slot but a broken last one") {
    qsp_layer_weights w = other.m.layer_weights(0);
    w.w_down = other.m.layers[0][8].view();  // wrong shape, in the last slot checked
    EXPECT_FAIL(ctx, QSP_ERR_SHAPE, "layer 0 w_down", qsp_upload_layer(ctx, 0, &w));
    // The other model's tensors were not kept anywhere.
    CHECK(cache_stats().n_tensors == before.n_tensors);
    fx.works(ctx);
  }
  SECTION("one new handle, then a conflict in a later slot") {
    qsp_layer_weights w = fx.m.layer_weights(1);
    w.wq = other.m.layers[1][1].view();                 // valid, new
    w.w_up = fx.m.layers[0][9].view();                  // valid, cached
    w.w_down = fx.m.layers[1][10].view();
    w.w_down.handle = fx.m.layers[1][1].handle;         // wq's handle: 128 x 128 already, now 128 x 256
    EXPECT_FAIL(ctx, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_layer(ctx, 1, &w));
    CHECK(cache_stats().n_tensors == before.n_tensors);
    fx.works(ctx);
  }
  SECTION("a valid swap changes the logits, swapping back restores them") {
    qsp_layer_weights w = other.m.layer_weights(1);
    REQUIRE(qsp_upload_layer(ctx, 1, &w) == QSP_OK);
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    REQUIRE(qsp_prefill(ctx, fx.toks.data(), uint32_t(fx.toks.size())) == QSP_OK);
    REQUIRE_FALSE(bit_equal(fx.logits(ctx), fx.ref));
    w = fx.m.layer_weights(1);
    REQUIRE(qsp_upload_layer(ctx, 1, &w) == QSP_OK);
    fx.works(ctx);
  }
  qsp_context_destroy(ctx);
}

TEST_CASE("api: a cached handle is taken without reading its data", "[api]") {
  Fixture fx(8);
  qsp_context* ctx = fx.create();
  const qsp_cache_stats s0 = cache_stats();
  qsp_layer_weights w = fx.m.layer_weights(0);
  for (qsp_tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.q_norm, &w.k_norm, &w.wo, &w.ffn_norm, &w.w_gate,
                        &w.w_up, &w.w_down})
    t->data = nullptr;
  REQUIRE(qsp_upload_layer(ctx, 0, &w) == QSP_OK);
  qsp_tensor e = fx.m.embd.view();
  e.data = nullptr;
  REQUIRE(qsp_upload_embedding(ctx, &e) == QSP_OK);
  const qsp_cache_stats s1 = cache_stats();
  CHECK(s1.n_uploads == s0.n_uploads);
  CHECK(s1.n_hits == s0.n_hits + 12);
  fx.works(ctx);
  qsp_context_destroy(ctx);
}

TEST_CASE("api: re-registering a handle with other metadata is a HANDLE_CONFLICT", "[api]") {
  Fixture fx(9);
  qsp_context* a = fx.create();
  const TestModel& m = fx.m;
  std::mt19937_64 rng(9);
  char hex[32];

  SECTION("in the same context: another dtype") {
    const HostTensor h = m.layers[0][1];  // layer 0 wq, Q4_0
    const HostTensor q8 = make_tensor(rng, h.handle, QSP_DTYPE_Q8_0, h.rows, h.cols, 0.0f, 0.05f);
    qsp_layer_weights w = m.layer_weights(1);
    w.wq = q8.view();
    std::snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)h.handle);
    EXPECT_FAIL_THEN_WORKS(fx, a, QSP_ERR_HANDLE_CONFLICT, std::string("handle|") + hex, qsp_upload_layer(a, 1, &w));
  }
  SECTION("in the same context: another shape") {
    qsp_layer_weights w = m.layer_weights(1);
    w.wk.handle = m.layers[0][1].handle;  // registered as 128 x 128; wk is 64 x 128
    EXPECT_FAIL_THEN_WORKS(fx, a, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_layer(a, 1, &w));
    const HostTensor f16 = make_tensor(rng, m.layers[0][0].handle, QSP_DTYPE_F16, 1, m.spec.hidden, 1.0f, 0.2f);
    w = m.layer_weights(1);
    w.attn_norm = f16.view();  // layer 0's attn_norm handle, registered as f32
    EXPECT_FAIL_THEN_WORKS(fx, a, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_layer(a, 1, &w));
  }
  SECTION("in a second context of the same model") {
    qsp_context* b = fx.create();
    qsp_tensor e = m.embd.view();  // Q8_0 vocab x hidden ...
    e.handle = m.lm_head.handle;   // ... under the LM head's handle (Q4_0 vocab x hidden)
    EXPECT_FAIL_THEN_WORKS(fx, b, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_embedding(b, &e));
    fx.works(a);
    qsp_context_destroy(b);
  }
  SECTION("in a context of another model shape") {
    ModelSpec s;
    s.hidden = 64;
    s.ffn = 128;
    s.n_heads = 2;
    s.n_kv_heads = 1;
    s.seed = 5099;
    s.handle_base = 0xA91F00000000000ull;
    TestModel small = make_model(s);
    small.params.n_threads = 2;
    qsp_context* c = nullptr;
    REQUIRE(qsp_context_create(&small.params, &c) == QSP_OK);
    qsp_tensor e = small.embd.view();
    e.handle = m.embd.handle;  // 1000 x 128 in the cache, 1000 x 64 here
    EXPECT_FAIL(c, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_embedding(c, &e));
    // Its own handles are fine.
    REQUIRE(small.upload(c) == QSP_OK);
    REQUIRE(qsp_prefill(c, fx.toks.data(), 5) == QSP_OK);
    qsp_context_destroy(c);
    fx.works(a);
  }
  qsp_context_destroy(a);
}

TEST_CASE("api: a handle freed with its last context may be registered anew with other metadata", "[api]") {
  Fixture fx(20);
  const uint64_t h = fx.m.embd.handle;
  qsp_context* a = fx.create();
  fx.works(a);
  qsp_context_destroy(a);  // the last user of every handle of fx
  // Now the embedding's handle names other bytes (another dtype): no conflict, a fresh upload.
  std::mt19937_64 rng(20);
  const HostTensor f16 = make_tensor(rng, h, QSP_DTYPE_F16, fx.vocab(), fx.m.spec.hidden, 0.0f, 0.05f);
  qsp_context* b = fx.bare();
  const qsp_cache_stats s0 = cache_stats();
  qsp_tensor e = f16.view();
  REQUIRE(qsp_upload_embedding(b, &e) == QSP_OK);
  CHECK(cache_stats().n_uploads == s0.n_uploads + 1);
  // While b holds it, the old metadata conflicts.
  qsp_tensor old = fx.m.embd.view();
  EXPECT_FAIL(b, QSP_ERR_HANDLE_CONFLICT, "handle", qsp_upload_embedding(b, &old));
  qsp_context_destroy(b);
}
