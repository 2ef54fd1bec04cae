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
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "formats/format.h"
#include "qsp/qsp.h"

namespace {

struct Weight {
  uint64_t handle = 0;
  int32_t dtype = QSP_DTYPE_F32;
  uint64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // exactly what the bytes decode to

  qsp_tensor view() const {
    qsp_tensor t{};
    t.handle = handle;
    t.dtype = dtype;
    t.n_rows = rows;
    t.n_cols = cols;
    t.data = bytes.data();
    t.n_bytes = bytes.size();
    return t;
  }
  // The same values as an F32 tensor under another handle.
  Weight f32_twin(uint64_t h) const {
    Weight w = *this;
    w.handle = h;
    w.dtype = QSP_DTYPE_F32;
    w.bytes.resize(values.size() * sizeof(float));
    std::memcpy(w.bytes.data(), values.data(), w.bytes.size());
    return w;
  }
};

Weight make_weight(std::mt19937_64& rng, uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols, float mean,
                   float sd) {
  const qsp::fmt::Format* f = qsp::fmt::find(dtype);
  REQUIRE(f != nullptr);
  Weight w;
  w.handle = handle;
  w.dtype = dtype;
  w.rows = rows;
  w.cols = cols;
  std::normal_distribution<float> nd(mean, sd);
  std::vector<float> src(cols);
  const uint64_t row_bytes = f->row_bytes(cols);
  REQUIRE(row_bytes != 0);
  REQUIRE(qsp_dtype_size(dtype, rows, cols) == rows * row_bytes);
  w.bytes.resize(rows * row_bytes);
  w.values.resize(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    for (auto& v : src) v = nd(rng);
    if (r % 5 == 2) src[r % cols] *= 8.0f;  // the odd outlier, as trained weights have
    f->quantize(src.data(), w.bytes.data() + r * row_bytes, cols);
    f->dequantize(w.bytes.data() + r * row_bytes, w.values.data() + r * cols, cols);
  }
  return w;
}

// Projection slots in the order of qsp_layer_weights' matrices.
enum Slot { kWq, kWk, kWv, kWo, kGate, kUp, kDown, kSlots };

struct Mix {
  const char* name;
  bool qwen3;
  std::function<int32_t(uint32_t layer, Slot)> type;
  int32_t embd, head;
};

struct Model {
  qsp_context_params params{};
  // Per layer: attn_norm, q_norm, k_norm, ffn_norm, then the kSlots matrices.
  std::vector<std::vector<Weight>> layers;
  Weight embd, out_norm, head;

  Model twin(uint64_t offset) const {
    Model m = *this;
    for (auto& L : m.layers)
      for (auto& w : L) w = w.f32_twin(w.handle + offset);
    m.embd = embd.f32_twin(embd.handle + offset);
    m.out_norm = out_norm.f32_twin(out_norm.handle + offset);
    m.head = head.f32_twin(head.handle + offset);
    return m;
  }

  qsp_context* create() const {
    qsp_context* ctx = nullptr;
    REQUIRE(qsp_context_create(&params, &ctx) == QSP_OK);
    for (uint32_t l = 0; l < layers.size(); ++l) {
      const auto& L = layers[l];
      qsp_layer_weights w;
      qsp_layer_weights_init(&w);
      w.attn_norm = L[0].view();
      if (params.qk_norm) {
        w.q_norm = L[1].view();
        w.k_norm = L[2].view();
      }
      w.ffn_norm = L[3].view();
      w.wq = L[4 + kWq].view();
      w.wk = L[4 + kWk].view();
      w.wv = L[4 + kWv].view();
      w.wo = L[4 + kWo].view();
      w.w_gate = L[4 + kGate].view();
      w.w_up = L[4 + kUp].view();
      w.w_down = L[4 + kDown].view();
      INFO("layer " << l << ": " << qsp_last_error());
      REQUIRE(qsp_upload_layer(ctx, l, &w) == QSP_OK);
    }
    qsp_tensor e = embd.view();
    INFO(qsp_last_error());
    REQUIRE(qsp_upload_embedding(ctx, &e) == QSP_OK);
    qsp_output_weights o;
    qsp_output_weights_init(&o);
    o.norm = out_norm.view();
    o.lm_head = head.view();
    REQUIRE(qsp_upload_output(ctx, &o) == QSP_OK);
    return ctx;
  }
};

// hidden 256, 4 heads of 64 (2 KV heads), ffn 512: every matrix has a multiple of 256 columns.
Model make_model(const Mix& mix, uint64_t handle_base, uint64_t seed) {
  const uint32_t n_layers = 2, H = 256, n_heads = 4, n_kv = 2, D = 64, F = 512, V = 320;
  const uint64_t Q = uint64_t(n_heads) * D, KV = uint64_t(n_kv) * D;
  std::mt19937_64 rng(seed);
  uint64_t h = handle_base;
  Model m;
  for (uint32_t l = 0; l < n_layers; ++l) {
    std::vector<Weight> L;
    L.push_back(make_weight(rng, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f));
    L.push_back(make_weight(rng, ++h, QSP_DTYPE_F32, 1, D, 1.0f, 0.2f));
    L.push_back(make_weight(rng, ++h, QSP_DTYPE_F32, 1, D, 1.0f, 0.2f));
    L.push_back(make_weight(rng, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f));
    const float sh = 0.6f / std::sqrt(float(H)), sq = 0.6f / std::sqrt(float(Q)), sf = 0.6f / std::sqrt(float(F));
    L.push_back(make_weight(rng, ++h, mix.type(l, kWq), Q, H, 0.0f, sh));
    L.push_back(make_weight(rng, ++h, mix.type(l, kWk), KV, H, 0.0f, sh));
    L.push_back(make_weight(rng, ++h, mix.type(l, kWv), KV, H, 0.0f, sh));
    L.push_back(make_weight(rng, ++h, mix.type(l, kWo), H, Q, 0.0f, sq));
    L.push_back(make_weight(rng, ++h, mix.type(l, kGate), F, H, 0.0f, sh));
    L.push_back(make_weight(rng, ++h, mix.type(l, kUp), F, H, 0.0f, sh));
    L.push_back(make_weight(rng, ++h, mix.type(l, kDown), H, F, 0.0f, sf));
    m.layers.push_back(std::move(L));
  }
  m.embd = make_weight(rng, ++h, mix.embd, V, H, 0.0f, 0.05f);
  m.out_norm = make_weight(rng, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f);
  m.head = make_weight(rng, ++h, mix.head, V, H, 0.0f, 2.0f / std::sqrt(float(H)));

  qsp_context_params_init(&m.params);
  m.params.n_layers = n_layers;
  m.params.hidden_size = H;
  m.params.intermediate_size = F;
  m.params.n_heads = n_heads;
  m.params.n_kv_heads = n_kv;
  m.params.head_dim = D;
  m.params.vocab_size = V;
  m.params.max_seq_len = 64;
  m.params.rms_eps = 1e-6f;
  m.params.rope_theta = 1e6f;
  m.params.rope_style = mix.qwen3 ? QSP_ROPE_NEOX : QSP_ROPE_INTERLEAVED;
  m.params.qk_norm = mix.qwen3 ? 1 : 0;
  m.params.backend = QSP_BACKEND_CPU;
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
  const Model q = make_model(mix, handle_base, seed);
  const Model f = q.twin(0x100000);
  qsp_context* cq = q.create();
  qsp_context* cf = f.create();
  // An odd-length prompt, then a continuation (a second chunk against the KV cache).
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(q.params.vocab_size) - 1);
  for (uint32_t n : {7u, 4u}) {
    std::vector<int32_t> tokens(n);
    for (auto& t : tokens) t = tok(rng);
    REQUIRE(qsp_prefill(cq, tokens.data(), n) == QSP_OK);
    REQUIRE(qsp_prefill(cf, tokens.data(), n) == QSP_OK);
    const std::vector<float> a = last_logits(cq), b = last_logits(cf);
    REQUIRE(a.size() == q.params.vocab_size);
    REQUIRE(b.size() == a.size());
    double num = 0, den = 0, spread = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += double(a[i] - b[i]) * double(a[i] - b[i]);
      den += double(b[i]) * double(b[i]);
      spread = std::max(spread, std::fabs(double(b[i]) - double(b[0])));
    }
    const double rel = den > 0 ? std::sqrt(num / den) : 0.0;
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
                [](uint32_t l, Slot s) {
                  if (s == kDown) return QSP_DTYPE_Q6_K;
                  if (s == kWv) return l == 0 ? QSP_DTYPE_Q6_K : QSP_DTYPE_Q5_0;
                  return QSP_DTYPE_Q4_K;
                },
                QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K};
  check_against_f32_twin(mix, 0x4B51000000100000ull, 11);
}

TEST_CASE("formats 1.1: every new format in some slot, Llama style, equals its F32 twin", "[formats][model]") {
  static const int32_t kTypes[] = {QSP_DTYPE_Q4_1, QSP_DTYPE_Q5_0, QSP_DTYPE_Q5_1, QSP_DTYPE_Q2_K,
                                   QSP_DTYPE_Q3_K, QSP_DTYPE_Q4_K, QSP_DTYPE_Q5_K, QSP_DTYPE_Q6_K};
  const Mix mix{"every format", false, [](uint32_t l, Slot s) { return kTypes[(l * kSlots + s) % 8]; },
                QSP_DTYPE_Q3_K, QSP_DTYPE_Q2_K};
  check_against_f32_twin(mix, 0x4B51000000200000ull, 12);
  const Mix mix2{"every format, shifted", true, [](uint32_t l, Slot s) { return kTypes[(l * kSlots + s + 3) % 8]; },
                 QSP_DTYPE_Q5_1, QSP_DTYPE_Q4_1};
  check_against_f32_twin(mix2, 0x4B51000000300000ull, 13);
}

TEST_CASE("formats 1.1: K-quant tensors with a wrong size or columns not a multiple of 256 give DTYPE",
          "[formats][model]") {
  const Mix mix{"q4_K", true, [](uint32_t, Slot) { return QSP_DTYPE_Q4_K; }, QSP_DTYPE_Q4_K, QSP_DTYPE_Q6_K};
  const Model m = make_model(mix, 0x4B51000000400000ull, 14);
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
    Weight w;
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
