// Tensor parallelism's partitioning on the CPU (issue 19): a context with
// n_devices = N runs the model as N Megatron-style shards one after another
// (whatever qsp_context_params.device_mask says: the CPU is one device),
// with a local sum in place of each all-reduce. It must equal the unsplit model bit
// for bit: logits and greedy token, for N = 1, 2, 4, 8, Qwen3- and
// Llama-style shapes, Q4_0 / Q8_0 / Q4_K weights, prompts of 1 to 260
// tokens, chunked prompts, KV truncate / clear, embeddings, batches. Shapes
// that do not divide are refused at qsp_context_create (or, for a K-quant
// wo / w_down, at upload) naming what does not divide. The fields are 1.2's
// reserved0 / reserved2: a caller that leaves them 0 gets the unsplit model.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "api/fixture.h"
#include "common/error.h"
#include "engine/config.h"
#include "engine/partition.h"
#include "engine/slots.h"
#include "formats/format.h"
#include "gguf_test_util.h"
#include "support/api.h"
#include "support/model.h"
#include "support/rng.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

using namespace qsp_test;

namespace {

uint64_t handles(uint64_t id) { return 0x5A4D000000000000ull + (id << 32); }

// A Qwen3-0.6B-like shape (16 query heads over 8 KV heads, QK-norm, NEOX
// RoPE) scaled down; for a K-quant, wo and w_down need 256 columns per shard
// at N = 8: heads of 128 and ffn 2048, hidden 256.
ModelSpec qwen3_like(int32_t wtype, uint64_t id) {
  ModelSpec s;
  s.qwen3 = true;
  s.wtype = wtype;
  s.n_layers = 2;
  s.n_heads = 16;
  s.n_kv_heads = 8;
  const bool kq = wtype == QSP_DTYPE_Q4_K;
  s.hidden = kq ? 256 : 128;
  s.head_dim = kq ? 128 : 32;
  s.ffn = kq ? 2048 : 512;
  s.vocab = 1003;  // not a multiple of 8: the LM head's shards differ by a row
  s.max_seq = 300;
  s.seed = 300 + id;
  s.handle_base = handles(id);
  return s;
}

// Llama-3-like: 32 query heads over 8 KV heads, interleaved RoPE, no QK-norm.
ModelSpec llama_like(int32_t wtype, uint64_t id) {
  ModelSpec s = qwen3_like(wtype, id);
  s.qwen3 = false;
  s.rope_theta = 5e5f;
  s.n_heads = 32;
  const bool kq = wtype == QSP_DTYPE_Q4_K;
  s.head_dim = kq ? 64 : 16;
  s.ffn = kq ? 2048 : 768;
  s.vocab = 1000;
  return s;
}

TestModel make(const ModelSpec& s) {
  TestModel m = make_model(s);
  m.params.n_threads = 2;
  return m;
}

// A context of m split n ways (0: the plain unsplit context), uploaded.
qsp_context* create(const TestModel& m, uint32_t n, uint32_t device_mask = 0) {
  qsp_context_params p = m.params;
  p.n_devices = n;
  p.device_mask = device_mask;
  qsp_context* ctx = nullptr;
  INFO("n_devices " << n);
  {
    const qsp_status st = qsp_context_create(&p, &ctx);
    INFO(qsp_last_error());
    REQUIRE(st == QSP_OK);
  }
  INFO(qsp_context_last_error(ctx));
  REQUIRE(m.upload(ctx) == QSP_OK);
  return ctx;
}

struct Step {
  std::string what;
  std::vector<float> logits;
  int32_t greedy = -1;
};

// Prompts of 1, 3, 17, 100 tokens; a prompt in pieces (a decode step among
// them); truncate and continue; clear and start again; embeddings; with
// `long_prompt`, 260 tokens (two of the backend's internal chunks).
std::vector<Step> scenario(const TestModel& m, qsp_context* ctx, bool long_prompt) {
  const std::vector<int32_t> t = random_tokens(300, m.spec.vocab, m.spec.seed + 7);
  std::vector<Step> out;
  auto record = [&](const std::string& what) {
    Step s;
    s.what = what;
    s.logits = logits_of(ctx, m.spec.vocab);
    REQUIRE(qsp_greedy_token(ctx, &s.greedy) == QSP_OK);
    out.push_back(std::move(s));
  };
  for (uint32_t n : {1u, 3u, 17u, 100u}) {
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    prefill_ok(ctx, t.data(), n);
    record("prompt of " + std::to_string(n));
  }
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  uint32_t at = 0;
  for (uint32_t n : {5u, 35u, 1u, 1u, 60u}) {
    prefill_ok(ctx, t.data() + at, n);
    at += n;
    record("chunked, " + std::to_string(at) + " tokens");
  }
  REQUIRE(qsp_kv_truncate(ctx, 20) == QSP_OK);
  prefill_ok(ctx, t.data() + 150, 17);
  record("truncated to 20, then 17 more");
  REQUIRE(qsp_kv_truncate(ctx, 0) == QSP_OK);
  prefill_ok(ctx, t.data() + 3, 9);
  record("truncated to 0, then 9");
  std::vector<float> rows;  // tokens 40..47 embedded by hand
  for (uint32_t i = 40; i < 47; ++i)
    rows.insert(rows.end(), m.embd.values.begin() + uint64_t(t[i]) * m.spec.hidden,
                m.embd.values.begin() + uint64_t(t[i] + 1) * m.spec.hidden);
  REQUIRE(qsp_prefill_embeddings(ctx, rows.data(), 7) == QSP_OK);
  record("7 embeddings after 9 tokens");
  if (long_prompt) {
    REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
    prefill_ok(ctx, t.data(), 260);
    record("prompt of 260 (two internal chunks)");
  }
  return out;
}

void check_shards_equal_unsplit(const TestModel& m, bool long_prompt) {
  qsp_context* ref = create(m, 0);
  const std::vector<Step> want = scenario(m, ref, long_prompt);
  // The logits are not degenerate (else "equal" would prove little).
  for (const Step& s : want) {
    float lo = s.logits[0], hi = s.logits[0];
    for (float v : s.logits) lo = std::min(lo, v), hi = std::max(hi, v);
    REQUIRE(hi - lo > 1e-2f);
  }
  qsp_context_info ri;
  qsp_context_info_init(&ri);
  REQUIRE(qsp_context_get_info(ref, &ri) == QSP_OK);
  for (uint32_t n : {1u, 2u, 4u, 8u}) {
    // Whatever the devices, the CPU runs the shards in turn: n devices from
    // device_index on (mask 0), n named devices, or every shard on one.
    const uint32_t mask = n == 4 ? 0xF0u : n == 8 ? 0x4u : 0u;
    qsp_context* ctx = create(m, n, mask);
    qsp_context_info info;
    qsp_context_info_init(&info);
    REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
    CHECK(info.backend == QSP_BACKEND_CPU);
    CHECK(info.kv_cache_bytes == ri.kv_cache_bytes);  // the cache split by KV heads, not copied
    CHECK((std::string(info.device_name).find(std::to_string(n) + " shards") != std::string::npos) == (n > 1));
    const std::vector<Step> got = scenario(m, ctx, long_prompt);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(n << " shards, " << want[i].what);
      CHECK(bit_equal(got[i].logits, want[i].logits));
      CHECK(got[i].greedy == want[i].greedy);
    }
    qsp_context_destroy(ctx);
  }
  qsp_context_destroy(ref);
}

}  // namespace

TEST_CASE("shard: Qwen3-0.6B-like, Q4_0, 1/2/4/8 shards equal the unsplit model bit for bit", "[shard]") {
  check_shards_equal_unsplit(make(qwen3_like(QSP_DTYPE_Q4_0, 1)), true);
}

TEST_CASE("shard: Qwen3-0.6B-like, Q8_0 (F16 embedding, tied), shards equal unsplit", "[shard]") {
  ModelSpec s = qwen3_like(QSP_DTYPE_Q8_0, 2);
  s.embd_type = QSP_DTYPE_F16;
  s.tied = true;  // the LM head's shards are row views of the replicated embedding
  check_shards_equal_unsplit(make(s), false);
}

TEST_CASE("shard: Qwen3-0.6B-like, Q4_K (Q6_K w_down), shards equal unsplit", "[shard]") {
  TestModel m = make(qwen3_like(QSP_DTYPE_Q4_K, 3));
  retype(m, [](uint32_t, LayerSlot s) { return s == kWDown ? QSP_DTYPE_Q6_K : QSP_DTYPE_Q4_K; }, QSP_DTYPE_Q4_K,
         QSP_DTYPE_Q6_K);
  check_shards_equal_unsplit(m, false);
}

TEST_CASE("shard: Llama-style, Q4_0, shards equal unsplit", "[shard]") {
  check_shards_equal_unsplit(make(llama_like(QSP_DTYPE_Q4_0, 4)), true);
}

TEST_CASE("shard: Llama-style, Q8_0, shards equal unsplit", "[shard]") {
  check_shards_equal_unsplit(make(llama_like(QSP_DTYPE_Q8_0, 5)), false);
}

TEST_CASE("shard: Llama-style, Q4_K, shards equal unsplit", "[shard]") {
  check_shards_equal_unsplit(make(llama_like(QSP_DTYPE_Q4_K, 6)), false);
}

TEST_CASE("shard: mixed Q4_0 / Q8_0 layers, shards equal unsplit", "[shard]") {
  check_shards_equal_unsplit(make(qwen3_like(-1, 7)), false);
}

TEST_CASE("shard: qsp_prefill_batch of sharded contexts equals unsplit single calls", "[shard][batch]") {
  const TestModel m = make(qwen3_like(QSP_DTYPE_Q4_0, 8));
  const uint32_t kSeqs = 3;
  std::vector<qsp_context*> shard, plain;
  for (uint32_t i = 0; i < kSeqs; ++i) {
    shard.push_back(create(m, 4));
    plain.push_back(create(m, 0));
  }
  const std::vector<int32_t> t = random_tokens(200, m.spec.vocab, 81);
  // A step of prompts, then decode steps, then a mix.
  const std::vector<std::vector<uint32_t>> steps = {{5, 1, 30}, {1, 1, 1}, {1, 40, 1}, {12, 1, 3}};
  uint32_t at = 0;
  for (const auto& lens : steps) {
    std::vector<qsp_batch_seq> b;
    for (uint32_t i = 0; i < kSeqs; ++i) {
      qsp_batch_seq s{};
      s.ctx = shard[i];
      s.tokens = t.data() + at + 50 * i;
      s.n_tokens = lens[i];
      b.push_back(s);
      prefill_ok(plain[i], s.tokens, lens[i]);
    }
    INFO(qsp_last_error());
    REQUIRE(qsp_prefill_batch(b.data(), kSeqs, sizeof(qsp_batch_seq)) == QSP_OK);
    for (uint32_t i = 0; i < kSeqs; ++i) {
      INFO("sequence " << i << " at " << at);
      CHECK(kv_len(shard[i]) == kv_len(plain[i]));
      CHECK(bit_equal(logits_of(shard[i], m.spec.vocab), logits_of(plain[i], m.spec.vocab)));
      int32_t a = -1, b2 = -2;
      REQUIRE(qsp_greedy_token(shard[i], &a) == QSP_OK);
      REQUIRE(qsp_greedy_token(plain[i], &b2) == QSP_OK);
      CHECK(a == b2);
    }
    at += 2;
  }
  // Contexts split differently do not share a batch; nothing changes.
  qsp_context* two = create(m, 2);
  const std::vector<float> before = logits_of(shard[0], m.spec.vocab);
  const uint32_t len0 = kv_len(shard[0]);
  qsp_batch_seq b[2] = {};
  b[0].ctx = shard[0];
  b[0].tokens = t.data();
  b[0].n_tokens = 2;
  b[1].ctx = two;
  b[1].tokens = t.data();
  b[1].n_tokens = 2;
  EXPECT_FAIL(nullptr, QSP_ERR_INVALID_ARGUMENT, "sequence 1|shards", qsp_prefill_batch(b, 2, sizeof b[0]));
  CHECK(kv_len(shard[0]) == len0);
  CHECK(kv_len(two) == 0);
  CHECK(bit_equal(logits_of(shard[0], m.spec.vocab), before));
  qsp_context_destroy(two);
  for (auto* c : shard) qsp_context_destroy(c);
  for (auto* c : plain) qsp_context_destroy(c);
}

TEST_CASE("shard: shapes that do not divide are refused at create, naming what", "[shard][errors]") {
  const TestModel m = make(qwen3_like(QSP_DTYPE_Q4_0, 9));  // 16 heads / 8 KV heads x 32, ffn 512
  const CreateCase cases[] = {
      {"8 KV heads over 3", [](qsp_context_params& p) { p.n_devices = 3; }, QSP_ERR_SHAPE, "n_kv_heads|3"},
      {"8 KV heads over 16",
       [](qsp_context_params& p) {
         p.n_devices = 16;
         p.n_heads = 32;
       },
       QSP_ERR_SHAPE, "n_kv_heads|16"},
      {"ffn 516 over 8", [](qsp_context_params& p) { p.n_devices = 8, p.intermediate_size = 516; }, QSP_ERR_SHAPE,
       "intermediate_size|516"},
      {"ffn 768 over 8: 96 per shard, whole 32-blocks (fine); 640 over 8: 80, not",
       [](qsp_context_params& p) { p.n_devices = 8, p.intermediate_size = 640; }, QSP_ERR_SHAPE,
       "intermediate_size|w_down|32"},
      {"wo's columns: 16 heads x 16 over 8 shards = 32 (fine); x 8 over 8 = 16, not",
       [](qsp_context_params& p) { p.n_devices = 8, p.head_dim = 8; }, QSP_ERR_SHAPE, "wo|32"},
      {"vocabulary smaller than the shards", [](qsp_context_params& p) { p.n_devices = 8, p.vocab_size = 5; },
       QSP_ERR_SHAPE, "vocab_size"},
      {"6 shards divide (12 KV heads) but not 8 stripes: the CPU refuses",
       [](qsp_context_params& p) {
         p.n_devices = 6;
         p.n_kv_heads = 12;
         p.n_heads = 12;
         p.head_dim = 16;
         p.intermediate_size = 192 * 6;
       },
       QSP_ERR_UNSUPPORTED, "CPU|8"},
      {"too many devices", [](qsp_context_params& p) { p.n_devices = 33; }, QSP_ERR_INVALID_ARGUMENT, "n_devices"},
      {"a mask of 3 devices for 2 shards",
       [](qsp_context_params& p) {
         p.n_devices = 2;
         p.device_mask = 0x7;
       },
       QSP_ERR_INVALID_ARGUMENT, "device_mask|3|n_devices"},
      {"a mask of 2 devices for 4 shards",
       [](qsp_context_params& p) {
         p.n_devices = 4;
         p.device_mask = 0x101;
       },
       QSP_ERR_INVALID_ARGUMENT, "device_mask|2|n_devices"},
      {"a mask of 2 devices for the unsplit model",
       [](qsp_context_params& p) { p.device_mask = 0x3; }, QSP_ERR_INVALID_ARGUMENT, "device_mask"},
      {"devices from device_index on pass INT32_MAX",
       [](qsp_context_params& p) {
         p.n_devices = 2;
         p.device_index = 0x7FFFFFFF;
       },
       QSP_ERR_INVALID_ARGUMENT, "device_index"},
      {"the reserved field", [](qsp_context_params& p) { p.reserved1 = 1; }, QSP_ERR_INVALID_ARGUMENT, "reserved1"},
  };
  expect_create_cases(m.params, cases);
  // Every shard on one GPU runs (tests/test_cuda_shard.cpp); without a GPU
  // the CUDA backend is simply absent. A shard per device needs NCCL first
  // (tests/test_nccl_lib.cpp), then the devices.
  if (!qsp_backend_available(QSP_BACKEND_CUDA)) {
    for (uint32_t mask : {0x1u, 0x0u}) {
      qsp_context_params p = m.params;
      p.backend = QSP_BACKEND_CUDA;
      p.n_devices = 2;
      p.device_mask = mask;
      qsp_context* ctx = nullptr;
      const qsp_status st = qsp_context_create(&p, &ctx);
      INFO("mask " << mask << ": " << qsp_last_error());
      if (mask == 0 && st == QSP_ERR_UNSUPPORTED) {
        CHECK_THAT(std::string(qsp_last_error()), Catch::Contains("needs NCCL"));
      } else {
        CHECK(st == QSP_ERR_NO_DEVICE);
      }
      CHECK(ctx == nullptr);
    }
  }
  // The fine ones of the cases above are fine.
  for (auto edit : {+[](qsp_context_params& p) { p.n_devices = 8, p.intermediate_size = 768; },
                    +[](qsp_context_params& p) { p.n_devices = 8, p.head_dim = 16; },
                    +[](qsp_context_params& p) { p.n_devices = 2, p.device_mask = 0x28; },  // unused on the CPU
                    +[](qsp_context_params& p) { p.n_devices = 8, p.device_mask = 0x80000000u; },
                    +[](qsp_context_params& p) { p.n_devices = 1, p.device_mask = 0x2; },
                    +[](qsp_context_params& p) { p.n_devices = 0, p.device_mask = 0x2; }}) {
    qsp_context_params p = m.params;
    edit(p);
    qsp_context* ctx = nullptr;
    INFO(qsp_last_error());
    REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
    qsp_context_destroy(ctx);
  }
}

TEST_CASE("shard: a K-quant wo / w_down without whole super-blocks per shard is refused at upload",
          "[shard][errors]") {
  // ffn 768 over 4 shards: 192 columns of w_down each (whole 32-blocks, not
  // whole 256-super-blocks); q_dim 16 x 32 = 512 over 4: 128 columns of wo.
  ModelSpec s = qwen3_like(QSP_DTYPE_Q4_0, 10);
  s.hidden = 256;
  s.ffn = 768;
  TestModel q4 = make(s);  // Q4_0 everywhere: fine
  TestModel kq = q4;
  retype(kq, [](uint32_t, LayerSlot t) { return t == kWDown || t == kWo ? QSP_DTYPE_Q4_K : QSP_DTYPE_Q4_0; },
         QSP_DTYPE_Q8_0, QSP_DTYPE_Q4_0);
  for (LayerSlot t : {kWo, kWDown})  // new handles: other bytes under the old ones would conflict
    for (auto& L : kq.layers) L[t].handle += 0x100000;
  qsp_context_params p = q4.params;
  p.n_devices = 4;
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  REQUIRE(q4.upload(ctx) == QSP_OK);
  const std::vector<int32_t> t = random_tokens(9, s.vocab, 3);
  prefill_ok(ctx, t.data(), 9);
  const std::vector<float> before = logits_of(ctx, s.vocab);

  qsp_layer_weights w = kq.layer_weights(1);
  w.wo = q4.layer_weights(1).wo;  // only w_down is the problem
  EXPECT_FAIL(ctx, QSP_ERR_SHAPE, "layer 1 w_down|q4_K|256|768|4|192", qsp_upload_layer(ctx, 1, &w));
  w = kq.layer_weights(0);
  EXPECT_FAIL(ctx, QSP_ERR_SHAPE, "layer 0 wo|q4_K|256|512|128", qsp_upload_layer(ctx, 0, &w));
  // The layers kept their weights.
  REQUIRE(qsp_kv_clear(ctx) == QSP_OK);
  prefill_ok(ctx, t.data(), 9);
  CHECK(bit_equal(logits_of(ctx, s.vocab), before));
  qsp_context_destroy(ctx);

  // Two shards: 384 and 256 columns, whole super-blocks for w_down (384 is
  // not: 1.5 super-blocks), so wo uploads and w_down is still refused.
  p.n_devices = 2;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  w = kq.layer_weights(0);
  EXPECT_FAIL(ctx, QSP_ERR_SHAPE, "layer 0 w_down|384", qsp_upload_layer(ctx, 0, &w));
  w.w_down = q4.layer_weights(0).w_down;
  CHECK(qsp_upload_layer(ctx, 0, &w) == QSP_OK);
  qsp_context_destroy(ctx);
}

TEST_CASE("shard: a 1.2 caller (reserved0 / reserved2 zero) gets the unsplit model", "[shard][api]") {
  const Fixture fx(111);
  // 1.2's qsp_context_params: the same layout with reserved0 and reserved2
  // where n_devices and device_mask are now, which it had to leave 0.
  static_assert(sizeof(qsp_context_params) == 96, "the size of 1.0 to 1.2");
  static_assert(offsetof(qsp_context_params, n_devices) == 64 && offsetof(qsp_context_params, device_mask) == 68,
                "reserved0 / reserved2 of 1.0 to 1.2");
  qsp_context* ctx = fx.create();
  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  CHECK(std::string(info.device_name).find("shards") == std::string::npos);
  qsp_context_destroy(ctx);
}

TEST_CASE("shard: a context from a GGUF file splits too, with the same logits", "[shard][gguf]") {
  const std::string path = gguf_test::tmp().file("shard.gguf");
  qsp::gguf::synth_file(path, gguf_test::preset("tiny"), QSP_DTYPE_Q4_0, 5, 1);
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.backend = QSP_BACKEND_CPU;
  p.n_threads = 2;
  qsp_context* a = nullptr;
  REQUIRE(qsp_context_create_from_gguf(path.c_str(), &p, &a) == QSP_OK);
  p.n_devices = 2;
  qsp_context* b = nullptr;
  INFO(qsp_gguf_last_error());
  REQUIRE(qsp_context_create_from_gguf(path.c_str(), &p, &b) == QSP_OK);
  const std::vector<int32_t> t = random_tokens(20, 2048, 4);
  prefill_ok(a, t.data(), 20);
  prefill_ok(b, t.data(), 20);
  CHECK(bit_equal(logits_of(a, 2048), logits_of(b, 2048)));
  qsp_context_destroy(a);
  qsp_context_destroy(b);
}

TEST_CASE("shard: AUTO with several devices and no GPU runs the shards on the CPU", "[shard]") {
  if (qsp_backend_available(QSP_BACKEND_CUDA)) {
    WARN("SKIPPED: a CUDA device is present (AUTO would pick it; tests/test_cuda_shard.cpp covers that)");
    return;
  }
  const Fixture fx(112);
  qsp_context_params p = fx.m.params;
  p.backend = QSP_BACKEND_AUTO;
  p.n_devices = 2;
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  REQUIRE(fx.m.upload(ctx) == QSP_OK);
  fx.works(ctx);
  qsp_context_info info;
  qsp_context_info_init(&info);
  REQUIRE(qsp_context_get_info(ctx, &info) == QSP_OK);
  CHECK(info.backend == QSP_BACKEND_CPU);
  CHECK(std::string(info.device_name).find("2 shards") != std::string::npos);
  qsp_context_destroy(ctx);
}

// What the CUDA backend uploads for each shard (Partition::cut): shard s's
// rows of a row-cut slot and its columns of a column-cut one, as a matrix of
// its own in the same dtype, for every format qsp knows. Dequantized, the
// piece must be exactly the shard's block of the whole tensor; a row cut is
// the caller's bytes in place (no copy), a slot that is not cut the whole.
TEST_CASE("shard: each shard's cut of a tensor is exactly its rows and columns, every format", "[shard]") {
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.n_layers = 1;
  p.hidden_size = 512;
  p.intermediate_size = 2048;  // 256 columns of w_down per shard at N = 8: whole K-quant super-blocks
  p.n_heads = 16;
  p.n_kv_heads = 8;
  p.head_dim = 128;
  p.vocab_size = 1003;  // not a multiple of the shards: unequal LM-head pieces
  p.max_seq_len = 16;
  const qsp::ModelConfig cfg = qsp::ModelConfig::from_params(p);
  qsp_test::Rng rng(4242);
  for (const qsp::fmt::Format* const* f = qsp::fmt::all(); *f; ++f) {
    const int32_t dt = (*f)->dtype;
    for (const qsp::SlotDesc* slot : {&qsp::kLayerSlots[qsp::kWq], &qsp::kLayerSlots[qsp::kWDown],
                                      &qsp::kLayerSlots[qsp::kAttnNorm], &qsp::kModelSlots[qsp::kLmHead]}) {
      const uint64_t rows = qsp::dim_value(cfg, slot->rows), cols = qsp::dim_value(cfg, slot->cols);
      if (qsp::fmt::tensor_bytes(dt, rows, cols) == 0) continue;  // cols not whole blocks of this format
      std::vector<float> values(rows * cols);
      for (float& v : values) v = rng.normal();
      std::vector<uint8_t> bytes(qsp::fmt::tensor_bytes(dt, rows, cols));
      const uint64_t row_bytes = qsp::fmt::tensor_bytes(dt, 1, cols);
      for (uint64_t r = 0; r < rows; ++r) (*f)->quantize(values.data() + r * cols, bytes.data() + r * row_bytes, cols);
      std::vector<float> whole(rows * cols);
      for (uint64_t r = 0; r < rows; ++r) qsp::fmt::dequantize_row(dt, bytes.data() + r * row_bytes, whole.data() + r * cols, cols);
      for (uint32_t n : {1u, 2u, 4u, 8u}) {
        INFO((*f)->name << " " << slot->name << " over " << n);
        const qsp::Partition part(cfg, n);
        try {
          part.check_tensor(*slot, dt, slot->name);
        } catch (const qsp::Error&) {
          continue;  // a K-quant's columns that do not give whole super-blocks: refused at upload
        }
        uint64_t covered_rows = 0;
        std::vector<uint8_t> scratch;
        for (uint32_t s = 0; s < n; ++s) {
          const qsp::Range rr = part.rows(*slot, s), cr = part.cols(*slot, s);
          const qsp::Partition::Piece piece = part.cut(*slot, s, dt, bytes.data(), scratch);
          REQUIRE(piece.rows == rr.size());
          REQUIRE(piece.cols == cr.size());
          REQUIRE(piece.bytes == qsp::fmt::tensor_bytes(dt, piece.rows, piece.cols));
          if (cr.size() == cols) CHECK(piece.data == bytes.data() + rr.begin * row_bytes);  // in place
          const uint64_t piece_row = qsp::fmt::tensor_bytes(dt, 1, piece.cols);
          std::vector<float> got(piece.cols);
          bool same = true;
          for (uint64_t r = 0; r < piece.rows && same; ++r) {
            qsp::fmt::dequantize_row(dt, static_cast<const uint8_t*>(piece.data) + r * piece_row, got.data(), piece.cols);
            same = std::memcmp(got.data(), whole.data() + (rr.begin + r) * cols + cr.begin, piece.cols * sizeof(float)) == 0;
          }
          CHECK(same);
          if (slot->split != qsp::Split::kCols) covered_rows += piece.rows;
        }
        if (slot->split != qsp::Split::kCols) CHECK(covered_rows == (slot->split == qsp::Split::kRows ? rows : rows * n));
      }
    }
  }
}
