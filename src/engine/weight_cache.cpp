#include "engine/weight_cache.h"

#include <algorithm>
#include <iterator>
#include <map>

#include "common/error.h"
#include "formats/format.h"

namespace qsp {

WeightCache& WeightCache::get(int32_t kind, int32_t device) {
  static std::mutex mu;
  // Leaked on purpose: tensors released during static destruction must still
  // find their cache.
  static auto* caches = new std::map<std::pair<int32_t, int32_t>, std::unique_ptr<WeightCache>>;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*caches)[{kind, device}];
  if (!slot) slot.reset(new WeightCache);
  return *slot;
}

static const char* role_name(TensorRole r) { return r == TensorRole::kVector ? "vector" : "matrix"; }

TensorRef WeightCache::acquire(uint64_t handle, uint64_t variant, const TensorMeta& meta,
                               const std::function<std::unique_ptr<Tensor>()>& make) {
  // The lock is held across the upload so that two contexts registering the
  // same handle at once upload it once; uploads of different handles are
  // serialized, which costs nothing a PCIe link would not serialize anyway.
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry>& entries = map_[handle];
  Entry* mine = nullptr;
  for (Entry& e : entries) {
    if (e.variant == variant) mine = &e;
    const TensorRef t = e.tensor.lock();
    if (!t) continue;
    // A handle names one tensor, whatever form a backend keeps it in.
    const TensorMeta& m = t->meta;
    QSP_FAIL_IF(!(m == meta), QSP_ERR_HANDLE_CONFLICT,
                "handle 0x%llx is already registered as %s %llux%llu (%llu bytes, %s); "
                "now given as %s %llux%llu (%llu bytes, %s)",
                (unsigned long long)handle, fmt::name(m.dtype), (unsigned long long)m.rows,
                (unsigned long long)m.cols, (unsigned long long)m.bytes, role_name(m.role), fmt::name(meta.dtype),
                (unsigned long long)meta.rows, (unsigned long long)meta.cols, (unsigned long long)meta.bytes,
                role_name(meta.role));
  }
  if (mine) {
    if (TensorRef t = mine->tensor.lock()) {
      ++hits_;
      return t;
    }
  }
  std::shared_ptr<const Tensor> t(make().release());
  if (mine) {
    mine->tensor = t;
  } else {
    entries.push_back(Entry{variant, t});
  }
  ++uploads_;
  return t;
}

CacheStats WeightCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s;
  for (auto it = map_.begin(); it != map_.end();) {
    std::vector<Entry>& entries = it->second;
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [&](const Entry& e) {
                                   const TensorRef t = e.tensor.lock();
                                   if (!t) return true;
                                   ++s.n_tensors;
                                   s.n_bytes += t->stored_bytes;
                                   return false;
                                 }),
                  entries.end());
    it = entries.empty() ? map_.erase(it) : std::next(it);
  }
  s.n_uploads = uploads_;
  s.n_hits = hits_;
  return s;
}

}  // namespace qsp
