#include "engine/context.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "common/error.h"
#include "cuda/nccl_lib.h"
#include "engine/weight_cache.h"
#include "formats/format.h"

namespace qsp {

namespace {

// The device of each shard, from qsp_context_params' n_devices, device_mask
// and device_index (qsp.h): a shard per device, or every shard on one.
std::vector<int32_t> shard_devices(const qsp_context_params& p) {
  QSP_FAIL_IF(p.device_index < 0, QSP_ERR_INVALID_ARGUMENT, "device_index must be >= 0");
  QSP_FAIL_IF(p.n_devices > Partition::kMaxShards, QSP_ERR_INVALID_ARGUMENT, "n_devices %u: at most %u",
              p.n_devices, Partition::kMaxShards);
  const uint32_t n = std::max(1u, p.n_devices);
  std::vector<int32_t> d;
  if (p.device_mask == 0) {
    QSP_FAIL_IF(p.device_index > INT32_MAX - int32_t(n - 1), QSP_ERR_INVALID_ARGUMENT,
                "device_index %d + n_devices %u passes INT32_MAX", p.device_index, n);
    for (uint32_t i = 0; i < n; ++i) d.push_back(p.device_index + int32_t(i));
    return d;
  }
  for (int32_t i = 0; i < 32; ++i)
    if (p.device_mask >> i & 1u) d.push_back(i);
  if (d.size() == n) return d;  // a shard per device
  QSP_FAIL_IF(d.size() != 1, QSP_ERR_INVALID_ARGUMENT,
              "device_mask 0x%x names %zu devices for n_devices = %u shards: set n_devices bits (a shard per "
              "device), one (every shard on that device) or none (devices from device_index on)",
              p.device_mask, d.size(), n);
  return std::vector<int32_t>(n, d[0]);  // every shard on one device
}

}  // namespace

Context::Context(const qsp_context_params& p) : cfg_(ModelConfig::from_params(p)) {
  log_.callback = p.log_callback;
  log_.user_data = p.log_user_data;
  log_.max_level = p.log_level;
  QSP_FAIL_IF(p.n_threads < 0, QSP_ERR_INVALID_ARGUMENT, "n_threads must be >= 0 (0 = all cores)");
  devices_ = shard_devices(p);
  // Whether the model splits is the model's business, whatever the backend.
  part_ = Partition(cfg_, uint32_t(devices_.size()));
  switch (p.backend) {
    case QSP_BACKEND_CPU:
      backend_ = make_cpu_backend(cfg_, part_, p.n_threads);
      break;
    case QSP_BACKEND_CUDA:
      backend_ = make_cuda();
      break;
    case QSP_BACKEND_AUTO:
      if (cuda_device_count() > *std::max_element(devices_.begin(), devices_.end())) {
        try {
          backend_ = make_cuda();
        } catch (const Error& e) {
          // Only "no device" falls back: an unsupported shape or out-of-memory
          // on a present GPU is something the user must hear about.
          if (e.status() != QSP_ERR_NO_DEVICE) throw;
          log_(QSP_LOG_WARN, std::string("CUDA backend unavailable (") + e.what() + "); using the CPU");
        }
      } else {
        log_(QSP_LOG_INFO, "no CUDA device; using the CPU backend");
      }
      if (!backend_) backend_ = make_cpu_backend(cfg_, part_, p.n_threads);
      break;
    default:
      throw Error(QSP_ERR_INVALID_ARGUMENT, strprintf("backend %d is not a QSP_BACKEND_* value", p.backend));
  }
  weights_.layers.resize(cfg_.n_layers);
  log_(QSP_LOG_INFO, "context on " + backend_->device_name());
}

std::unique_ptr<Backend> Context::make_cuda() const {
  // Shards on several devices need NCCL, loaded first (src/cuda/nccl_lib.h):
  // where it is missing the user hears that, as that is what they can fix.
  // Every shard on one device (a one-bit device_mask) runs in turn there,
  // with a local sum in place of the all-reduce, and needs no NCCL.
  const bool spans =
      std::adjacent_find(devices_.begin(), devices_.end(), std::not_equal_to<int32_t>()) != devices_.end();
  if (spans && cuda_built()) {
    try {
      nccl();
    } catch (const Error& e) {
      throw Error(e.status(), std::string("tensor parallelism across CUDA devices needs NCCL: ") + e.what());
    }
  }
  return make_cuda_backend(cfg_, part_, devices_);
}

Context::~Context() = default;

TensorRef Context::acquire(const qsp_tensor& t, const SlotDesc& s, const char* where) {
  if (!slot_present(s, cfg_)) {
    QSP_FAIL_IF(t.handle != 0, QSP_ERR_INVALID_ARGUMENT, "%s given but the model has qk_norm = 0", where);
    return nullptr;
  }
  QSP_FAIL_IF(t.handle == 0, QSP_ERR_INVALID_ARGUMENT, "%s: handle 0 (no tensor) but the tensor is required",
              where);
  QSP_FAIL_IF(t.reserved != 0, QSP_ERR_INVALID_ARGUMENT, "%s: reserved field must be 0", where);
  const fmt::Format* f = fmt::find(t.dtype);
  QSP_FAIL_IF(!f, QSP_ERR_DTYPE, "%s: unknown dtype %d (qsp knows %s)", where, t.dtype, fmt::names());
  QSP_FAIL_IF(s.role == TensorRole::kVector && f->quantized(), QSP_ERR_DTYPE,
              "%s: a norm vector must be f32, f16 or bf16, not %s", where, f->name);
  const uint64_t rows = dim_value(cfg_, s.rows), cols = dim_value(cfg_, s.cols);
  QSP_FAIL_IF(t.n_rows != rows || t.n_cols != cols, QSP_ERR_SHAPE,
              "%s: shape %llux%llu, the model needs %llux%llu", where, (unsigned long long)t.n_rows,
              (unsigned long long)t.n_cols, (unsigned long long)rows, (unsigned long long)cols);
  const uint64_t want = fmt::tensor_bytes(t.dtype, rows, cols);
  QSP_FAIL_IF(want == 0, QSP_ERR_DTYPE, "%s: %s needs n_cols divisible by %u, got %llu", where, f->name,
              f->block_elems, (unsigned long long)cols);
  QSP_FAIL_IF(t.n_bytes != want, QSP_ERR_DTYPE, "%s: %llu bytes given, %s %llux%llu takes %llu", where,
              (unsigned long long)t.n_bytes, f->name, (unsigned long long)rows, (unsigned long long)cols,
              (unsigned long long)want);
  TensorMeta meta;
  meta.dtype = t.dtype;
  meta.rows = rows;
  meta.cols = cols;
  meta.bytes = want;
  meta.role = s.role;
  part_.check_tensor(s, t.dtype, where);
  backend_->check_supported(meta, s, where);
  WeightCache& cache = WeightCache::get(backend_->kind(), backend_->device());
  const void* data = t.data;
  return cache.acquire(t.handle, backend_->cache_variant(s), meta, [&]() -> std::unique_ptr<Tensor> {
    // Only read the caller's bytes when they are actually uploaded.
    QSP_FAIL_IF(data == nullptr, QSP_ERR_INVALID_ARGUMENT, "%s: data is NULL", where);
    return backend_->upload(meta, s, data);
  });
}

void Context::upload_layer(uint32_t layer, const qsp_layer_weights& w) {
  QSP_FAIL_IF(layer >= cfg_.n_layers, QSP_ERR_OUT_OF_RANGE, "layer %u out of range (the model has %u layers)",
              layer, cfg_.n_layers);
  QSP_FAIL_IF(w.reserved != 0, QSP_ERR_INVALID_ARGUMENT, "qsp_layer_weights.reserved must be 0");
  // Build the new set aside; commit only when every slot succeeded.
  LayerTensors l;
  for (int i = 0; i < kLayerSlotCount; ++i) {
    const SlotDesc& s = kLayerSlots[i];
    const std::string where = strprintf("layer %u %s", layer, s.name);
    l.t[i] = acquire(api_tensor(w, s), s, where.c_str());
  }
  weights_.layers[layer] = std::move(l);
}

void Context::upload_embedding(const qsp_tensor& t) {
  const SlotDesc& s = kModelSlots[kTokenEmbd];
  weights_[kTokenEmbd] = acquire(t, s, s.name);
}

void Context::upload_output(const qsp_output_weights& w) {
  QSP_FAIL_IF(w.reserved != 0, QSP_ERR_INVALID_ARGUMENT, "qsp_output_weights.reserved must be 0");
  const SlotDesc &sn = kModelSlots[kOutputNorm], &sh = kModelSlots[kLmHead];
  TensorRef norm = acquire(api_tensor(w, sn), sn, sn.name);
  TensorRef head = acquire(api_tensor(w, sh), sh, sh.name);
  weights_[kOutputNorm] = std::move(norm);
  weights_[kLmHead] = std::move(head);
}

void Context::prefill(const int32_t* tokens, const float* embeddings, uint32_t n) {
  check_prefill(tokens, embeddings, n);
  run_prefill(tokens, embeddings, n);
}

void Context::check_prefill(const int32_t* tokens, const float* embeddings, uint32_t n) const {
  QSP_FAIL_IF(n == 0, QSP_ERR_INVALID_ARGUMENT, "n_tokens must be > 0");
  QSP_FAIL_IF(!tokens && !embeddings, QSP_ERR_INVALID_ARGUMENT, "%s is NULL", "input");
  for (uint32_t l = 0; l < cfg_.n_layers; ++l)
    QSP_FAIL_IF(!weights_.layers[l].complete(cfg_), QSP_ERR_NOT_READY,
                "layer %u has not been uploaded", l);
  QSP_FAIL_IF(!weights_[kOutputNorm] || !weights_[kLmHead], QSP_ERR_NOT_READY,
              "the output weights (final norm, LM head) have not been uploaded");
  if (tokens) {
    QSP_FAIL_IF(!weights_[kTokenEmbd], QSP_ERR_NOT_READY, "the token embedding has not been uploaded");
    for (uint32_t i = 0; i < n; ++i)
      QSP_FAIL_IF(tokens[i] < 0 || uint32_t(tokens[i]) >= cfg_.vocab, QSP_ERR_OUT_OF_RANGE,
                  "token %u: id %d is outside the vocabulary [0, %u)", i, tokens[i], cfg_.vocab);
  }
  QSP_FAIL_IF(uint64_t(kv_len_) + n > cfg_.max_seq, QSP_ERR_CONTEXT_FULL,
              "prefill of %u tokens after %u cached would pass max_seq_len %u", n, kv_len_, cfg_.max_seq);
}

void Context::run_prefill(const int32_t* tokens, const float* embeddings, uint32_t n) {
  const uint32_t step = backend_->max_chunk();
  have_logits_ = false;  // the old logits are stale as soon as we start
  uint32_t done = 0;
  while (done < n) {
    PrefillChunk c;
    c.n = std::min(step, n - done);
    c.tokens = tokens ? tokens + done : nullptr;
    c.embeddings = embeddings ? embeddings + uint64_t(done) * cfg_.hidden : nullptr;
    c.past = kv_len_ + done;
    c.want_logits = done + c.n == n;
    backend_->prefill(weights_, c);
    done += c.n;
  }
  kv_len_ += n;
  have_logits_ = true;
}

std::string Context::batch_mismatch(const Context& o) const {
  if (backend_->kind() != o.backend_->kind() || backend_->device() != o.backend_->device())
    return strprintf("it runs on %s, not %s", o.backend_->device_name().c_str(),
                     backend_->device_name().c_str());
  const ModelConfig &a = cfg_, &b = o.cfg_;
  if (a.n_layers != b.n_layers || a.hidden != b.hidden || a.ffn != b.ffn || a.n_heads != b.n_heads ||
      a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim || a.vocab != b.vocab ||
      a.rms_eps != b.rms_eps || a.rope_theta != b.rope_theta || a.rope_style != b.rope_style ||
      a.qk_norm != b.qk_norm)
    return "its model shape or hyperparameters differ";
  if (part_.size() != o.part_.size())
    return strprintf("it is split into %u shards, not %u", o.part_.size(), part_.size());
  for (uint32_t l = 0; l < cfg_.n_layers; ++l)
    for (int i = 0; i < kLayerSlotCount; ++i)
      if (weights_.layers[l].t[i] != o.weights_.layers[l].t[i])
        return strprintf("its layer %u %s is another tensor", l, kLayerSlots[i].name);
  for (int i = 0; i < kModelSlotCount; ++i) {
    // A missing embedding is fine for a batch of embeddings; check_prefill
    // catches a token piece without one.
    if (i == kTokenEmbd && (!weights_[kTokenEmbd] || !o.weights_[kTokenEmbd])) continue;
    if (weights_[ModelSlot(i)] != o.weights_[ModelSlot(i)])
      return strprintf("its %s is another tensor", kModelSlots[i].name);
  }
  return "";
}

const float* Context::logits() {
  QSP_FAIL_IF(!have_logits_, QSP_ERR_NOT_READY, "no logits: run a prefill first");
  return backend_->logits();
}

int32_t Context::greedy_token() {
  QSP_FAIL_IF(!have_logits_, QSP_ERR_NOT_READY, "no logits: run a prefill first");
  return backend_->greedy_token();
}

void Context::kv_truncate(uint32_t len) {
  QSP_FAIL_IF(len > kv_len_, QSP_ERR_OUT_OF_RANGE, "cannot truncate to %u: the cache holds %u tokens", len,
              kv_len_);
  kv_len_ = len;
  have_logits_ = false;
}

}  // namespace qsp
