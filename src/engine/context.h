// The engine's context: model config, registered weights, KV-cache length and
// the backend that does the work. Every public method validates fully before
// it changes anything, and throws qsp::Error on failure.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "engine/backend.h"
#include "engine/partition.h"

namespace qsp {

class Context {
 public:
  Context(const qsp_context_params& params);  // throws
  ~Context();

  void upload_layer(uint32_t layer, const qsp_layer_weights& w);
  void upload_embedding(const qsp_tensor& t);
  void upload_output(const qsp_output_weights& w);

  // Checks (check_prefill), then runs (run_prefill) n tokens: exactly one of
  // tokens / embeddings is set.
  void prefill(const int32_t* tokens, const float* embeddings, uint32_t n);
  // Every check prefill makes, without changing anything.
  void check_prefill(const int32_t* tokens, const float* embeddings, uint32_t n) const;
  // Runs an already checked prefill. On a throw the cache keeps its length and
  // the logits are gone.
  void run_prefill(const int32_t* tokens, const float* embeddings, uint32_t n);
  // Why this context cannot share a batched pass with `o`: "" when both run
  // the same model (config, backend, device and the very same cached weights).
  std::string batch_mismatch(const Context& o) const;

  const float* logits();
  int32_t greedy_token();

  uint32_t kv_length() const { return kv_len_; }
  void kv_clear() { kv_len_ = 0; have_logits_ = false; }
  void kv_truncate(uint32_t len);

  const ModelConfig& config() const { return cfg_; }
  const Partition& partition() const { return part_; }
  const ModelTensors& weights() const { return weights_; }
  // After a batched pass ran pieces of this context (engine/batch.cpp): the
  // cache grew by n tokens, and the logits are those of its last piece
  // (have_logits) or gone.
  void batch_advanced(uint32_t n, bool have_logits) {
    kv_len_ += n;
    have_logits_ = have_logits;
  }
  void batch_failed() { have_logits_ = false; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }
  const LogSink& log() const { return log_; }

  std::string last_error;  // set by the C layer

 private:
  // Validates the tensor of slot s (named `where` in messages) and returns its
  // cached tensor (nullptr for a slot this model does not have).
  TensorRef acquire(const qsp_tensor& t, const SlotDesc& s, const char* where);
  // The CUDA backend on devices_ (NCCL loaded first when they differ).
  std::unique_ptr<Backend> make_cuda() const;

  ModelConfig cfg_;
  std::vector<int32_t> devices_;  // the device of each shard (n_devices, device_mask, device_index)
  Partition part_;
  LogSink log_;
  std::unique_ptr<Backend> backend_;
  ModelTensors weights_;
  uint32_t kv_len_ = 0;
  bool have_logits_ = false;
};

}  // namespace qsp
