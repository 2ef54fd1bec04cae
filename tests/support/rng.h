// Deterministic random numbers for tests and benchmarks: xorshift64* with an
// approximately normal draw (four uniforms, Irwin-Hall rescaled to unit
// variance), fast enough for the 155M weights of an LM head. Plain C++, no
// Catch2 and no CUDA, so benches include it too.
#pragma once

#include <cstdint>
#include <vector>

namespace qsp_test {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  float normal() { return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f; }
  float normal(float mean, float stddev) { return mean + stddev * normal(); }
  int64_t below(int64_t n) { return int64_t(next() % uint64_t(n)); }  // [0, n)
};

// n values ~ N(mean, stddev): never all zeros, the scale the caller picks.
inline std::vector<float> randn(size_t n, float stddev, Rng& rng, float mean = 0.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal(mean, stddev);
  return v;
}

}  // namespace qsp_test
