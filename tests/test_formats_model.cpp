// Whole models in the 1.1 block formats through the public C API on the CPU
// backend: a Q4_K_M-like mix (most matrices Q4_K, ffn_down and the LM head
// Q6_K, some Q5_0) and a mix that puts every new format in some slot
// (embedding and LM head included), each against the same model whose weights
// are the exactly dequantized values uploaded as F32. The CPU reference
// dequantizes a row and then computes as for F32, so the two must agree to
// float rounding (in practice bit for bit).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "qsp/qsp.h"
#include "support/model.h"

using namespace qsp_test;

namespace {

struct Mix {
  const char* name;
  bool qwen3;
  std::function<int32_t(uint32_t layer, LayerSlot)> type;
  int32_t embd, head;
};

// hidden 256, 4 heads of 64 (2 KV heads), ffn 512: every matrix has a
// multiple of 256 columns. Drawn by make_model, then re-typed by the mix.
TestModel mix_model(const Mix& mix, uint64_t handle_base, uint64_t seed) {
  ModelSpec s;
  s.n_layers = 2;
  s.hidden = 256;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.ffn = 512;
  s.vocab = 320;
  s.max_seq = 64;
  s.qwen3 = mix.qwen3;
  s.tied = false;
  s.seed = seed;
  s.handle_base = handle_base;
  s.wtype = QSP_DTYPE_F32;
  s.embd_type = QSP_DTYPE_F32;
  TestModel m = make_model(s);
  retype(m, mix.type, mix.embd, mix.head);
  return m;
}

std::vector<float> last_logits(qsp_context* ctx) {
  const float* logits = nullptr;
  uint32_t n = 0;
  REQUIRE(qsp_get_logits(ctx, &logits, &n) == QSP_OK);
  return std::vector<float>(logits, logits + n);
}

void check_against_f32_twin(const Mix& mix, uint64_t handle_base, uint64_t seed) {
  INFO(mix.name);
  const TestModel q = mix_model(mix, handle_base, seed);
  const TestModel f = q.f32_twin(0x100000);
  qsp_context* cq = q.create(QSP_BACKEND_CPU);
  qsp_context* cf = f.create(QSP_BACKEND_CPU);
  INFO(qsp_last_error());
  REQUIRE(cq != nullptr);
  REQUIRE(cf != nullptr);
  // An odd-length prompt, then a continuation (a second chunk against the KV cache).
  std::mt19937_64 rng(seed + 1);
  for (uint32_t n : {7u, 4u}) {
    const std::vector<int32_t> tokens = random_tokens(n, q.spec.vocab, rng());
    REQUIRE(qsp_prefill(cq, tokens.data(), n) == QSP_OK);
    REQUIRE(qsp_prefill(cf, tokens.data(), n) == QSP_OK);
    const std::vector<float> a = last_logits(cq), b = last_logits(cf);
    REQUIRE(a.size() == q.spec.vocab);
    REQUIRE(b.size() == a.size());
    double spread = 0;
    for (size_t i = 0; i < a.size(); ++i) spread = std::max(spread, std::fabs(double(b[i]) - double(b[0])));
    const double rel = rel_l2(a.data(), b.data(), a.size());
    INFO("prefill of " << n << ": relative L2 " << rel);
    REQUIRE(spread > 1e-3);  // the logits are not degenerate
    REQUIRE(rel <= 1e-6);
    int32_t ga = -1, gb = -2;
    REQUIRE(qsp_greedy_token(cq, &ga) == QSP_OK);
    REQUIRE(qsp_greedy_token(cf, &gb) == QSP_OK);
    REQUIRE(ga == gb);
  }
  qsp_context_destroy(cq);
  qsp_context_destroy(cf);
}

}  // namespace

TEST_CASE("formats 1.1: a Q4_K_M-like model equals its dequantized F32 twin on the CPU", "[formats][model]") {
  // As llama.cpp's Q4_K_M: Q4_K for most matrices and the embedding, Q6_K for ffn_down and the
  // LM head; attn_v Q6_K in the first layer, Q5_0 in the other (the legacy fallback).
  const Mix mix{"q4_K_m-like", true,
                [](uint32_t l, LayerSlot s) {
                  if (s == kWDown) return QSP_DTYPE_Q6_K;
                  if (s == kWv) return l == 0 ? QSP_DTYPE_Q6_K : QSP_DTYPE_Q5_0;
                  return QSP_DTYPE_Q4_K;
                },
                QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K};
  check_against_f32_twin(mix, 0x4B51000000100000ull, 11);
}

TEST_CASE("formats 1.1: every new format in some slot, Llama style, equals its F32 twin", "[formats][model]") {
  static const int32_t kTypes[] = {QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1, QSP_DTYPE_Q2_K,
                                   QSP_DTYPE_Q3_K, QSP_DTYPE_Q4_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K};
  const Mix mix{"every format", false, [](uint32_t l, LayerSlot s) { return kTypes[(l * 11 + s) % 8]; },
                QSP_DTYPE_Q3_K, QSP_DTYPE_Q2_K};
  check_against_f32_twin(mix, 0x4B51000000200000ull, 12);
  const Mix mix2{"every format, shifted", true, [](uint32_t l, LayerSlot s) { return kTypes[(l * 11 + s + 3) % 8]; },
                 QSP_DTYPE_Q5_1, QSP_DTYPE_Q4_1};
  check_against_f32_twin(mix2, 0x4B51000000300000ull, 13);
}

TEST_CASE("formats 1.1: K-quant tensors with a wrong size or columns not a multiple of 256 give DTYPE",
          "[formats][model]") {
  const Mix mix{"q4_K", true, [](uint32_t, LayerSlot) { return QSP_DTYPE_Q4_K; }, QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K};
  const TestModel m = mix_model(mix, 0x4B51000000400000ull, 14);
  qsp_context* ctx = nullptr;
  REQUIRE(qsp_context_create(&m.params, &ctx) == QSP_OK);
  qsp_tensor e = m.embd.view();
  e.n_bytes -= 144;  // one super-block short
  REQUIRE(qsp_upload_embedding(ctx, &e) == QSP_ERR_DTYPE);
  REQUIRE(std::string(qsp_last_error()).find("token_embd") != std::string::npos);
  qsp_context_destroy(ctx);

  // hidden 128: a Q4_K / Q6_K row of 128 is not a whole super-block.
  qsp_context_params p = m.params;
  p.hidden_size = 128;
  REQUIRE(qsp_context_create(&p, &ctx) == QSP_OK);
  std::mt19937_64 rng(15);
  for (int32_t t : {QSP_DTYPE_Q2_K, QSP_DTYPE_Q3_K, QSP_DTYPE_Q4_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K}) {
    INFO(qsp_dtype_name(t));
    HostTensor w;
    w.handle = 0x4B51000000500000ull + uint64_t(t);
    w.dtype = t;
    w.rows = p.vocab_size;
    w.cols = 128;
    w.bytes.resize(size_t(p.vocab_size) * 128);  // any size: the column count is refused first
    qsp_tensor v = w.view();
    REQUIRE(qsp_upload_embedding(ctx, &v) == QSP_ERR_DTYPE);
    const std::string msg = qsp_last_error();
    REQUIRE(msg.find("256") != std::string::npos);
  }
  qsp_context_destroy(ctx);
}
