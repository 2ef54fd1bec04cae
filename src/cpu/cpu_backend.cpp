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
  cpu::Matrix matrix() const { return {meta.dtype, meta.rows, meta.cols, bytes.data()}; }

  std::vector<uint8_t> bytes;
  std::vector<float> vec;
};

const CpuTensor& as_cpu(const TensorRef& t) { return static_cast<const CpuTensor&>(*t); }
cpu::Matrix mat(const TensorRef& t) { return as_cpu(t).matrix(); }
const float* vec(const TensorRef& t) { return t ? as_cpu(t).vec.data() : nullptr; }

constexpr uint32_t kCpuChunk = 256;  // tokens per internal chunk: bounds the scratch

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelConfig& cfg, int32_t n_threads)
      : cfg_(cfg),
        pool_(n_threads > 0 ? n_threads : int(std::max(1u, std::thread::hardware_concurrency()))) {
    const uint64_t kv = uint64_t(cfg.n_layers) * cfg.n_kv_heads * cfg.max_seq * cfg.head_dim;
    k_cache_.resize(kv);
    v_cache_.resize(kv);
    chunk_ = std::min(kCpuChunk, cfg.max_seq);
    const uint64_t c = chunk_;
    x_.resize(c * cfg.hidden);
    xn_.resize(c * cfg.hidden);
    q_.resize(c * cfg.q_dim());
    k_.resize(c * cfg.kv_dim());
    v_.resize(c * cfg.kv_dim());
    att_.resize(c * cfg.q_dim());
    tmp_.resize(c * cfg.hidden);
    gate_.resize(c * cfg.ffn);
    up_.resize(c * cfg.ffn);
    logits_.resize(cfg.vocab);
  }

  int32_t kind() const override { return QSP_BACKEND_CPU; }
  int32_t device() const override { return -1; }
  std::string device_name() const override { return "CPU (" + std::to_string(pool_.size()) + " threads)"; }
  int32_t n_threads() const override { return pool_.size(); }
  uint64_t kv_bytes() const override { return 2 * k_cache_.size() * sizeof(float); }
  uint64_t scratch_bytes() const override {
    return sizeof(float) * (x_.size() + xn_.size() + q_.size() + k_.size() + v_.size() + att_.size() +
                            tmp_.size() + gate_.size() + up_.size() + logits_.size());
  }
  uint32_t max_chunk() const override { return chunk_; }
  void check_supported(const TensorMeta&, const char*) const override {}  // every dtype

  std::unique_ptr<Tensor> upload(const TensorMeta& meta, const void* data) override {
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
    const int64_t n = c.n, H = m.hidden, Q = m.q_dim(), KV = m.kv_dim(), F = m.ffn, D = m.head_dim;
    float* x = x_.data();
    if (c.tokens) {
      cpu::embed(mat(w[kTokenEmbd]), c.tokens, n, x, pool_);
    } else {
      std::copy(c.embeddings, c.embeddings + n * H, x);
    }
    for (uint32_t l = 0; l < m.n_layers; ++l) {
      const LayerTensors& L = w.layers[l];
      // Attention block.
      cpu::rmsnorm(x, vec(L[kAttnNorm]), xn_.data(), n, H, m.rms_eps, pool_);
      cpu::matmul(mat(L[kWq]), xn_.data(), n, q_.data(), Q, pool_);
      cpu::matmul(mat(L[kWk]), xn_.data(), n, k_.data(), KV, pool_);
      cpu::matmul(mat(L[kWv]), xn_.data(), n, v_.data(), KV, pool_);
      cpu::qk_norm_rope(q_.data(), n, m.n_heads, D, vec(L[kQNorm]), m.rms_eps, c.past, m.rope_theta,
                        m.rope_style, pool_);
      cpu::qk_norm_rope(k_.data(), n, m.n_kv_heads, D, vec(L[kKNorm]), m.rms_eps, c.past, m.rope_theta,
                        m.rope_style, pool_);
      float* kc = k_cache_.data() + uint64_t(l) * m.n_kv_heads * m.max_seq * D;
      float* vc = v_cache_.data() + uint64_t(l) * m.n_kv_heads * m.max_seq * D;
      cpu::kv_write(k_.data(), v_.data(), n, c.past, m.n_kv_heads, D, m.max_seq, kc, vc);
      cpu::attention(q_.data(), kc, vc, att_.data(), n, c.past, m.n_heads, m.n_kv_heads, D, m.max_seq, pool_);
      cpu::matmul(mat(L[kWo]), att_.data(), n, tmp_.data(), H, pool_);
      cpu::add_inplace(x, tmp_.data(), n * H, pool_);
      // Feed-forward block.
      cpu::rmsnorm(x, vec(L[kFfnNorm]), xn_.data(), n, H, m.rms_eps, pool_);
      cpu::matmul(mat(L[kWGate]), xn_.data(), n, gate_.data(), F, pool_);
      cpu::matmul(mat(L[kWUp]), xn_.data(), n, up_.data(), F, pool_);
      cpu::swiglu(gate_.data(), up_.data(), gate_.data(), n * F, pool_);
      cpu::matmul(mat(L[kWDown]), gate_.data(), n, tmp_.data(), H, pool_);
      cpu::add_inplace(x, tmp_.data(), n * H, pool_);
    }
    if (!c.want_logits) return;
    const float* last = x + (n - 1) * H;
    cpu::rmsnorm(last, vec(w[kOutputNorm]), xn_.data(), 1, H, m.rms_eps, pool_);
    cpu::matmul(mat(w[kLmHead]), xn_.data(), 1, logits_.data(), m.vocab, pool_);
  }

  const float* logits() override { return logits_.data(); }

  int32_t greedy_token() override {
    return cpu::argmax(logits_.data(), cfg_.vocab);  // NaN never wins; all-NaN logits give token 0
  }

 private:
  ModelConfig cfg_;
  ThreadPool pool_;
  uint32_t chunk_ = 0;
  std::vector<float> k_cache_, v_cache_;  // [layer][kv_head][max_seq][head_dim]
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, logits_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& cfg, int32_t n_threads) {
  return std::unique_ptr<Backend>(new CpuBackend(cfg, n_threads));
}

}  // namespace qsp
