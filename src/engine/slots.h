// The model's weight slots, described once.
//
// Every tensor a model needs is a slot: its name in messages and in the C
// API's structs, its GGUF tensor name, the rule that gives its shape from the
// model's hyperparameters, and its role (a norm vector or a matrix). The C
// API's validation (engine/context.cpp), both backends and the GGUF loader
// read this table; none of them lists the slots again. Adding a slot means a
// line here, a member in the public struct that carries it, and the op that
// uses it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "qsp/qsp.h"

namespace qsp {

struct ModelConfig;

enum class TensorRole : int32_t {
  kVector = 0,  // a norm weight: the backend keeps it as fp32
  kMatrix = 1,  // a projection, the embedding table or the LM head
};

// The quantities a slot's shape is written in.
enum class Dim : uint8_t {
  kOne,      // 1 (the row count of a vector)
  kHidden,   // hidden_size
  kQDim,     // n_heads * head_dim
  kKVDim,    // n_kv_heads * head_dim
  kFfn,      // intermediate_size
  kHeadDim,  // head_dim
  kVocab,    // vocab_size
};
uint64_t dim_value(const ModelConfig& cfg, Dim d);

// The slots of one transformer layer, in the order of qsp_layer_weights.
enum LayerSlot : int {
  kAttnNorm = 0, kWq, kWk, kWv, kQNorm, kKNorm, kWo, kFfnNorm, kWGate, kWUp, kWDown, kLayerSlotCount
};
// The slots outside the layers.
enum ModelSlot : int { kTokenEmbd = 0, kOutputNorm, kLmHead, kModelSlotCount };

// How a tensor-parallel context cuts a slot's tensor (engine/partition.h):
// along its rows (each shard holds the rows of its heads / features /
// vocabulary), its columns (the input features of its heads / features:
// the shards' products are summed), or not at all (every shard holds it).
enum class Split : uint8_t { kNone, kRows, kCols };

struct SlotDesc {
  const char* name;      // "wq": the qsp_*_weights member, used in messages
  const char* gguf;      // GGUF name: layer slots "blk.N.<gguf>.weight", model slots "<gguf>.weight"
  TensorRole role;
  Dim rows, cols;        // the shape rule
  bool qk_norm_only;     // present exactly when the model has qk_norm (Qwen3's q/k norms)
  size_t api_offset;     // offset of its qsp_tensor in qsp_layer_weights / qsp_output_weights
  Split split;           // tensor parallelism: which side is cut
};

extern const SlotDesc kLayerSlots[kLayerSlotCount];
extern const SlotDesc kModelSlots[kModelSlotCount];  // kTokenEmbd has no struct: api_offset unused

// Is the slot part of a model with this config (q/k norms only with qk_norm)?
bool slot_present(const SlotDesc& s, const ModelConfig& cfg);

// The tensor of slot s inside a public weights struct (qsp_layer_weights for
// layer slots, qsp_output_weights for the output ones).
template <class Struct>
const qsp_tensor& api_tensor(const Struct& w, const SlotDesc& s) {
  return *reinterpret_cast<const qsp_tensor*>(reinterpret_cast<const char*>(&w) + s.api_offset);
}
template <class Struct>
qsp_tensor& api_tensor(Struct& w, const SlotDesc& s) {
  return *reinterpret_cast<qsp_tensor*>(reinterpret_cast<char*>(&w) + s.api_offset);
}

// ---- A backend's tensors, by slot ----------------------------------------
class Tensor;
using TensorRef = std::shared_ptr<const Tensor>;

struct LayerTensors {
  std::array<TensorRef, kLayerSlotCount> t;
  const TensorRef& operator[](LayerSlot s) const { return t[s]; }
  TensorRef& operator[](LayerSlot s) { return t[s]; }
  // Every slot the model has is filled.
  bool complete(const ModelConfig& cfg) const;
};

struct ModelTensors {
  std::vector<LayerTensors> layers;
  std::array<TensorRef, kModelSlotCount> t;  // the embedding is needed for token-id prefill only
  const TensorRef& operator[](ModelSlot s) const { return t[s]; }
  TensorRef& operator[](ModelSlot s) { return t[s]; }
};

}  // namespace qsp
