// From a parsed GGUF file to a qsp model: the architecture's hyperparameters
// (with llama.cpp's key names and documented defaults) and the tensor of
// every weight slot of the engine's table (engine/slots.h), each checked for
// presence, type (the format registry) and shape (the slot's shape rule).
#include <cmath>
#include <cstdio>

#include "formats/format.h"
#include "gguf/gguf_format.h"
#include "gguf/gguf_reader.h"

namespace qsp {
namespace gguf {

namespace {

using ull = unsigned long long;

struct ArchDefaults {
  const char* name;
  int32_t rope_style;
  int32_t qk_norm;
  float rope_theta;
  float rms_eps;
};
const ArchDefaults kArchs[] = {
    {"qwen3", QSP_ROPE_NEOX, 1, 1e6f, 1e-6f},
    {"llama", QSP_ROPE_INTERLEAVED, 0, 1e4f, 1e-5f},
};
constexpr uint32_t kDefaultContextLength = 4096;

const ArchDefaults* find_arch(const std::string& a) {
  for (const auto& d : kArchs)
    if (a == d.name) return &d;
  return nullptr;
}

uint32_t u32_or_zero(uint64_t v) { return v <= UINT32_MAX ? uint32_t(v) : 0; }

std::string shape_str(const TensorInfo& t) {
  char b[128];
  const uint32_t nd = t.n_dims == 0 ? 1 : t.n_dims;
  int n = std::snprintf(b, sizeof b, "[%llu", ull(t.ne[0]));
  for (uint32_t d = 1; d < nd && n > 0 && size_t(n) < sizeof b; ++d)
    n += std::snprintf(b + n, sizeof b - size_t(n), ", %llu", ull(t.ne[d]));
  if (n > 0 && size_t(n) < sizeof b) std::snprintf(b + n, sizeof b - size_t(n), "]");
  return b;
}

// GGUF tensor name of a model slot: "token_embd.weight".
std::string tensor_name(ModelSlot s) { return std::string(kModelSlots[s].gguf) + ".weight"; }

// A slot's shape quantity (engine/slots.h Dim) from the file's hyperparameters,
// and the metadata keys it comes from (for messages).
uint64_t dim_value(const Hyper& h, Dim d) {
  switch (d) {
    case Dim::kOne: return 1;
    case Dim::kHidden: return h.hidden;
    case Dim::kQDim: return uint64_t(h.n_heads) * h.head_dim;
    case Dim::kKVDim: return uint64_t(h.n_kv_heads) * h.head_dim;
    case Dim::kFfn: return h.ffn;
    case Dim::kHeadDim: return h.head_dim;
    case Dim::kVocab: return h.vocab;
  }
  return 0;
}
const char* dim_source(Dim d) {
  switch (d) {
    case Dim::kOne: return "1";
    case Dim::kHidden: return "embedding_length";
    case Dim::kQDim: return "head_count * key_length";
    case Dim::kKVDim: return "head_count_kv * key_length";
    case Dim::kFfn: return "feed_forward_length";
    case Dim::kHeadDim: return "key_length";
    case Dim::kVocab: return "vocabulary size";
  }
  return "?";
}

}  // namespace

Hyper read_hyper(const File& f) {
  Hyper h;
  f.try_string("general.architecture", &h.arch);
  const ArchDefaults* a = find_arch(h.arch);
  h.known_arch = a != nullptr;
  const std::string p = h.arch + ".";
  auto u = [&](const char* key, uint64_t def) -> uint32_t {
    uint64_t v = def;
    if (!f.try_uint(p + key, &v)) v = f.find_kv(p + key) ? 0 : def;
    return u32_or_zero(v);
  };
  auto fl = [&](const char* key, float def) -> float {
    double v = def;
    if (!f.try_float(p + key, &v)) v = f.find_kv(p + key) ? 0 : def;
    return std::isfinite(v) && std::fabs(v) < 3e38 ? float(v) : 0.0f;
  };
  h.n_layers = u("block_count", 0);
  h.hidden = u("embedding_length", 0);
  h.ffn = u("feed_forward_length", 0);
  h.n_heads = u("attention.head_count", 0);
  h.n_kv_heads = u("attention.head_count_kv", h.n_heads);
  h.head_dim = u("attention.key_length", h.n_heads ? h.hidden / h.n_heads : 0);
  h.context_length = u("context_length", a ? kDefaultContextLength : 0);
  h.rms_eps = fl("attention.layer_norm_rms_epsilon", a ? a->rms_eps : 0.0f);
  h.rope_theta = fl("rope.freq_base", a ? a->rope_theta : 0.0f);
  h.rope_style = a ? a->rope_style : -1;
  h.qk_norm = a ? a->qk_norm : -1;
  uint64_t vocab = 0;
  if (!f.try_uint(p + "vocab_size", &vocab) && !f.try_array_count("tokenizer.ggml.tokens", &vocab)) {
    if (const TensorInfo* e = f.find_tensor(tensor_name(kTokenEmbd))) vocab = e->rows();
  }
  h.vocab = u32_or_zero(vocab);
  h.tied = f.find_tensor(tensor_name(kLmHead)) == nullptr && f.find_tensor(tensor_name(kTokenEmbd)) != nullptr;
  return h;
}

Model resolve_model(const File& f) {
  Model m;
  Hyper& h = m.h;
  if (!f.get_string("general.architecture", &h.arch))
    fail(QSP_ERR_BAD_FORMAT, "missing metadata key general.architecture");
  const ArchDefaults* a = find_arch(h.arch);
  if (!a) {
    std::string shown;
    for (char ch : h.arch.substr(0, 64)) shown += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    fail(QSP_ERR_BAD_FORMAT, "unknown architecture \"%s\": qsp runs qwen3 and llama models", shown.c_str());
  }
  h.known_arch = true;
  const std::string p = h.arch + ".";

  auto opt_u = [&](const char* key, uint64_t def, bool* present = nullptr) -> uint32_t {
    const std::string k = p + key;
    const KeyValue* kv = f.find_kv(k);
    if (kv && kv->type == kArray)
      fail(QSP_ERR_UNSUPPORTED, "metadata key %s is an array (per-layer values); qsp needs one value", k.c_str());
    uint64_t v = def;
    const bool has = f.get_uint(k, &v);
    if (present) *present = has;
    if (v > UINT32_MAX) fail(QSP_ERR_BAD_FORMAT, "metadata key %s = %llu is out of range", k.c_str(), ull(v));
    return uint32_t(v);
  };
  auto req_u = [&](const char* key) -> uint32_t {
    bool has = false;
    const uint32_t v = opt_u(key, 0, &has);
    if (!has) fail(QSP_ERR_BAD_FORMAT, "missing metadata key %s%s", p.c_str(), key);
    if (v == 0) fail(QSP_ERR_BAD_FORMAT, "metadata key %s%s must be > 0", p.c_str(), key);
    return v;
  };
  auto opt_f = [&](const char* key, float def) -> float {
    double v = def;
    f.get_float(p + key, &v);
    if (!(v > 0) || !std::isfinite(v) || v > 3e38)
      fail(QSP_ERR_BAD_FORMAT, "metadata key %s%s = %g must be a positive finite number", p.c_str(), key, v);
    return float(v);
  };

  h.n_layers = req_u("block_count");
  h.hidden = req_u("embedding_length");
  h.ffn = req_u("feed_forward_length");
  h.n_heads = req_u("attention.head_count");
  h.n_kv_heads = opt_u("attention.head_count_kv", h.n_heads);
  if (h.n_kv_heads == 0) fail(QSP_ERR_BAD_FORMAT, "metadata key %sattention.head_count_kv must be > 0", p.c_str());
  bool has_key_length = false;
  h.head_dim = opt_u("attention.key_length", h.hidden / h.n_heads, &has_key_length);
  if (!has_key_length && h.hidden % h.n_heads != 0)
    fail(QSP_ERR_BAD_FORMAT,
         "%sattention.key_length is missing and embedding_length %u is not a multiple of head_count %u",
         p.c_str(), h.hidden, h.n_heads);
  if (h.head_dim == 0 || h.head_dim % 2 != 0)
    fail(QSP_ERR_BAD_FORMAT, "the head dimension (%sattention.key_length) %u must be even and > 0", p.c_str(),
         h.head_dim);
  if (h.n_heads % h.n_kv_heads != 0)
    fail(QSP_ERR_BAD_FORMAT, "%sattention.head_count %u is not a multiple of attention.head_count_kv %u",
         p.c_str(), h.n_heads, h.n_kv_heads);
  const uint32_t value_length = opt_u("attention.value_length", h.head_dim);
  if (value_length != h.head_dim)
    fail(QSP_ERR_UNSUPPORTED, "%sattention.value_length %u differs from key_length %u; qsp needs them equal",
         p.c_str(), value_length, h.head_dim);
  const uint32_t rope_dims = opt_u("rope.dimension_count", h.head_dim);
  if (rope_dims != h.head_dim)
    fail(QSP_ERR_UNSUPPORTED, "%srope.dimension_count %u differs from the head dimension %u (partial RoPE)",
         p.c_str(), rope_dims, h.head_dim);
  const uint32_t experts = opt_u("expert_count", 0);
  if (experts > 0)
    fail(QSP_ERR_UNSUPPORTED, "%sexpert_count = %u: mixture-of-experts models are not supported", p.c_str(),
         experts);
  h.context_length = opt_u("context_length", kDefaultContextLength);
  if (h.context_length == 0) fail(QSP_ERR_BAD_FORMAT, "metadata key %scontext_length must be > 0", p.c_str());
  h.rms_eps = opt_f("attention.layer_norm_rms_epsilon", a->rms_eps);
  h.rope_theta = opt_f("rope.freq_base", a->rope_theta);
  h.rope_style = a->rope_style;
  h.qk_norm = a->qk_norm;

  uint64_t vocab = 0;
  const TensorInfo* embd = f.find_tensor(tensor_name(kTokenEmbd));
  if (!f.get_uint(p + "vocab_size", &vocab)) {
    if (!f.get_array_count("tokenizer.ggml.tokens", &vocab)) {
      if (!embd) fail(QSP_ERR_BAD_FORMAT, "missing tensor %s", tensor_name(kTokenEmbd).c_str());
      vocab = embd->rows();
    }
  }
  if (vocab == 0 || vocab > UINT32_MAX)
    fail(QSP_ERR_BAD_FORMAT, "the vocabulary size %llu is out of range", ull(vocab));
  h.vocab = uint32_t(vocab);

  // No bias anywhere: qwen2-style q/k/v biases change the function.
  for (const TensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0 &&
        (n.compare(0, 4, "blk.") == 0 || n.compare(0, 6, "output") == 0 || n.compare(0, 10, "token_embd") == 0))
      fail(QSP_ERR_UNSUPPORTED, "tensor %s: qsp does not support bias tensors", n.c_str());
  }

  // Finds the tensor of a slot and checks its type and shape: rows x cols in
  // qsp terms, i.e. GGUF ne = [cols, rows] (vectors: [cols]).
  auto need = [&](const std::string& name, const SlotDesc& slot) -> int64_t {
    const int64_t idx = f.tensor_index(name);
    if (idx < 0) {
      if (name.compare(0, 4, "blk.") == 0)
        fail(QSP_ERR_BAD_FORMAT, "missing tensor %s (the model has %u layers)", name.c_str(), h.n_layers);
      fail(QSP_ERR_BAD_FORMAT, "missing tensor %s", name.c_str());
    }
    const TensorInfo& t = f.tensors()[size_t(idx)];
    const fmt::Format* format = fmt::find(t.type);
    if (!format)
      fail(QSP_ERR_UNSUPPORTED, "tensor %s has type %s (%d), qsp supports %s", name.c_str(),
           type_traits(t.type).name, t.type, fmt::names());
    const bool vector = slot.role == TensorRole::kVector;
    if (vector && format->quantized())
      fail(QSP_ERR_UNSUPPORTED, "tensor %s has type %s (%d); norm weights must be f32, f16 or bf16", name.c_str(),
           format->name, t.type);
    const uint64_t rows = dim_value(h, slot.rows), cols = dim_value(h, slot.cols);
    const bool ok = t.ne[0] == cols && t.ne[1] == rows && t.ne[2] == 1 && t.ne[3] == 1;
    if (!ok) {
      if (vector)
        fail(QSP_ERR_BAD_FORMAT, "tensor %s has shape %s, expected [%llu] (%s)", name.c_str(), shape_str(t).c_str(),
             ull(cols), dim_source(slot.cols));
      fail(QSP_ERR_BAD_FORMAT, "tensor %s has shape %s, expected [%llu, %llu] (%s, %s)", name.c_str(),
           shape_str(t).c_str(), ull(cols), ull(rows), dim_source(slot.cols), dim_source(slot.rows));
    }
    return idx;
  };

  // The model slots; the LM head is the embedding when the file has no output.weight.
  h.tied = f.find_tensor(tensor_name(kLmHead)) == nullptr;
  for (int s = 0; s < kModelSlotCount; ++s) {
    if (s == kLmHead && h.tied) {
      m.model[size_t(s)] = m.model[kTokenEmbd];
      continue;
    }
    m.model[size_t(s)] = need(tensor_name(ModelSlot(s)), kModelSlots[s]);
  }
  // Grown layer by layer: an absurd block_count fails at its first missing
  // tensor instead of allocating for it.
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    std::array<int64_t, kLayerSlotCount> idx;
    for (int s = 0; s < kLayerSlotCount; ++s) {
      const SlotDesc& slot = kLayerSlots[s];
      if (slot.qk_norm_only && !h.qk_norm) {
        idx[size_t(s)] = -1;
        continue;
      }
      idx[size_t(s)] = need("blk." + std::to_string(l) + "." + slot.gguf + ".weight", slot);
    }
    m.layers.push_back(idx);
  }
  return m;
}

}  // namespace gguf
}  // namespace qsp
