// How a tensor-parallel context splits the model (issue 19), in one place.
//
// Megatron-style: shard i of N holds query heads, KV heads and FFN features
// [i*X/N, (i+1)*X/N) of each count X, and vocabulary rows
// [floor(i*V/N), floor((i+1)*V/N)). Each weight slot says in the slot table
// (engine/slots.h, SlotDesc::split) which side of its tensor is cut:
//
//   rows    wq (heads), wk / wv (KV heads), w_gate / w_up (features), lm_head (vocabulary)
//   cols    wo (heads: its input is the attention output), w_down (features)
//   none    the norms, q_norm / k_norm (per head, shared), the embedding
//
// so a layer needs one sum of the shards' partial outputs after wo and one
// after w_down (the all-reduces), the KV cache is split by KV heads, and the
// LM head's shards give disjoint slices of the logits (a gather; the greedy
// token is the argmax across shards). Backends read the ranges from here;
// nothing else decides a split. One shard is the unsplit model.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config.h"
#include "engine/slots.h"

namespace qsp {

struct Range {
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};

class Partition {
 public:
  // The most shards a context may have (qsp_context_params.device_mask's bits).
  static constexpr uint32_t kMaxShards = 32;
  // Every shard's columns of wo and w_down are whole blocks of this many
  // elements (every quantized format's block is a multiple of it); checked
  // when the partition is made. A format with a larger block (the K-quants'
  // 256) is checked per tensor (check_tensor).
  static constexpr uint32_t kColBlock = 32;

  Partition() = default;  // one shard
  // n shards of cfg; throws QSP_ERR_SHAPE naming the count that does not divide.
  Partition(const ModelConfig& cfg, uint32_t n);

  uint32_t size() const { return n_; }

  // Shard s's part of a dimension, in elements (kQDim: its query heads times
  // head_dim, ...); the whole dimension for one that is not split (kHidden,
  // kHeadDim, kOne).
  Range range(Dim d, uint32_t s) const;
  Range heads(uint32_t s) const { return share(cfg_.n_heads, s); }
  Range kv_heads(uint32_t s) const { return share(cfg_.n_kv_heads, s); }
  // The rows / columns of slot `slot`'s tensor that shard s holds.
  Range rows(const SlotDesc& slot, uint32_t s) const;
  Range cols(const SlotDesc& slot, uint32_t s) const;

  // Throws QSP_ERR_SHAPE when a tensor of `dtype` in `slot` cannot be cut:
  // a column split that would not give every shard whole blocks.
  void check_tensor(const SlotDesc& slot, int32_t dtype, const char* where) const;

  // Shard s's piece of a checked tensor of `slot` (dtype, the slot's shape,
  // its caller's bytes `data`) as a matrix of its own, in the same dtype: for
  // a row cut (or none) a pointer into data; for a column cut the shard's
  // blocks of every row gathered into `scratch`. A backend that stores
  // pieces (the CUDA backend) uploads these.
  struct Piece {
    const void* data;
    uint64_t rows, cols, bytes;
  };
  Piece cut(const SlotDesc& slot, uint32_t s, int32_t dtype, const void* data, std::vector<uint8_t>& scratch) const;

 private:
  Range share(uint64_t count, uint32_t s) const { return {count * s / n_, count * (s + 1) / n_}; }

  ModelConfig cfg_;
  uint32_t n_ = 1;
};

}  // namespace qsp
