// The CPU backend: the exact fp32 reference of the whole prefill, and the
// backend that lets qsp and its bindings run on machines without a GPU.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "common/error.h"
#include "formats/format.h"
#include "cpu/ops.h"
#include "engine/backend.h"
#include "engine/partition.h"

namespace qsp {
namespace {

// Matrices keep the caller's bytes (any dtype); vectors are widened to fp32.
class CpuTensor : public Tensor {
 public:
  CpuTensor(const TensorMeta& m, const void* data) : Tensor(m) {
    if (m.role == TensorRole::kVector) {
      vec.resize(m.cols);
      fmt::dequantize_row(m.dtype, data, vec.data(), m.cols);
      stored_bytes = vec.size() * sizeof(float);
    } else {
      bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + m.bytes);
      stored_bytes = bytes.size();
    }
  }
  cpu::Matrix matrix() const { return {meta.dtype, meta.rows, meta.cols, bytes.data(), 0}; }

  std::vector<uint8_t> bytes;
  std::vector<float> vec;
};

const CpuTensor& as_cpu(const TensorRef& t) { return static_cast<const CpuTensor&>(*t); }
cpu::Matrix mat(const TensorRef& t) { return as_cpu(t).matrix(); }
const float* vec(const TensorRef& t) { return t ? as_cpu(t).vec.data() : nullptr; }

constexpr uint32_t kCpuChunk = 256;  // tokens per internal chunk: bounds the scratch

// The model runs as the shards of its Partition (one shard: the unsplit
// model), one after another, on this process's threads. Per layer, what
// every shard would compute alike (the RMSNorms, the residual stream, the
// embedding) is computed once; each shard then runs its heads (its rows of
// wq / wk / wv, its part of the KV cache, its columns of wo) and its FFN
// features (its rows of w_gate / w_up, its columns of w_down) into a partial
// output of its own, and the partials are added in the pairwise tree of
// cpu::tree_sum, the order in which matmul sums the halves of a row: so the
// sum equals the unsplit wo / w_down bit for bit (ops.h, kStripeLevels;
// docs/ARCHITECTURE.md). The LM head's shards write disjoint slices of the
// logits; the greedy token is the best of the shards' argmaxes.
class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelConfig& cfg, const Partition& part, int32_t n_threads)
      : cfg_(cfg),
        part_(part),
        levels_(shard_levels(part.size())),
        pool_(n_threads > 0 ? n_threads : int(std::max(1u, std::thread::hardware_concurrency()))) {
    const uint32_t n = part.size();
    chunk_ = std::min(kCpuChunk, cfg.max_seq);
    const uint64_t c = chunk_;
    // Every shard holds as many heads / KV heads / features as the others.
    const uint64_t q = part.range(Dim::kQDim, 0).size(), kv = part.range(Dim::kKVDim, 0).size(),
                   f = part.range(Dim::kFfn, 0).size();
    kv_.resize(n);
    for (ShardKV& s : kv_) {
      s.k.resize(uint64_t(cfg.n_layers) * kv * cfg.max_seq);
      s.v.resize(s.k.size());
    }
    x_.resize(c * cfg.hidden);
    xn_.resize(c * cfg.hidden);
    q_.resize(c * q);
    k_.resize(c * kv);
    v_.resize(c * kv);
    att_.resize(c * q);
    gate_.resize(c * f);
    up_.resize(c * f);
    partial_.resize(n);
    for (auto& p : partial_) p.resize(c * cfg.hidden);
    logits_.resize(cfg.vocab);
  }

  int32_t kind() const override { return QSP_BACKEND_CPU; }
  int32_t device() const override { return -1; }
  std::string device_name() const override {
    std::string s = "CPU (" + std::to_string(pool_.size()) + " threads";
    if (part_.size() > 1) s += ", " + std::to_string(part_.size()) + " shards";
    return s + ")";
  }
  int32_t n_threads() const override { return pool_.size(); }
  uint64_t kv_bytes() const override {
    uint64_t b = 0;
    for (const ShardKV& s : kv_) b += (s.k.size() + s.v.size()) * sizeof(float);
    return b;
  }
  uint64_t scratch_bytes() const override {
    uint64_t f = x_.size() + xn_.size() + q_.size() + k_.size() + v_.size() + att_.size() + gate_.size() +
                 up_.size() + logits_.size();
    for (const auto& p : partial_) f += p.size();
    return f * sizeof(float);
  }
  uint32_t max_chunk() const override { return chunk_; }
  void check_supported(const TensorMeta&, const SlotDesc&, const char*) const override {}  // every dtype

  // Whole tensors: a shard reads its rows / columns through a view (slice).
  std::unique_ptr<Tensor> upload(const TensorMeta& meta, const SlotDesc&, const void* data) override {
    return std::unique_ptr<Tensor>(new CpuTensor(meta, data));
  }

  // The reference has no cross-sequence pass to gain: each piece runs on its
  // owner as a prefill chunk. It still goes through the engine's batch
  // planner (passes of max_batch_tokens, pieces split across them), so the
  // CPU tests check that planner against single calls, bit for bit.
  bool prefill_batch(const ModelTensors& w, const std::vector<BatchPiece>& pieces) override {
    for (const BatchPiece& p : pieces) static_cast<CpuBackend*>(p.owner)->prefill(w, p.chunk);
    return true;
  }

  void prefill(const ModelTensors& w, const PrefillChunk& c) override {
    const ModelConfig& m = cfg_;
    const int64_t n = c.n, H = m.hidden;
    float* x = x_.data();
    if (c.tokens) {
      cpu::embed(mat(w[kTokenEmbd]), c.tokens, n, x, pool_);
    } else {
      std::copy(c.embeddings, c.embeddings + n * H, x);
    }
    for (uint32_t l = 0; l < m.n_layers; ++l) {
      const LayerTensors& L = w.layers[l];
      // Attention block: each shard's heads, then the sum of their outputs.
      cpu::rmsnorm(x, vec(L[kAttnNorm]), xn_.data(), n, H, m.rms_eps, pool_);
      for (uint32_t s = 0; s < part_.size(); ++s) attention_shard(L, l, s, c);
      add_partials(x, n);
      // Feed-forward block: each shard's features, then the sum.
      cpu::rmsnorm(x, vec(L[kFfnNorm]), xn_.data(), n, H, m.rms_eps, pool_);
      for (uint32_t s = 0; s < part_.size(); ++s) ffn_shard(L, s, n);
      add_partials(x, n);
    }
    if (!c.want_logits) return;
    const float* last = x + (n - 1) * H;
    cpu::rmsnorm(last, vec(w[kOutputNorm]), xn_.data(), 1, H, m.rms_eps, pool_);
    const SlotDesc& head = kModelSlots[kLmHead];
    for (uint32_t s = 0; s < part_.size(); ++s)  // the gather: each shard's rows of the logits
      cpu::matmul(slice(w[kLmHead], head, s), xn_.data(), 1, logits_.data() + part_.rows(head, s).begin,
                  m.vocab, pool_);
  }

  const float* logits() override { return logits_.data(); }

  // The argmax across shards: each shard's (lowest id on ties), then the
  // best of those, the lower shard on ties. NaN never wins; all-NaN logits
  // give token 0.
  int32_t greedy_token() override {
    const SlotDesc& head = kModelSlots[kLmHead];
    int64_t best = -1;
    for (uint32_t s = 0; s < part_.size(); ++s) {
      const Range r = part_.rows(head, s);
      const int64_t i = int64_t(r.begin) + cpu::argmax(logits_.data() + r.begin, int64_t(r.size()));
      if (!std::isnan(logits_[i]) && (best < 0 || logits_[i] > logits_[best])) best = i;
    }
    return best < 0 ? 0 : int32_t(best);
  }

 private:
  // matmul's levels for a shard's columns of wo / w_down: kStripeLevels -
  // log2(n). Throws QSP_ERR_UNSUPPORTED unless n is 1, 2, 4 or 8.
  static int shard_levels(uint32_t n) {
    QSP_FAIL_IF(n > uint32_t(cpu::kStripes) || (n & (n - 1)) != 0, QSP_ERR_UNSUPPORTED,
                "the CPU backend runs 1, 2, 4 or 8 shards (n_devices = %u): its exact sums cut a row into %d "
                "stripes added pairwise, and a shard holds a whole subtree of them",
                n, cpu::kStripes);
    int levels = cpu::kStripeLevels;
    for (uint32_t k = n; k > 1; k /= 2) --levels;
    return levels;
  }

  struct ShardKV {
    std::vector<float> k, v;  // [layer][the shard's kv_head][max_seq][head_dim]
  };

  // Shard s's part of a weight: the rows and columns the partition gives it.
  cpu::Matrix slice(const TensorRef& t, const SlotDesc& slot, uint32_t s) const {
    const Range r = part_.rows(slot, s), c = part_.cols(slot, s);
    return mat(t).rows_view(r.begin, r.end).cols_view(c.begin, c.end);
  }
  cpu::Matrix slice(const TensorRef& t, LayerSlot slot, uint32_t s) const { return slice(t, kLayerSlots[slot], s); }

  // Shard s's heads of layer l: QKV, QK-norm + RoPE, its KV cache, attention,
  // and its columns of wo into partial_[s].
  void attention_shard(const LayerTensors& L, uint32_t l, uint32_t s, const PrefillChunk& c) {
    const ModelConfig& m = cfg_;
    const int64_t n = c.n, D = m.head_dim;
    const int64_t nh = int64_t(part_.heads(s).size()), nkv = int64_t(part_.kv_heads(s).size());
    cpu::matmul(slice(L[kWq], kWq, s), xn_.data(), n, q_.data(), nh * D, pool_);
    cpu::matmul(slice(L[kWk], kWk, s), xn_.data(), n, k_.data(), nkv * D, pool_);
    cpu::matmul(slice(L[kWv], kWv, s), xn_.data(), n, v_.data(), nkv * D, pool_);
    cpu::qk_norm_rope(q_.data(), n, nh, D, vec(L[kQNorm]), m.rms_eps, c.past, m.rope_theta, m.rope_style, pool_);
    cpu::qk_norm_rope(k_.data(), n, nkv, D, vec(L[kKNorm]), m.rms_eps, c.past, m.rope_theta, m.rope_style, pool_);
    float* kc = kv_[s].k.data() + uint64_t(l) * nkv * m.max_seq * D;
    float* vc = kv_[s].v.data() + uint64_t(l) * nkv * m.max_seq * D;
    cpu::kv_write(k_.data(), v_.data(), n, c.past, nkv, D, m.max_seq, kc, vc);
    cpu::attention(q_.data(), kc, vc, att_.data(), n, c.past, nh, nkv, D, m.max_seq, pool_);
    cpu::matmul(slice(L[kWo], kWo, s), att_.data(), n, partial_[s].data(), m.hidden, pool_, levels_);
  }

  // Shard s's FFN features: its gate / up rows, SwiGLU, its columns of
  // w_down into partial_[s].
  void ffn_shard(const LayerTensors& L, uint32_t s, int64_t n) {
    const int64_t F = int64_t(part_.range(Dim::kFfn, s).size());
    cpu::matmul(slice(L[kWGate], kWGate, s), xn_.data(), n, gate_.data(), F, pool_);
    cpu::matmul(slice(L[kWUp], kWUp, s), xn_.data(), n, up_.data(), F, pool_);
    cpu::swiglu(gate_.data(), up_.data(), gate_.data(), n * F, pool_);
    cpu::matmul(slice(L[kWDown], kWDown, s), gate_.data(), n, partial_[s].data(), cfg_.hidden, pool_, levels_);
  }

  // The all-reduce and the residual: x += the tree sum of the shards' partials.
  void add_partials(float* x, int64_t n) {
    const int64_t count = n * cfg_.hidden;
    if (part_.size() > 1) {
      std::vector<const float*> parts;
      for (const auto& p : partial_) parts.push_back(p.data());
      cpu::tree_sum(parts.data(), int(parts.size()), partial_[0].data(), count, pool_);
    }
    cpu::add_inplace(x, partial_[0].data(), count, pool_);
  }

  ModelConfig cfg_;
  Partition part_;
  int levels_;  // matmul's levels for a shard's columns of wo / w_down (checked before the pool starts)
  ThreadPool pool_;
  uint32_t chunk_ = 0;
  std::vector<ShardKV> kv_;          // per shard: its KV heads
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, logits_;
  std::vector<std::vector<float>> partial_;  // per shard: its wo / w_down output [chunk][hidden]
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& cfg, const Partition& part, int32_t n_threads) {
  return std::unique_ptr<Backend>(new CpuBackend(cfg, part, n_threads));
}

}  // namespace qsp
