// Host helper of the kernel launchers: a per-device value computed once.
#pragma once

#include <atomic>

namespace qsp {
namespace kern {

// A per-device value computed once (device ordinals < 64), thread-safe: a
// racing first call computes it twice, which is harmless. fn() returns the
// value (>= 0) or a negative "don't know", which is not remembered.
struct PerDevice {
  std::atomic<int> v[64];
  PerDevice() {
    for (auto& x : v) x.store(-1, std::memory_order_relaxed);
  }
  template <class Fn>
  int get(int dev, Fn fn) {
    if (dev < 0 || dev >= 64) return fn();
    int x = v[dev].load(std::memory_order_acquire);
    if (x < 0) {
      x = fn();
      if (x >= 0) v[dev].store(x, std::memory_order_release);
    }
    return x;
  }
};

}  // namespace kern
}  // namespace qsp
