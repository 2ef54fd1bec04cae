// RMSNorm to fp16 (kern::rmsnorm_f16: the norm and the quantization of the
// GEMM input in one op) against the CPU backend's cpu::rmsnorm on the same
// rows. Tolerance (as the fp64-reference test this replaces): rel L2 < 1e-3
// (fp16 output rounding ~3e-4); nothing past M rows written. A case is one
// line: {M, dim, row padding of x}.
#include "ops/harness.h"

using namespace qsp_test;

namespace {

struct NormCase {
  int M, dim, pad;
};

}  // namespace

TEST_CASE("op rmsnorm: rmsnorm_f16 matches the CPU op (vector and scalar paths)", "[gpu][rmsnorm]") {
  QSP_REQUIRE_GPU();
  // pad % 4 != 0 or dim % 4 != 0 takes the scalar path; dim > 8192 too.
  const NormCase cases[] = {
      {1, 64, 0},   {5, 4096, 4}, {33, 5120, 0},  {3, 1000, 4},   {7, 1022, 2},
      {2, 4096, 3}, {4, 9000, 8}, {1, 8192, 0},   {64, 2048, 4},  {2, 3, 1},
      {17, 1024, 0}, {100, 4096, 0}, {513, 1024, 0},  // Qwen3-0.6B / -8B hidden at prompt lengths
  };
  Rng rng(31337);
  for (const NormCase& c : cases) {
    INFO("M " << c.M << ", dim " << c.dim << ", ldx " << c.dim + c.pad);
    const int ldx = c.dim + c.pad;
    // A residual stream with a few large outliers per row.
    std::vector<float> x = randn(size_t(c.M) * ldx, 2.0f, rng);
    for (int m = 0; m < c.M; ++m) x[size_t(m) * ldx + (m * 37) % c.dim] = 60.0f;
    const std::vector<float> w = randn(size_t(c.dim), 0.1f, rng, 1.0f);
    DevBuf dx(x.size() * 4), dw(w.size() * 4), dy((size_t(c.M) * c.dim + 64) * 2);
    dx.upload(x);
    dw.upload(w);
    dy.poison();
    const float eps = 1e-5f;
    CUDA_REQUIRE(
        qsp::kern::rmsnorm_f16(dx.as<float>(), ldx, dw.as<float>(), dy.as<__half>(), c.M, c.dim, eps, nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::vector<uint16_t> y = dy.download<uint16_t>();

    std::vector<float> xs(size_t(c.M) * c.dim), want(xs.size());  // the rows without their padding
    for (int m = 0; m < c.M; ++m)
      std::copy(x.begin() + size_t(m) * ldx, x.begin() + size_t(m) * ldx + c.dim, xs.begin() + size_t(m) * c.dim);
    qsp::cpu::rmsnorm(xs.data(), w.data(), want.data(), c.M, c.dim, eps, cpu_pool());
    RelL2 err;
    for (size_t i = 0; i < want.size(); ++i) err.add(qsp::fp16_to_fp32(y[i]), want[i]);
    size_t past_end_touched = 0;
    for (size_t i = want.size(); i < y.size(); ++i) past_end_touched += y[i] != kPoison16;
    INFO("relative L2 error " << err.value());
    CHECK(err.value() < 1e-3);
    CHECK(past_end_touched == 0);
  }
}
