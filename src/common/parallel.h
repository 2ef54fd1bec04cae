// A minimal fork-join loop for host-side bulk work (weight repacking at
// upload): no pool kept alive, no dependency beyond std::thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace qsp {

// Runs fn(begin, end) over [0, n) in contiguous slices on up to
// min(hardware_concurrency, 16) threads when `work` (elements touched) is at
// least 4M; serially otherwise, or for the slices whose thread cannot be
// started. fn must be safe to run concurrently on disjoint slices.
template <class Fn>
void parallel_for(int64_t n, int64_t work, Fn fn) {
  unsigned nt = std::thread::hardware_concurrency();
  nt = std::min<unsigned>(nt == 0 ? 1 : nt, 16);
  if (work < (int64_t(1) << 22) || nt <= 1 || n < 2) {
    fn(int64_t(0), n);
    return;
  }
  nt = unsigned(std::min<int64_t>(nt, n));
  const int64_t step = (n + nt - 1) / nt;
  std::vector<std::thread> pool;
  int64_t b = step;
  for (; b < n; b += step) {
    try {
      pool.emplace_back(fn, b, std::min(n, b + step));
    } catch (...) {
      break;  // no more threads: the rest runs here
    }
  }
  for (; b < n; b += step) fn(b, std::min(n, b + step));
  fn(int64_t(0), std::min(n, step));
  for (auto& th : pool) th.join();
}

}  // namespace qsp
