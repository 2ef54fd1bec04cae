// Embedding lookup (kern::embed) against the CPU backend's embed on the same
// table and tokens. Tolerance: exact (d * (q - 8) in fp32 on both sides; BF16
// tables are fp16 on the device, so the CPU op reads the same fp16 values).
// Token ids outside the table give zero rows on the GPU (the CPU engine
// rejects them before its op runs), checked on their own.
#include "ops/harness.h"

using namespace qsp_test;

namespace {

struct EmbedCase {
  int32_t dtype;
  int64_t rows, cols;
  int M;
};

}  // namespace

TEST_CASE("op embed: rows of Q4_0 / Q8_0 / F16 / BF16 / Q4_K / Q5_K / Q6_K / Q4_1 / Q5_0 / Q5_1 / Q2_K / Q3_K tables",
          "[gpu][gemm][embed]") {
  QSP_REQUIRE_GPU();
  // 1000 rows: not a multiple of the 16-row tile; 151936 x 1024: Qwen3's table.
  const EmbedCase cases[] = {
      {QSP_DTYPE_Q4_0, 1000, 96, 37},   {QSP_DTYPE_Q4_0, 1000, 1024, 37},  {QSP_DTYPE_Q8_0, 1000, 96, 37},
      {QSP_DTYPE_Q8_0, 1000, 1024, 37}, {QSP_DTYPE_F16, 1000, 96, 37},     {QSP_DTYPE_F16, 1000, 1024, 37},
      {QSP_DTYPE_BF16, 1000, 96, 37},   {QSP_DTYPE_BF16, 1000, 1024, 37},  {QSP_DTYPE_Q8_0, 151936, 1024, 513},
      {QSP_DTYPE_Q4_0, 4096, 4096, 17},
      // K-quants: exact too (d*sc*q - dmin*m, d*sc*(q - 32) in fp32 as the CPU's).
      {QSP_DTYPE_Q4_K, 1000, 256, 37},  {QSP_DTYPE_Q4_K, 1000, 1024, 37},  {QSP_DTYPE_Q5_K, 1000, 256, 37},
      {QSP_DTYPE_Q5_K, 1000, 1024, 37}, {QSP_DTYPE_Q6_K, 1000, 256, 37},   {QSP_DTYPE_Q6_K, 1000, 1024, 37},
      {QSP_DTYPE_Q4_K, 151936, 1024, 513}, {QSP_DTYPE_Q6_K, 4096, 4096, 17},  // Qwen3-0.6B table; 8B width
      // Q4_1 / Q5_0 / Q5_1 (K % 64 == 32 too) and Q2_K / Q3_K
      {QSP_DTYPE_Q4_1, 1000, 96, 37},   {QSP_DTYPE_Q4_1, 1000, 1024, 37},  {QSP_DTYPE_Q5_0, 1000, 96, 37},
      {QSP_DTYPE_Q5_0, 1000, 1024, 37}, {QSP_DTYPE_Q5_1, 1000, 96, 37},    {QSP_DTYPE_Q5_1, 1000, 1024, 37},
      {QSP_DTYPE_Q5_0, 151936, 1024, 513},
      {QSP_DTYPE_Q2_K, 1000, 256, 37},  {QSP_DTYPE_Q2_K, 1000, 1024, 37},  {QSP_DTYPE_Q3_K, 1000, 256, 37},
      {QSP_DTYPE_Q3_K, 1000, 1024, 37}, {QSP_DTYPE_Q3_K, 32000, 1024, 513},
  };
  uint64_t seed = 300;
  for (const EmbedCase& c : cases) {
    INFO("embed " << qsp_dtype_name(c.dtype) << " table " << c.rows << "x" << c.cols << ", M " << c.M);
    OpWeight w(c.dtype, c.rows, c.cols, seed++);
    Rng rng(seed++);
    std::vector<int32_t> tok(size_t(c.M));
    for (auto& t : tok) t = int32_t(rng.below(c.rows));
    tok[0] = 0;
    tok[1] = int32_t(c.rows - 1);
    tok[2] = -1;                // out of range: a zero row
    tok[3] = int32_t(c.rows);   // out of range: a zero row
    DevBuf dtok(tok.size() * 4), out(size_t(c.M) * c.cols * 4);
    dtok.upload(tok);
    out.poison();
    CUDA_REQUIRE(qsp::kern::embed(w.dw, dtok.as<int32_t>(), c.M, out.as<float>(), nullptr));
    CUDA_REQUIRE(cudaGetLastError());
    CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::vector<float> got = out.download<float>();

    std::vector<int32_t> in_range;
    for (int32_t t : tok)
      if (t >= 0 && t < c.rows) in_range.push_back(t);
    std::vector<float> want(in_range.size() * size_t(c.cols));
    qsp::cpu::embed(w.cpu(), in_range.data(), int64_t(in_range.size()), want.data(), cpu_pool());
    int64_t mismatches = 0;
    size_t j = 0;
    for (int m = 0; m < c.M; ++m) {
      const bool ok = tok[m] >= 0 && tok[m] < c.rows;
      for (int64_t i = 0; i < c.cols; ++i) {
        const float e = ok ? want[j * c.cols + i] : 0.0f;
        mismatches += !(got[size_t(m) * c.cols + i] == e);
      }
      j += ok;
    }
    CHECK(mismatches == 0);
  }
  // Rejected without a launch.
  OpWeight w(QSP_DTYPE_Q8_0, 16, 64, 1);
  DevBuf dtok(4), out(64 * 4);
  CHECK(qsp::kern::embed(w.dw, nullptr, 1, out.as<float>(), nullptr) == cudaErrorInvalidValue);
  CHECK(qsp::kern::embed(w.dw, dtok.as<int32_t>(), -1, out.as<float>(), nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(qsp::kern::embed(w.dw, dtok.as<int32_t>(), 0, out.as<float>(), nullptr));
  // A K-quant table whose rows are not whole 256-weight super-blocks.
  OpWeight wk(QSP_DTYPE_Q4_K, 16, 256, 2);
  qsp::kern::DWeight bad = wk.dw;
  bad.cols = 64;
  CHECK(qsp::kern::embed(bad, dtok.as<int32_t>(), 1, out.as<float>(), nullptr) == cudaErrorInvalidValue);
}
