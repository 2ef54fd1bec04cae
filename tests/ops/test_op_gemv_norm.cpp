// The GEMV with the RMSNorm fused into its activation load (kern::GemmArgs::
// norm_x; the CUDA backend's QSP_FUSE_NORM decode path) against the CPU
// backend's two ops it replaces: cpu::rmsnorm, its output rounded to fp16 as
// rmsnorm_f16 stores it, then cpu::matmul (and swiglu). Every tiled format and
// fp16 weights, M = 1 .. 16 around the m8 tiles, padded rows, the epilogues
// it is built for (kStoreF32: Q | K | V and the LM head; kSwiGLU: gate / up),
// real Qwen3 shapes; the output's padding must keep its poison. Tolerance as
// the GEMM's: rel L2 <= 2e-3. A case is one line.
#include <cmath>
#include <cstring>

#include "ops/gemm_check.h"
#include "ops/harness.h"

using namespace qsp_test;
using qsp::kern::Epilogue;
using qsp::kern::GemmArgs;
using qsp::kern::GemmPath;

namespace {

struct NormGemvCase {
  int32_t dt;
  int64_t N, K;
  std::vector<int> Ms;
};

// fp32 activation rows [M][ldx] (a residual stream: sd 2 and an outlier per
// row), the norm's weights, and the CPU ops' result on rows 0..M-1.
struct NormInput {
  int M, K, ldx;
  std::vector<float> x, w;
  DevBuf dx, dw;
  NormInput(int m, int k, int ld, Rng& rng)
      : M(m), K(k), ldx(ld), x(randn(size_t(m) * ld, 2.0f, rng)), w(randn(size_t(k), 0.1f, rng, 1.0f)),
        dx(x.size() * 4), dw(w.size() * 4) {
    for (int r = 0; r < M; ++r) {
      x[size_t(r) * ldx + (r * 37) % K] = 40.0f;
      for (int i = K; i < ldx; ++i) x[size_t(r) * ldx + i] = NAN;  // padding: a read past K fails
    }
    dx.upload(x);
    dw.upload(w);
  }
  // cpu::rmsnorm of the rows, rounded to fp16 and widened: the GEMV's input.
  std::vector<float> normed(float eps) const {
    std::vector<float> xs(size_t(M) * K), y(xs.size());
    for (int r = 0; r < M; ++r)
      std::copy(x.begin() + size_t(r) * ldx, x.begin() + size_t(r) * ldx + K, xs.begin() + size_t(r) * K);
    qsp::cpu::rmsnorm(xs.data(), w.data(), y.data(), M, K, eps, cpu_pool());
    return widen_f16(to_f16(y));
  }
};

void check_norm_gemv(const OpWeight& w, const OpWeight& w2, int M, bool pad, uint64_t seed) {
  Rng rng(seed);
  const int K = int(w.K), ldx = K + (pad ? 4 : 0);
  const float eps = 1e-6f;
  NormInput in(M, K, ldx, rng);
  const std::vector<float> xn = in.normed(eps);
  std::vector<float> ref(size_t(M) * size_t(w.N)), ref2(ref.size());
  qsp::cpu::matmul(w.cpu(), xn.data(), M, ref.data(), w.N, cpu_pool());
  qsp::cpu::matmul(w2.cpu(), xn.data(), M, ref2.data(), w.N, cpu_pool());
  for (Epilogue ep : {Epilogue::kStoreF32, Epilogue::kSwiGLU}) {
    const bool dual = ep == Epilogue::kSwiGLU;
    const int ldo = int(w.N) + (pad ? 3 : 0);
    INFO(qsp_dtype_name(w.dtype) << " " << w.N << "x" << K << " M=" << M << " ldx=" << ldx << " ldo=" << ldo
                                 << (dual ? " SwiGLU" : " StoreF32"));
    DevBuf out(size_t(M) * size_t(ldo) * (dual ? 2 : 4));
    out.poison();
    GemmArgs a;
    a.ldx = ldx;
    a.M = M;
    a.w = w.dw;
    if (dual) a.w2 = w2.dw;
    a.ep = ep;
    a.out_h = dual ? out.as<__half>() : nullptr;
    a.out_f = dual ? nullptr : out.as<float>();
    a.ldo = ldo;
    a.norm_x = in.dx.as<float>();
    a.norm_w = in.dw.as<float>();
    a.norm_eps = eps;
    CUDA_REQUIRE(qsp::kern::gemm(a, nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    RelL2 err;
    size_t pad_touched = 0;
    if (dual) {
      const std::vector<uint16_t> y = out.download<uint16_t>();
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < ldo; ++n) {
          const uint16_t v = y[size_t(m) * ldo + n];
          if (n >= w.N) {
            pad_touched += v != kPoison16;
            continue;
          }
          const float g = ref[size_t(m) * w.N + n], u = ref2[size_t(m) * w.N + n];
          err.add(qsp::fp16_to_fp32(v), g / (1.0f + std::exp(-g)) * u);
        }
    } else {
      const std::vector<uint32_t> y = out.download<uint32_t>();
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < ldo; ++n) {
          const uint32_t v = y[size_t(m) * ldo + n];
          if (n >= w.N) {
            pad_touched += v != 0xffffffffu;
            continue;
          }
          float f;
          std::memcpy(&f, &v, 4);
          err.add(f, ref[size_t(m) * w.N + n]);
        }
    }
    INFO("rel L2 " << err.value());
    CHECK(err.value() <= 2e-3);
    CHECK(pad_touched == 0);
  }
}

}  // namespace

TEST_CASE("op gemv: the RMSNorm fused into the activation load, every format", "[gpu][gemm][gemv]") {
  QSP_REQUIRE_GPU();
  const std::vector<int> ms = {1, 3, 8, 9, 16};
  const NormGemvCase cases[] = {
      {QSP_DTYPE_Q4_0, 4096, 4096, ms},    // Qwen3-8B q / o
      {QSP_DTYPE_Q4_0, 12288, 4096, {1}},  // Qwen3-8B gate / up
      {QSP_DTYPE_Q8_0, 3072, 1024, ms},    // Qwen3-0.6B gate / up
      {QSP_DTYPE_F16, 1000, 160, ms},      // K % 64 == 32: the last chunk half; N % 16 != 0
      {QSP_DTYPE_Q4_1, 40, 96, {1, 16}},   {QSP_DTYPE_Q5_0, 1000, 352, {2, 9}},
      {QSP_DTYPE_Q5_1, 2048, 1024, {1}},   {QSP_DTYPE_Q2_K, 1000, 768, {1, 5}},
      {QSP_DTYPE_Q3_K, 2048, 1024, {4}},   {QSP_DTYPE_Q4_K, 4096, 4096, {1, 16}},
      {QSP_DTYPE_Q5_K, 2048, 1280, {3}},   {QSP_DTYPE_Q6_K, 8000, 1024, {1}},  // an LM head's rows
  };
  uint64_t seed = 4100;
  for (const NormGemvCase& c : cases) {
    OpWeight w(c.dt, c.N, c.K, seed++), w2(c.dt, c.N, c.K, seed++);
    bool pad = false;
    for (int M : c.Ms) check_norm_gemv(w, w2, M, pad = !pad, seed++);
  }
}

TEST_CASE("op gemv: the fused RMSNorm refuses what it does not do", "[gpu][gemm][gemv]") {
  QSP_REQUIRE_GPU();
  OpWeight w(QSP_DTYPE_Q4_0, 128, 256, 4200);
  Rng rng(4201);
  NormInput in(17, 256, 256, rng);
  DevBuf out(size_t(17) * 128 * 4);
  GemmArgs good;
  good.ldx = 256;
  good.M = 16;
  good.w = w.dw;
  good.ep = Epilogue::kStoreF32;
  good.out_f = out.as<float>();
  good.ldo = 128;
  good.norm_x = in.dx.as<float>();
  good.norm_w = in.dw.as<float>();
  good.norm_eps = 1e-6f;
  CUDA_REQUIRE(qsp::kern::gemm(good, nullptr));
  std::vector<GemmArgs> bad(8, good);
  bad[0].M = 17;                                // not a GEMV
  bad[1].ep = Epilogue::kAddF32;                // not built with the norm
  bad[2].ep = Epilogue::kStoreF16;
  bad[2].out_h = out.as<__half>();
  bad[3].path = GemmPath::kGemvBulk;            // the register GEMV's alone
  bad[4].norm_w = nullptr;
  bad[5].norm_x = in.dx.as<float>() + 1;        // rows not 16-byte aligned
  bad[6].ldx = 258;                             // row stride not a multiple of 4
  bad[7].norm_eps = -1.0f;
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("bad case " << i);
    CHECK(qsp::kern::gemm(bad[i], nullptr) == cudaErrorInvalidValue);
  }
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}
