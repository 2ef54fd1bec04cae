// The interface between the engine and a backend (CPU reference, CUDA).
//
// The engine validates every argument before it reaches a backend; backends
// report failures by throwing qsp::Error. A backend owns its KV cache and
// activation scratch; weights live in the process-wide WeightCache as Tensor
// objects that the backend itself created (so it may use any layout).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/slots.h"

namespace qsp {

struct TensorMeta {
  int32_t dtype = 0;
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t bytes = 0;
  TensorRole role = TensorRole::kMatrix;

  bool operator==(const TensorMeta& o) const {
    return dtype == o.dtype && rows == o.rows && cols == o.cols && bytes == o.bytes && role == o.role;
  }
};

// A tensor as a backend stores it. Destroying it frees its memory.
class Tensor {
 public:
  explicit Tensor(const TensorMeta& m) : meta(m) {}
  virtual ~Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const TensorMeta meta;
  uint64_t stored_bytes = 0;  // bytes it occupies in the backend's memory
};

// The input of one prefill chunk: exactly one of tokens / embeddings is set.
struct PrefillChunk {
  const int32_t* tokens = nullptr;   // n ids, already checked < vocab
  const float* embeddings = nullptr; // n x hidden, row-major
  uint32_t n = 0;
  uint32_t past = 0;                 // tokens already in the KV cache
  bool want_logits = true;           // the last chunk of a prefill
};

class Backend;

// One context's piece of a batched pass (see Backend::prefill_batch).
struct BatchPiece {
  Backend* owner = nullptr;  // the context's backend: same class, device and model
  PrefillChunk chunk;        // its tokens in this pass; past = its cache length
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual int32_t kind() const = 0;           // QSP_BACKEND_CPU or QSP_BACKEND_CUDA
  virtual int32_t device() const = 0;         // weight-cache key: -1 for the CPU
  virtual std::string device_name() const = 0;
  virtual int32_t n_threads() const = 0;
  virtual uint64_t kv_bytes() const = 0;
  virtual uint64_t scratch_bytes() const = 0;

  // Largest chunk prefill() accepts; the engine splits longer prompts.
  virtual uint32_t max_chunk() const = 0;

  // Throws QSP_ERR_UNSUPPORTED when this backend cannot run a tensor of this
  // shape / dtype in `slot` (named `where` in messages); called before
  // upload so nothing is cached.
  virtual void check_supported(const TensorMeta& meta, const SlotDesc& slot, const char* where) const = 0;

  // The backend's copy of a validated host tensor of `slot` (data holds
  // meta.bytes bytes).
  virtual std::unique_ptr<Tensor> upload(const TensorMeta& meta, const SlotDesc& slot, const void* data) = 0;

  // The weight cache keeps one tensor per (handle, variant): a backend that
  // stores a slot's tensor in another form than the unsplit model does (the
  // CUDA backend's shards: a piece per shard) gives that form its own
  // variant, so contexts of either kind share what they can and never get a
  // tensor of the other form. 0: the plain tensor.
  virtual uint64_t cache_variant(const SlotDesc& slot) const {
    (void)slot;
    return 0;
  }

  // Runs one chunk through all layers, writing K/V at positions
  // [past, past + n). With want_logits, computes the last token's logits.
  // On failure (throw), KV entries at positions >= past may be garbage; the
  // engine does not advance its length, so they are never read.
  virtual void prefill(const ModelTensors& w, const PrefillChunk& chunk) = 0;

  // Runs the pieces of several contexts (this backend's context may be among
  // them or not) as one pass: each piece writes K/V into its owner's cache at
  // positions [past, past + n), and a piece with want_logits leaves its last
  // token's logits and greedy token in its owner, exactly as owner->prefill
  // would. The engine keeps the total within max_batch_tokens(). Returns
  // false, having done nothing, when this backend has no one-pass batch (the
  // engine then runs the pieces one by one). On a throw, the owners' caches
  // past their old lengths may hold garbage and their logits are gone.
  virtual bool prefill_batch(const ModelTensors& w, const std::vector<BatchPiece>& pieces) {
    (void)w;
    (void)pieces;
    return false;
  }
  // Tokens one prefill_batch pass may hold in all.
  virtual uint32_t max_batch_tokens() const { return max_chunk(); }

  // The logits of the last chunk run with want_logits (vocab floats, host memory).
  virtual const float* logits() = 0;
  // Their argmax (lowest id on ties).
  virtual int32_t greedy_token() = 0;
};

class Partition;
// Creates the CPU backend (src/cpu), running the shards of `part` in turn
// (one shard: the unsplit model). Throws QSP_ERR_UNSUPPORTED for a shard
// count it cannot sum exactly (other than 1, 2, 4, 8).
std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& cfg, const Partition& part, int32_t n_threads);
// Creates the CUDA backend (src/cuda) for the shards of `part` (one shard:
// the unsplit model) on `devices`, the device of each shard: all one device
// (the shards run in turn there) or a device per shard (NCCL all-reduces
// between them; throws QSP_ERR_UNSUPPORTED where NCCL cannot be loaded).
// Throws QSP_ERR_NO_DEVICE when built without CUDA or when a device is not
// usable.
std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, const Partition& part,
                                           const std::vector<int32_t>& devices);
// Number of usable CUDA devices (0 when built without CUDA).
int cuda_device_count();
// Whether this build has the CUDA backend (QSP_CUDA).
bool cuda_built();

}  // namespace qsp
