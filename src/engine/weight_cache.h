// The process-wide weight cache: one per (backend kind, device), keyed by the
// caller's 64-bit handle. Contexts hold shared references; the cache holds
// weak ones, so a tensor is freed when the last context using it goes away.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"

namespace qsp {

struct CacheStats {
  uint64_t n_tensors = 0, n_bytes = 0, n_uploads = 0, n_hits = 0;
};

class WeightCache {
 public:
  // The cache for (kind, device); created on first use, never destroyed.
  static WeightCache& get(int32_t kind, int32_t device);

  // Returns the cached tensor for (`handle`, `variant`: Backend::cache_variant)
  // if its metadata equals `meta` (a hit), throws QSP_ERR_HANDLE_CONFLICT if
  // a live tensor of that handle, in any variant, has other metadata, and
  // otherwise calls `make` and caches the result. Concurrent callers for one
  // handle upload once.
  TensorRef acquire(uint64_t handle, uint64_t variant, const TensorMeta& meta,
                    const std::function<std::unique_ptr<Tensor>()>& make);

  CacheStats stats();

 private:
  std::mutex mu_;
  struct Entry {
    uint64_t variant;
    std::weak_ptr<const Tensor> tensor;
  };
  std::unordered_map<uint64_t, std::vector<Entry>> map_;  // by handle; one entry per variant
  uint64_t uploads_ = 0, hits_ = 0;
};

}  // namespace qsp
