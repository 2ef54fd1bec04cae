// The LM head: the GEMV over the whole vocabulary (151936 x 1024, Qwen3) for
// the last token(s), and the CUDA backend's tail as a chain (RMSNorm of the
// last token -> fp16 -> GEMM M = 1 -> fp32 logits -> argmax) against the
// CPU backend's (cpu::rmsnorm -> cpu::matmul -> cpu::argmax).
// Tolerances: the GEMM's (gemm_check.h); the chain's logits rel L2 <= 2e-3
// (fp16 normed input: ~5e-4 of rounding, plus the GEMM's error), and the GPU's
// greedy token is the CPU's unless their top two are within the logits' max
// error (a tie within noise is not a wrong answer).
#include "ops/gemm_check.h"

using namespace qsp_test;

namespace {

struct LmHeadCase {
  int32_t dtype;
  int64_t vocab, hidden;
  std::vector<int> Ms;
};

}  // namespace

namespace {
// The LM head's GEMV on the vocabulary shapes. Two test cases (legacy
// formats, K-quants) so that the parallel GPU runner spreads the host-side
// quantizing, which is the cost.
void lm_head_gemv(const std::vector<LmHeadCase>& cases, uint64_t seed) {
  for (const LmHeadCase& c : cases) {
    OpWeight w(c.dtype, c.vocab, c.hidden, seed++);
    for (int M : c.Ms) {
      OpActs x(M, int(c.hidden), int(c.hidden), seed++);
      const std::vector<int> rows = sample_rows(M);
      const std::vector<float> ref = cpu_matmul(w, x, rows);
      check_gemm(w, nullptr, x, Epilogue::kStoreF32, int(c.vocab), rows, ref, nullptr, seed++);
    }
  }
}
}  // namespace

TEST_CASE("op lm_head: GEMV over the vocabulary (151936 x 1024), legacy formats", "[gpu][gemm][lm_head]") {
  QSP_REQUIRE_GPU();
  lm_head_gemv({{QSP_DTYPE_Q4_0, 151936, 1024, {1, 3}},
                {QSP_DTYPE_Q8_0, 151936, 1024, {1, 3}},
                {QSP_DTYPE_F16, 151936, 1024, {1, 3}},
                {QSP_DTYPE_Q4_1, 151936, 1024, {1, 3}},
                {QSP_DTYPE_Q5_0, 151936, 1024, {1, 3}},
                {QSP_DTYPE_Q5_1, 151936, 1024, {1, 3}}},
               200);
}

TEST_CASE("op lm_head: GEMV over the vocabulary (151936 x 1024), Q6_K and Q4_K",
          "[gpu][gemm][lm_head][kquant]") {
  QSP_REQUIRE_GPU();
  lm_head_gemv({{QSP_DTYPE_Q6_K, 151936, 1024, {1, 3}},  // Q4_K_M / Q5_K_M files: the LM head is Q6_K
                {QSP_DTYPE_Q4_K, 151936, 1024, {1, 3}}},
               260);
}

// Smaller vocabularies: the K-quant reference quantizers are the cost.
TEST_CASE("op lm_head: GEMV over the vocabulary (32000 x 1024), Q5_K, Q2_K and Q3_K",
          "[gpu][gemm][lm_head][kquant]") {
  QSP_REQUIRE_GPU();
  lm_head_gemv({{QSP_DTYPE_Q5_K, 32000, 1024, {1, 3}},
                {QSP_DTYPE_Q2_K, 32000, 1024, {1, 3}},
                {QSP_DTYPE_Q3_K, 32000, 1024, {1, 3}}},
               300);
}

TEST_CASE("op lm_head: final norm, logits and greedy token of the last token", "[gpu][gemm][lm_head]") {
  QSP_REQUIRE_GPU();
  const LmHeadCase cases[] = {
      {QSP_DTYPE_Q8_0, 151936, 1024, {1}},  // Qwen3-0.6B (tied Q8_0 embedding)
      {QSP_DTYPE_Q4_0, 151936, 4096, {1}},  // Qwen3-8B
      {QSP_DTYPE_Q6_K, 151936, 1024, {1}},  // Q4_K_M / Q5_K_M / Q6_K files: the LM head is Q6_K
      {QSP_DTYPE_Q3_K, 32000, 4096, {1}},  // Q3_K_* files (Llama width)
      {QSP_DTYPE_Q5_0, 151936, 1024, {1}},
  };
  uint64_t seed = 250;
  for (const LmHeadCase& c : cases) {
    INFO("lm head " << qsp_dtype_name(c.dtype) << " " << c.vocab << "x" << c.hidden);
    const int H = int(c.hidden);
    OpWeight w(c.dtype, c.vocab, c.hidden, seed++);
    Rng rng(seed++);
    const std::vector<float> x = randn(size_t(H), 2.0f, rng), nw = randn(size_t(H), 0.2f, rng, 1.0f);
    DevBuf dx(x.size() * 4), dw(nw.size() * 4), dxn(size_t(H) * 2), dlog(size_t(c.vocab) * 4), dtok(4);
    dx.upload(x);
    dw.upload(nw);
    dlog.poison();
    dtok.poison();
    const float eps = 1e-6f;
    CUDA_REQUIRE(qsp::kern::rmsnorm_f16(dx.as<float>(), H, dw.as<float>(), dxn.as<__half>(), 1, H, eps, nullptr));
    GemmArgs a;
    a.x = dxn.as<const __half>();
    a.ldx = H;
    a.M = 1;
    a.w = w.dw;
    a.ep = Epilogue::kStoreF32;
    a.out_f = dlog.as<float>();
    a.ldo = int(c.vocab);
    CUDA_REQUIRE(qsp::kern::gemm(a, nullptr));
    CUDA_REQUIRE(qsp::kern::argmax(dlog.as<float>(), int32_t(c.vocab), dtok.as<int32_t>(), nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::vector<float> got = dlog.download<float>();
    const int32_t tok = dtok.download<int32_t>()[0];

    std::vector<float> xn(static_cast<size_t>(H)), want(static_cast<size_t>(c.vocab));
    qsp::cpu::rmsnorm(x.data(), nw.data(), xn.data(), 1, H, eps, cpu_pool());
    qsp::cpu::matmul(w.cpu(), xn.data(), 1, want.data(), c.vocab, cpu_pool());
    const int32_t want_tok = qsp::cpu::argmax(want.data(), c.vocab);

    RelL2 err;
    for (size_t i = 0; i < want.size(); ++i) err.add(got[i], want[i]);
    INFO("logits rel L2 " << err.value() << ", max abs " << err.max_abs << "; greedy gpu " << tok << " cpu "
                          << want_tok);
    CHECK(err.value() <= 2e-3);
    CHECK(tok == qsp::cpu::argmax(got.data(), c.vocab));  // the device argmax of the device logits
    if (tok != want_tok) CHECK(double(want[size_t(want_tok)]) - double(want[size_t(tok)]) <= 2 * err.max_abs);
  }
}
