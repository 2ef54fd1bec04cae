#include "engine/partition.h"

#include <cstring>

#include "common/error.h"
#include "formats/format.h"

namespace qsp {

Partition::Partition(const ModelConfig& cfg, uint32_t n) : cfg_(cfg), n_(n) {
  QSP_FAIL_IF(n == 0 || n > kMaxShards, QSP_ERR_INVALID_ARGUMENT, "%u shards: 1 to %u", n, kMaxShards);
  if (n == 1) return;
  // Whole KV heads per shard, hence whole heads (n_heads is a multiple of
  // n_kv_heads): a shard's query heads read only its own KV heads.
  QSP_FAIL_IF(cfg.n_kv_heads % n != 0, QSP_ERR_SHAPE,
              "n_kv_heads %u does not divide over n_devices = %u shards: each shard holds whole KV heads",
              cfg.n_kv_heads, n);
  QSP_FAIL_IF(cfg.ffn % n != 0, QSP_ERR_SHAPE, "intermediate_size %u does not divide over n_devices = %u shards",
              cfg.ffn, n);
  // The column splits (wo, w_down) must fall on quantization-block boundaries.
  const uint64_t q_cols = uint64_t(cfg.q_dim()) / n, f_cols = cfg.ffn / n;
  QSP_FAIL_IF(q_cols % kColBlock != 0, QSP_ERR_SHAPE,
              "n_heads * head_dim = %u over n_devices = %u shards gives %llu columns of wo per shard, not whole "
              "%u-element quantization blocks",
              cfg.q_dim(), n, (unsigned long long)q_cols, kColBlock);
  QSP_FAIL_IF(f_cols % kColBlock != 0, QSP_ERR_SHAPE,
              "intermediate_size %u over n_devices = %u shards gives %llu columns of w_down per shard, not whole "
              "%u-element quantization blocks",
              cfg.ffn, n, (unsigned long long)f_cols, kColBlock);
  QSP_FAIL_IF(cfg.vocab < n, QSP_ERR_SHAPE, "vocab_size %u is smaller than n_devices = %u", cfg.vocab, n);
}

Range Partition::range(Dim d, uint32_t s) const {
  switch (d) {
    case Dim::kQDim: {
      const Range h = heads(s);
      return {h.begin * cfg_.head_dim, h.end * cfg_.head_dim};
    }
    case Dim::kKVDim: {
      const Range h = kv_heads(s);
      return {h.begin * cfg_.head_dim, h.end * cfg_.head_dim};
    }
    case Dim::kFfn: return share(cfg_.ffn, s);
    case Dim::kVocab: return share(cfg_.vocab, s);
    case Dim::kOne:
    case Dim::kHidden:
    case Dim::kHeadDim: break;
  }
  return {0, dim_value(cfg_, d)};
}

Range Partition::rows(const SlotDesc& slot, uint32_t s) const {
  return slot.split == Split::kRows ? range(slot.rows, s) : Range{0, dim_value(cfg_, slot.rows)};
}

Range Partition::cols(const SlotDesc& slot, uint32_t s) const {
  return slot.split == Split::kCols ? range(slot.cols, s) : Range{0, dim_value(cfg_, slot.cols)};
}

void Partition::check_tensor(const SlotDesc& slot, int32_t dtype, const char* where) const {
  if (n_ == 1 || slot.split != Split::kCols) return;
  const fmt::Format* f = fmt::find(dtype);
  if (!f) return;  // the caller refuses unknown dtypes
  const uint64_t per = cols(slot, 0).size();
  QSP_FAIL_IF(per % f->block_elems != 0, QSP_ERR_SHAPE,
              "%s: %s needs whole %u-element blocks per shard; its %llu columns over n_devices = %u shards "
              "give %llu",
              where, f->name, f->block_elems, (unsigned long long)dim_value(cfg_, slot.cols), n_,
              (unsigned long long)per);
}

Partition::Piece Partition::cut(const SlotDesc& slot, uint32_t s, int32_t dtype, const void* data,
                                std::vector<uint8_t>& scratch) const {
  const Range r = rows(slot, s), c = cols(slot, s);
  const uint64_t n_cols = dim_value(cfg_, slot.cols);
  Piece p;
  p.rows = r.size();
  p.cols = c.size();
  p.bytes = fmt::tensor_bytes(dtype, p.rows, p.cols);
  const uint64_t row_bytes = fmt::tensor_bytes(dtype, 1, n_cols);
  const uint8_t* first = static_cast<const uint8_t*>(data) + r.begin * row_bytes;
  if (c.size() == n_cols) {
    p.data = first;  // whole rows: the caller's bytes as they are
    return p;
  }
  // The column ranges fall on block boundaries (check_tensor).
  const uint64_t skip = fmt::tensor_bytes(dtype, 1, c.begin), piece_row = fmt::tensor_bytes(dtype, 1, c.size());
  scratch.resize(p.bytes);
  for (uint64_t i = 0; i < p.rows; ++i)
    std::memcpy(scratch.data() + i * piece_row, first + i * row_bytes + skip, piece_row);
  p.data = scratch.data();
  return p;
}

}  // namespace qsp
