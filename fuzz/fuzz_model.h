// What the API-level fuzz targets share (fuzz_api, fuzz_batch): the tiny
// two-layer CPU model they drive through the public API (Q4_0 and Q8_0
// weights, tied LM head), the check that turns a broken property into a
// finding, and a reader of the fuzz input.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/quant.h"
#include "qsp/qsp.h"

namespace fuzz {

constexpr uint32_t kLayers = 2, kH = 64, kF = 96, kHeads = 4, kKv = 2, kD = 16, kVocab = 97, kMaxSeq = 48;
constexpr uint64_t kHandleBase = 0xF00D000000000000ull;

struct Tensor {
  qsp_tensor t{};
  std::vector<uint8_t> bytes;
};

struct Model {
  qsp_context_params params{};
  std::vector<std::vector<Tensor>> layers;  // 11 slots, qsp_layer_weights order
  Tensor embd, norm;
  std::vector<int32_t> tokens;
  std::vector<float> ref_logits;
};

inline Tensor make(uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols, float mean, float sd, uint64_t& rng) {
  Tensor t;
  std::vector<float> v(rows * cols);
  for (float& x : v) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    x = mean + sd * (float((rng >> 11) & 0xffff) / 32768.0f - 1.0f);
  }
  t.bytes.resize(qsp_dtype_size(dtype, rows, cols));
  for (uint64_t r = 0; r < rows; ++r) {
    uint8_t* dst = t.bytes.data() + r * (t.bytes.size() / rows);
    if (dtype == QSP_DTYPE_Q4_0) qsp::quantize_row_q4_0(&v[r * cols], reinterpret_cast<qsp::BlockQ4_0*>(dst), cols);
    else if (dtype == QSP_DTYPE_Q8_0) qsp::quantize_row_q8_0(&v[r * cols], reinterpret_cast<qsp::BlockQ8_0*>(dst), cols);
    else std::memcpy(dst, &v[r * cols], cols * 4);
  }
  t.t.handle = handle;
  t.t.dtype = dtype;
  t.t.n_rows = rows;
  t.t.n_cols = cols;
  t.t.data = t.bytes.data();
  t.t.n_bytes = t.bytes.size();
  return t;
}

inline qsp_layer_weights layer_weights(const Model& m, uint32_t l) {
  qsp_layer_weights w;
  qsp_layer_weights_init(&w);
  qsp_tensor* slots[] = {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.q_norm, &w.k_norm,
                         &w.wo, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down};
  for (int i = 0; i < 11; ++i) *slots[i] = m.layers[l][i].t;
  return w;
}

inline bool upload_all(const Model& m, qsp_context* ctx) {
  for (uint32_t l = 0; l < kLayers; ++l) {
    qsp_layer_weights w = layer_weights(m, l);
    if (qsp_upload_layer(ctx, l, &w) != QSP_OK) return false;
  }
  qsp_output_weights o;
  qsp_output_weights_init(&o);
  o.norm = m.norm.t;
  o.lm_head = m.embd.t;  // tied
  return qsp_upload_embedding(ctx, &m.embd.t) == QSP_OK && qsp_upload_output(ctx, &o) == QSP_OK;
}

// The tiny model, its weights drawn from `seed` (xorshift).
inline Model build_model(uint64_t seed) {
  Model m;
  uint64_t rng = seed;
  uint64_t h = kHandleBase;
  const uint64_t Q = kHeads * kD, KV = kKv * kD;
  for (uint32_t l = 0; l < kLayers; ++l) {
    const int32_t wt = l ? QSP_DTYPE_Q8_0 : QSP_DTYPE_Q4_0;
    std::vector<Tensor> L;
    L.push_back(make(++h, QSP_DTYPE_F32, 1, kH, 1, 0.2f, rng));
    L.push_back(make(++h, wt, Q, kH, 0, 0.1f, rng));
    L.push_back(make(++h, wt, KV, kH, 0, 0.1f, rng));
    L.push_back(make(++h, wt, KV, kH, 0, 0.1f, rng));
    L.push_back(make(++h, QSP_DTYPE_F32, 1, kD, 1, 0.2f, rng));
    L.push_back(make(++h, QSP_DTYPE_F32, 1, kD, 1, 0.2f, rng));
    L.push_back(make(++h, wt, kH, Q, 0, 0.1f, rng));
    L.push_back(make(++h, QSP_DTYPE_F32, 1, kH, 1, 0.2f, rng));
    L.push_back(make(++h, wt, kF, kH, 0, 0.1f, rng));
    L.push_back(make(++h, wt, kF, kH, 0, 0.1f, rng));
    L.push_back(make(++h, wt, kH, kF, 0, 0.1f, rng));
    m.layers.push_back(std::move(L));
  }
  m.embd = make(++h, QSP_DTYPE_Q8_0, kVocab, kH, 0, 0.05f, rng);
  m.norm = make(++h, QSP_DTYPE_F32, 1, kH, 1, 0.2f, rng);
  qsp_context_params_init(&m.params);
  qsp_context_params& p = m.params;
  p.n_layers = kLayers; p.hidden_size = kH; p.intermediate_size = kF; p.n_heads = kHeads;
  p.n_kv_heads = kKv; p.head_dim = kD; p.vocab_size = kVocab; p.max_seq_len = kMaxSeq;
  p.backend = QSP_BACKEND_CPU; p.n_threads = 1;
  return m;
}

// A failed check is a finding: crash so libFuzzer saves the input.
#define FUZZ_CHECK(cond, ...)                   \
  do {                                          \
    if (!(cond)) {                              \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);        \
      std::fprintf(stderr, "\n");               \
      std::abort();                             \
    }                                           \
  } while (0)

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t u8() { return n ? (--n, *p++) : 0; }
  uint32_t u32() { return uint32_t(u8()) | uint32_t(u8()) << 8 | uint32_t(u8()) << 16 | uint32_t(u8()) << 24; }
};

}  // namespace fuzz
