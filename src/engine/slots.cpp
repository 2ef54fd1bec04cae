#include "engine/slots.h"

#include "engine/backend.h"
#include "engine/config.h"

namespace qsp {

namespace {
constexpr TensorRole V = TensorRole::kVector;
constexpr TensorRole M = TensorRole::kMatrix;
constexpr Split NONE = Split::kNone, ROWS = Split::kRows, COLS = Split::kCols;
#define QSP_LAYER_OFF(m) offsetof(qsp_layer_weights, m)
#define QSP_OUT_OFF(m) offsetof(qsp_output_weights, m)
}  // namespace

// clang-format off
const SlotDesc kLayerSlots[kLayerSlotCount] = {
    //  name        gguf           role rows          cols           qk_norm  struct member           split
    {"attn_norm", "attn_norm",   V, Dim::kOne,    Dim::kHidden,  false, QSP_LAYER_OFF(attn_norm), NONE},
    {"wq",        "attn_q",      M, Dim::kQDim,   Dim::kHidden,  false, QSP_LAYER_OFF(wq),        ROWS},
    {"wk",        "attn_k",      M, Dim::kKVDim,  Dim::kHidden,  false, QSP_LAYER_OFF(wk),        ROWS},
    {"wv",        "attn_v",      M, Dim::kKVDim,  Dim::kHidden,  false, QSP_LAYER_OFF(wv),        ROWS},
    {"q_norm",    "attn_q_norm", V, Dim::kOne,    Dim::kHeadDim, true,  QSP_LAYER_OFF(q_norm),    NONE},
    {"k_norm",    "attn_k_norm", V, Dim::kOne,    Dim::kHeadDim, true,  QSP_LAYER_OFF(k_norm),    NONE},
    {"wo",        "attn_output", M, Dim::kHidden, Dim::kQDim,    false, QSP_LAYER_OFF(wo),        COLS},
    {"ffn_norm",  "ffn_norm",    V, Dim::kOne,    Dim::kHidden,  false, QSP_LAYER_OFF(ffn_norm),  NONE},
    {"w_gate",    "ffn_gate",    M, Dim::kFfn,    Dim::kHidden,  false, QSP_LAYER_OFF(w_gate),    ROWS},
    {"w_up",      "ffn_up",      M, Dim::kFfn,    Dim::kHidden,  false, QSP_LAYER_OFF(w_up),      ROWS},
    {"w_down",    "ffn_down",    M, Dim::kHidden, Dim::kFfn,     false, QSP_LAYER_OFF(w_down),    COLS},
};
const SlotDesc kModelSlots[kModelSlotCount] = {
    {"token_embd",  "token_embd",  M, Dim::kVocab, Dim::kHidden, false, 0,                    NONE},
    {"output_norm", "output_norm", V, Dim::kOne,   Dim::kHidden, false, QSP_OUT_OFF(norm),    NONE},
    {"lm_head",     "output",      M, Dim::kVocab, Dim::kHidden, false, QSP_OUT_OFF(lm_head), ROWS},
};
// clang-format on

uint64_t dim_value(const ModelConfig& cfg, Dim d) {
  switch (d) {
    case Dim::kOne: return 1;
    case Dim::kHidden: return cfg.hidden;
    case Dim::kQDim: return cfg.q_dim();
    case Dim::kKVDim: return cfg.kv_dim();
    case Dim::kFfn: return cfg.ffn;
    case Dim::kHeadDim: return cfg.head_dim;
    case Dim::kVocab: return cfg.vocab;
  }
  return 0;
}

bool slot_present(const SlotDesc& s, const ModelConfig& cfg) { return !s.qk_norm_only || cfg.qk_norm; }

bool LayerTensors::complete(const ModelConfig& cfg) const {
  for (int s = 0; s < kLayerSlotCount; ++s)
    if (slot_present(kLayerSlots[s], cfg) && !t[s]) return false;
  return true;
}

}  // namespace qsp
