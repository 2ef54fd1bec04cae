#include "engine/config.h"

#include <cmath>

#include "common/error.h"

namespace qsp {

void ModelConfig::default_params(qsp_context_params* p) {
  const ModelConfig d;
  p->rms_eps = d.rms_eps;
  p->rope_theta = d.rope_theta;
  p->rope_style = d.rope_style;
  p->qk_norm = d.qk_norm ? 1 : 0;
  p->backend = QSP_BACKEND_AUTO;
  p->log_level = QSP_LOG_WARN;
}

ModelConfig ModelConfig::from_params(const qsp_context_params& p) {
  ModelConfig c;
  c.n_layers = p.n_layers;
  c.hidden = p.hidden_size;
  c.ffn = p.intermediate_size;
  c.n_heads = p.n_heads;
  c.n_kv_heads = p.n_kv_heads;
  c.head_dim = p.head_dim;
  c.vocab = p.vocab_size;
  c.max_seq = p.max_seq_len;
  c.rms_eps = p.rms_eps;
  c.rope_theta = p.rope_theta;
  c.rope_style = p.rope_style;
  c.qk_norm = p.qk_norm != 0;

  const struct { const char* name; uint32_t v; } dims[] = {
      {"n_layers", c.n_layers}, {"hidden_size", c.hidden}, {"intermediate_size", c.ffn},
      {"n_heads", c.n_heads},   {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim},
      {"vocab_size", c.vocab},  {"max_seq_len", c.max_seq}};
  for (const auto& d : dims) QSP_FAIL_IF(d.v == 0, QSP_ERR_SHAPE, "%s must be > 0", d.name);
  QSP_FAIL_IF(c.n_heads % c.n_kv_heads != 0, QSP_ERR_SHAPE,
              "n_heads (%u) must be a multiple of n_kv_heads (%u)", c.n_heads, c.n_kv_heads);
  QSP_FAIL_IF(c.head_dim % 2 != 0, QSP_ERR_SHAPE, "head_dim (%u) must be even", c.head_dim);
  QSP_FAIL_IF(c.max_seq > (1u << 24), QSP_ERR_SHAPE, "max_seq_len (%u) exceeds 16M tokens", c.max_seq);
  QSP_FAIL_IF(c.vocab > (1u << 30), QSP_ERR_SHAPE, "vocab_size (%u) too large", c.vocab);
  QSP_FAIL_IF(uint64_t(c.n_heads) * c.head_dim > (1u << 20) || c.hidden > (1u << 20) ||
                  c.ffn > (1u << 22) || c.n_layers > 4096,
              QSP_ERR_SHAPE, "model dimensions are implausibly large");
  QSP_FAIL_IF(!(c.rms_eps > 0.0f) || !std::isfinite(c.rms_eps), QSP_ERR_INVALID_ARGUMENT,
              "rms_eps must be a positive finite number");
  QSP_FAIL_IF(!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta), QSP_ERR_INVALID_ARGUMENT,
              "rope_theta must be a positive finite number");
  QSP_FAIL_IF(c.rope_style != QSP_ROPE_NEOX && c.rope_style != QSP_ROPE_INTERLEAVED,
              QSP_ERR_INVALID_ARGUMENT, "rope_style %d is not a QSP_ROPE_* value", c.rope_style);
  QSP_FAIL_IF(p.qk_norm != 0 && p.qk_norm != 1, QSP_ERR_INVALID_ARGUMENT, "qk_norm must be 0 or 1");
  return c;
}

}  // namespace qsp
