// The model shape and execution settings of a context, validated once.
#pragma once

#include <cstdint>

#include "qsp/qsp.h"

namespace qsp {

struct ModelConfig {
  uint32_t n_layers = 0;
  uint32_t hidden = 0;
  uint32_t ffn = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t vocab = 0;
  uint32_t max_seq = 0;
  float rms_eps = 1e-6f;
  float rope_theta = 1e6f;
  int32_t rope_style = QSP_ROPE_NEOX;
  bool qk_norm = true;

  uint32_t q_dim() const { return n_heads * head_dim; }
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }

  // Throws qsp::Error(QSP_ERR_SHAPE / INVALID_ARGUMENT) naming the bad field.
  static ModelConfig from_params(const qsp_context_params& p);
  // The defaults qsp_context_params_init documents: this struct's defaults
  // (Qwen3's rms_eps, rope_theta, NEOX RoPE, QK-norm), backend AUTO, log WARN;
  // the model shape stays as the caller left it (zero after init).
  static void default_params(qsp_context_params* p);
};

}  // namespace qsp
