// The last-token logits of a GPU context against a reference (the CPU
// backend, or the GPU's unsplit model): close in relative L2 and the same
// greedy token, unless the reference's top two are closer than the measured
// error (a tie within noise is not a wrong answer).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "support/model.h"
#include "qsp/qsp.h"

namespace qsp_test {

struct Logits {
  std::vector<float> v;
  int32_t greedy = -1;
};

inline Logits run(qsp_context* ctx, const std::vector<int32_t>& tokens, const std::vector<uint32_t>& chunks) {
  Logits out;
  size_t done = 0;
  for (uint32_t c : chunks) {
    REQUIRE(qsp_prefill(ctx, tokens.data() + done, c) == QSP_OK);
    done += c;
  }
  REQUIRE(done == tokens.size());
  const float* p = nullptr;
  uint32_t n = 0;
  REQUIRE(qsp_get_logits(ctx, &p, &n) == QSP_OK);
  out.v.assign(p, p + n);
  REQUIRE(qsp_greedy_token(ctx, &out.greedy) == QSP_OK);
  return out;
}

// Same argmax, unless the reference's top two are closer than the measured
// error (a tie within noise is not a wrong answer); reported either way.
inline void check_close(const Logits& gpu, const Logits& cpu, double tol = 1e-2) {
  REQUIRE(gpu.v.size() == cpu.v.size());
  for (float f : gpu.v) REQUIRE(std::isfinite(f));
  const double err = rel_l2(gpu.v.data(), cpu.v.data(), cpu.v.size());
  double max_abs = 0;
  for (size_t i = 0; i < cpu.v.size(); ++i) max_abs = std::max(max_abs, std::fabs(double(gpu.v[i]) - cpu.v[i]));
  INFO("rel L2 " << err << ", max abs " << max_abs << ", greedy gpu " << gpu.greedy << " cpu " << cpu.greedy);
  CHECK(err <= tol);
  if (gpu.greedy != cpu.greedy) {
    const double gap = double(cpu.v[cpu.greedy]) - double(cpu.v[gpu.greedy]);
    INFO("reference gap between the two tokens: " << gap);
    CHECK(gap <= 2 * max_abs);
  }
  std::printf("    rel L2 %.3e  max abs %.3e  greedy %d/%d\n", err, max_abs, gpu.greedy, cpu.greedy);
}

}  // namespace qsp_test
