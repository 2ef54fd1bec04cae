// Argmax (kern::argmax) against the CPU op cpu::argmax on the same values:
// the lowest index of the maximum, NaN never wins. Exact. Vector lengths
// include the Qwen3 vocabulary (151936) and odd ones; unaligned input takes
// the scalar path.
#include <limits>

#include "ops/harness.h"

using namespace qsp_test;

namespace {

int32_t gpu_argmax(const std::vector<float>& v, size_t offset_floats = 0) {
  DevBuf d((v.size() + offset_floats) * 4), out(4);
  d.upload(v, offset_floats);
  out.poison();
  CUDA_REQUIRE(qsp::kern::argmax(d.as<float>() + offset_floats, int32_t(v.size()), out.as<int32_t>(), nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
  return out.download<int32_t>()[0];
}

int32_t cpu_argmax(const std::vector<float>& v) { return qsp::cpu::argmax(v.data(), int64_t(v.size())); }

}  // namespace

TEST_CASE("op argmax: lowest index of the maximum, NaN never wins", "[gpu][argmax]") {
  QSP_REQUIRE_GPU();
  Rng rng(2024);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 2, 3, 5, 17, 100, 513, 1000, 4097, 151936, 200003}) {
    std::vector<float> v = randn(size_t(n), 3.0f, rng);
    INFO("n " << n);
    CHECK(gpu_argmax(v) == cpu_argmax(v));
    CHECK(gpu_argmax(v, 1) == cpu_argmax(v));  // unaligned: scalar path
    if (n >= 5) {
      // Ties: the lower index wins, wherever the two sit.
      int a = int(rng.below(n)), b = int(rng.below(n));
      if (a == b) b = (a + 1) % n;
      if (a > b) std::swap(a, b);
      v[a] = v[b] = 100.0f;
      CHECK(gpu_argmax(v) == a);
      v[n - 1] = 100.0f;  // a third one at the very end (the tail)
      CHECK(gpu_argmax(v) == a);
      // NaN larger-looking neighbours and NaN at index 0 never win.
      v[0] = nan;
      v[a == 0 ? 1 : 0] = nan;
      for (int i = 0; i < n; i += 97) v[i] = nan;
      CHECK(gpu_argmax(v) == cpu_argmax(v));
      v[n / 2] = inf;
      CHECK(gpu_argmax(v) == cpu_argmax(v));
    }
  }
  CHECK(gpu_argmax(std::vector<float>(10, nan)) == 0);          // all NaN
  CHECK(gpu_argmax(std::vector<float>(151936, nan)) == 0);
  CHECK(gpu_argmax(std::vector<float>(9, -inf)) == 0);          // all -inf: the first
  CHECK(gpu_argmax({nan, -inf, -inf, nan}) == 1);               // -inf beats NaN
  CHECK(cpu_argmax({nan, -inf, -inf, nan}) == 1);
  CHECK(gpu_argmax({-5.0f, -5.0f, -7.0f}) == 0);
  std::vector<float> last(151936, -1.0f);
  last.back() = 0.0f;
  CHECK(gpu_argmax(last) == 151935);
  DevBuf out(4);
  CHECK(qsp::kern::argmax(nullptr, 10, out.as<int32_t>(), nullptr) == cudaErrorInvalidValue);
}
