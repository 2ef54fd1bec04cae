// Random tiny (or real-shaped) models for the tests: host tensors of
// realistic scale (never zeros), quantized with the reference quantizers,
// plus everything needed to upload them through the public C API.
// Plain C++ (no Catch2, no CUDA).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/quant.h"
#include "formats/format.h"
#include "qsp/qsp.h"
#include "ref.h"

namespace qsp_test {

// rows x cols fp32 values -> the bytes of `dtype` (GGUF layout): each
// format's reference quantizer from the registry (src/formats; F16 / BF16
// round to nearest even, F32 as is).
// fn(r0, r1) over row ranges that cover [0, rows), on up to one thread per
// core when there is enough work (rows x cols >= 2^20): a row's result never
// depends on the split, so the bytes are the same on any machine. The
// K-quant reference quantizers are slow (an 8B-shaped layer took ~40 s on
// one core), and the GPU suite's longest cases are mostly model building.
template <class Fn>
void for_rows(uint64_t rows, uint64_t cols, Fn&& fn) {
  const uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t n = rows * cols < (uint64_t(1) << 20) ? 1 : std::min<uint64_t>({cores, rows, 32});
  if (n <= 1) {
    fn(uint64_t(0), rows);
    return;
  }
  std::vector<std::thread> pool;
  for (uint64_t i = 1; i < n; ++i) pool.emplace_back([&, i] { fn(rows * i / n, rows * (i + 1) / n); });
  fn(uint64_t(0), rows / n);
  for (std::thread& t : pool) t.join();
}

inline std::vector<uint8_t> quantize_rows(int32_t dtype, const float* src, uint64_t rows, uint64_t cols) {
  const qsp::fmt::Format* f = qsp::fmt::find(dtype);
  std::vector<uint8_t> bytes(qsp_dtype_size(dtype, rows, cols));
  if (!f || bytes.empty()) return bytes;
  const uint64_t row_bytes = bytes.size() / rows;
  for_rows(rows, cols, [&](uint64_t r0, uint64_t r1) {
    for (uint64_t r = r0; r < r1; ++r) f->quantize(src + r * cols, bytes.data() + r * row_bytes, cols);
  });
  return bytes;
}

struct HostTensor {
  uint64_t handle = 0;
  int32_t dtype = QSP_DTYPE_F32;
  uint64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;   // as uploaded
  std::vector<float> values;    // the exact dequantized values (rows x cols)

  // The same values as an F32 tensor under handle h.
  HostTensor f32_twin(uint64_t h) const {
    HostTensor t = *this;
    t.handle = h;
    t.dtype = QSP_DTYPE_F32;
    t.bytes.resize(values.size() * sizeof(float));
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
  }

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
};

struct ModelSpec {
  uint32_t n_layers = 2, hidden = 128, ffn = 256, n_heads = 4, n_kv_heads = 2, head_dim = 32;
  uint32_t vocab = 1000, max_seq = 256;
  bool qwen3 = true;              // NEOX + QK-norm; false: Llama (interleaved RoPE, no QK-norm)
  int32_t wtype = QSP_DTYPE_Q4_0; // projections; -1 = alternate Q4_0 / Q8_0 by layer ("mixed")
  int32_t embd_type = QSP_DTYPE_Q8_0;
  bool tied = false;              // LM head = embedding (same handle)
  uint64_t seed = 1;
  uint64_t handle_base = 0;       // 0: derived from seed
  float rope_theta = 1e6f;
};

// The layer shapes of Qwen3-0.6B, two layers, its real vocabulary with a
// tied Q8_0 embedding, and a cache for chunks of 4096 (the GPU tests).
inline ModelSpec qwen3_06b_layers(int32_t wtype, uint64_t seed) {
  ModelSpec s;
  s.n_layers = 2;
  s.hidden = 1024;
  s.ffn = 3072;
  s.n_heads = 16;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.vocab = 151936;
  s.max_seq = 4096 + 64;
  s.qwen3 = true;
  s.wtype = wtype;
  s.embd_type = QSP_DTYPE_Q8_0;
  s.tied = true;
  s.seed = seed;
  return s;
}

inline HostTensor make_tensor(std::mt19937_64& rng, uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols,
                              float mean, float stddev) {
  HostTensor t;
  t.handle = handle;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  std::normal_distribution<float> nd(mean, stddev);
  std::vector<float> src(rows * cols);
  for (auto& v : src) v = nd(rng);
  t.bytes = quantize_rows(dtype, src.data(), rows, cols);
  t.values.resize(rows * cols);
  const uint64_t row_bytes = t.bytes.size() / rows;
  for_rows(rows, cols, [&](uint64_t r0, uint64_t r1) {
    for (uint64_t r = r0; r < r1; ++r)
      qsp::dequantize_row(dtype, t.bytes.data() + r * row_bytes, t.values.data() + r * cols, cols);
  });
  return t;
}

// Slots of TestModel::layers[l], in qsp_layer_weights order.
enum LayerSlot { kAttnNorm, kWq, kWk, kWv, kQNorm, kKNorm, kWo, kFfnNorm, kWGate, kWUp, kWDown };

struct TestModel {
  ModelSpec spec;
  qsp_context_params params{};
  // Per layer, in the order of qsp_layer_weights: attn_norm wq wk wv q_norm k_norm wo ffn_norm w_gate w_up w_down
  std::vector<std::vector<HostTensor>> layers;
  HostTensor embd, out_norm, lm_head;

  qsp_layer_weights layer_weights(uint32_t l) const {
    qsp_layer_weights w;
    qsp_layer_weights_init(&w);
    const auto& L = layers[l];
    w.attn_norm = L[kAttnNorm].view();
    w.wq = L[kWq].view();
    w.wk = L[kWk].view();
    w.wv = L[kWv].view();
    if (spec.qwen3) {
      w.q_norm = L[kQNorm].view();
      w.k_norm = L[kKNorm].view();
    }
    w.wo = L[kWo].view();
    w.ffn_norm = L[kFfnNorm].view();
    w.w_gate = L[kWGate].view();
    w.w_up = L[kWUp].view();
    w.w_down = L[kWDown].view();
    return w;
  }
  qsp_output_weights output_weights() const {
    qsp_output_weights o;
    qsp_output_weights_init(&o);
    o.norm = out_norm.view();
    o.lm_head = spec.tied ? embd.view() : lm_head.view();
    return o;
  }
  const HostTensor& head() const { return spec.tied ? embd : lm_head; }

  // The same model with every tensor an F32 twin (handles + offset).
  TestModel f32_twin(uint64_t offset) const {
    TestModel m = *this;
    for (auto& L : m.layers)
      for (auto& t : L) t = t.f32_twin(t.handle + offset);
    m.embd = embd.f32_twin(embd.handle + offset);
    m.out_norm = out_norm.f32_twin(out_norm.handle + offset);
    if (!spec.tied) m.lm_head = lm_head.f32_twin(lm_head.handle + offset);
    return m;
  }

  // Uploads everything; returns the first failing status.
  qsp_status upload(qsp_context* ctx) const {
    for (uint32_t l = 0; l < spec.n_layers; ++l) {
      qsp_layer_weights w = layer_weights(l);
      qsp_status st = qsp_upload_layer(ctx, l, &w);
      if (st != QSP_OK) return st;
    }
    qsp_tensor e = embd.view();
    qsp_status st = qsp_upload_embedding(ctx, &e);
    if (st != QSP_OK) return st;
    qsp_output_weights o = output_weights();
    return qsp_upload_output(ctx, &o);
  }

  // Creates a context for this model on `backend` and uploads it (NULL on failure).
  qsp_context* create(int32_t backend, uint32_t max_seq = 0) const {
    qsp_context_params p = params;
    p.backend = backend;
    if (max_seq) p.max_seq_len = max_seq;
    qsp_context* ctx = nullptr;
    if (qsp_context_create(&p, &ctx) != QSP_OK) return nullptr;
    if (upload(ctx) != QSP_OK) {
      qsp_context_destroy(ctx);
      return nullptr;
    }
    return ctx;
  }
};

inline TestModel make_model(const ModelSpec& s) {
  TestModel m;
  m.spec = s;
  std::mt19937_64 rng(s.seed * 0x9E3779B97F4A7C15ull + 12345);
  uint64_t h = s.handle_base ? s.handle_base : (s.seed << 20) ^ 0x5150000000000000ull;
  const uint64_t H = s.hidden, Q = uint64_t(s.n_heads) * s.head_dim, KV = uint64_t(s.n_kv_heads) * s.head_dim;
  // Realistic scales: projections ~ N(0, 1/sqrt(fan_in)) scaled down as trained
  // models are; norm weights around 1 with spread; embeddings ~ N(0, 0.05).
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const int32_t wt = s.wtype >= 0 ? s.wtype : (l % 2 == 0 ? QSP_DTYPE_Q4_0 : QSP_DTYPE_Q8_0);
    const float sh = 0.6f / std::sqrt(float(H)), sq = 0.6f / std::sqrt(float(Q)), sf = 0.6f / std::sqrt(float(s.ffn));
    std::vector<HostTensor> L;
    L.push_back(make_tensor(rng, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f));
    L.push_back(make_tensor(rng, ++h, wt, Q, H, 0.0f, sh));
    L.push_back(make_tensor(rng, ++h, wt, KV, H, 0.0f, sh));
    L.push_back(make_tensor(rng, ++h, wt, KV, H, 0.0f, sh));
    L.push_back(make_tensor(rng, ++h, QSP_DTYPE_F32, 1, s.head_dim, 1.0f, 0.2f));
    L.push_back(make_tensor(rng, ++h, QSP_DTYPE_F32, 1, s.head_dim, 1.0f, 0.2f));
    L.push_back(make_tensor(rng, ++h, wt, H, Q, 0.0f, sq));
    L.push_back(make_tensor(rng, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f));
    L.push_back(make_tensor(rng, ++h, wt, s.ffn, H, 0.0f, sh));
    L.push_back(make_tensor(rng, ++h, wt, s.ffn, H, 0.0f, sh));
    L.push_back(make_tensor(rng, ++h, wt, H, s.ffn, 0.0f, sf));
    m.layers.push_back(std::move(L));
  }
  m.embd = make_tensor(rng, ++h, s.embd_type, s.vocab, H, 0.0f, 0.05f);
  m.out_norm = make_tensor(rng, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f);
  if (!s.tied) m.lm_head = make_tensor(rng, ++h, s.wtype >= 0 ? s.wtype : QSP_DTYPE_Q8_0, s.vocab, H, 0.0f, 2.0f / std::sqrt(float(H)));

  qsp_context_params_init(&m.params);
  m.params.n_layers = s.n_layers;
  m.params.hidden_size = s.hidden;
  m.params.intermediate_size = s.ffn;
  m.params.n_heads = s.n_heads;
  m.params.n_kv_heads = s.n_kv_heads;
  m.params.head_dim = s.head_dim;
  m.params.vocab_size = s.vocab;
  m.params.max_seq_len = s.max_seq;
  m.params.rms_eps = 1e-6f;
  m.params.rope_theta = s.rope_theta;
  m.params.rope_style = s.qwen3 ? QSP_ROPE_NEOX : QSP_ROPE_INTERLEAVED;
  m.params.qk_norm = s.qwen3 ? 1 : 0;
  m.params.backend = QSP_BACKEND_CPU;
  return m;
}

// Re-draws the projections of the model, each in the dtype type_of(layer,
// slot) gives (slot: kWq, kWk, kWv, kWo, kWGate, kWUp, kWDown), like
// make_model draws them, under the same handles; the embedding in `embd`
// and an untied LM head in `head` too. For the mixes of real files
// (Q4_K_M: Q4_K with ffn_down and the LM head Q6_K, ...).
template <class TypeOf>
void retype(TestModel& m, TypeOf&& type_of, int32_t embd, int32_t head) {
  std::mt19937_64 rng(m.spec.seed * 7919 + 5);
  for (uint32_t l = 0; l < m.spec.n_layers; ++l)
    for (LayerSlot s : {kWq, kWk, kWv, kWo, kWGate, kWUp, kWDown}) {
      HostTensor& t = m.layers[l][s];
      t = make_tensor(rng, t.handle, type_of(l, s), t.rows, t.cols, 0.0f, 0.6f / std::sqrt(float(t.cols)));
    }
  m.embd = make_tensor(rng, m.embd.handle, embd, m.embd.rows, m.embd.cols, 0.0f, 0.05f);
  if (!m.spec.tied)
    m.lm_head = make_tensor(rng, m.lm_head.handle, head, m.lm_head.rows, m.lm_head.cols, 0.0f,
                            2.0f / std::sqrt(float(m.lm_head.cols)));
}

inline std::vector<int32_t> random_tokens(uint32_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab) - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

}  // namespace qsp_test
