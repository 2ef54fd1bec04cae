// The quantized GEMM / GEMV (kernels/gemm.cu) and the embedding lookup
// (kernels/embed.cu) against an fp64 CPU reference computed from the same
// quantized weights, dequantized exactly (GGUF semantics, no fp16 rounding
// of d * q). Random data of realistic scale: weights ~ N(0, 0.02..0.05) per
// row, quantized with GGML's reference quantizers; activations ~ N(0, 1) in
// fp16. Outputs are poisoned with NaN bytes before each run, so an element a
// kernel forgets fails; the row-stride gap (ldo > N) must stay untouched;
// activation padding (ldx > K) holds NaN, so a read past K fails too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/quant.h"
#include "gpu_util.h"
#include "kernels/kernels.h"

using qsp::kern::DWeight;
using qsp::kern::Epilogue;
using qsp::kern::GemmArgs;
using qsp::kern::GemmPath;
using qsp::kern::WFormat;

namespace {

#define CUDA_REQUIRE(expr)                                         \
  do {                                                             \
    const cudaError_t e_ = (expr);                                 \
    INFO(#expr << " -> " << cudaGetErrorString(e_));               \
    REQUIRE(e_ == cudaSuccess);                                    \
  } while (0)

// xorshift64*; normal() sums four uniforms (Irwin-Hall, rescaled to unit
// variance): fast enough for the 155M weights of an LM head.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }
  float normal() { return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f; }
};

template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) { CUDA_REQUIRE(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void upload(const std::vector<T>& h) {
    REQUIRE(h.size() == n);
    CUDA_REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    CUDA_REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// A weight matrix in its GGUF form (the reference reads this) and uploaded.
struct Weight {
  int32_t dtype = QSP_DTYPE_Q4_0;
  int64_t N = 0, K = 0;
  std::vector<uint8_t> gguf;
  uint64_t row_bytes = 0;
  DevBuf<uint8_t>* dev = nullptr;
  DWeight dw;

  Weight(int32_t dt, int64_t n, int64_t k, uint64_t seed) : dtype(dt), N(n), K(k) {
    row_bytes = qsp::dtype_row_bytes(dtype, uint64_t(K));
    REQUIRE(row_bytes > 0);
    gguf.resize(size_t(N) * row_bytes);
    Rng rng(seed);
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t r = 0; r < N; ++r) {
      const float sigma = 0.02f + 0.03f * rng.uniform();
      for (auto& v : row) v = sigma * rng.normal();
      uint8_t* dst = gguf.data() + size_t(r) * row_bytes;
      switch (dtype) {
        case QSP_DTYPE_Q4_0: qsp::quantize_row_q4_0(row.data(), reinterpret_cast<qsp::BlockQ4_0*>(dst), K); break;
        case QSP_DTYPE_Q8_0: qsp::quantize_row_q8_0(row.data(), reinterpret_cast<qsp::BlockQ8_0*>(dst), K); break;
        case QSP_DTYPE_F16:
          for (int64_t i = 0; i < K; ++i) reinterpret_cast<uint16_t*>(dst)[i] = qsp::fp32_to_fp16(row[i]);
          break;
        case QSP_DTYPE_BF16:
          for (int64_t i = 0; i < K; ++i) reinterpret_cast<uint16_t*>(dst)[i] = qsp::fp32_to_bf16(row[i]);
          break;
        default: std::memcpy(dst, row.data(), size_t(K) * 4); break;
      }
    }
    const WFormat f = qsp::kern::format_for(dtype);
    const char* why = nullptr;
    const bool supported = qsp::kern::gemm_supported(f, N, K, &why);
    INFO("shape " << N << "x" << K << ": " << (why ? why : ""));
    REQUIRE(supported);
    std::vector<uint8_t> host(qsp::kern::dweight_bytes(f, N, K));
    qsp::kern::repack_weight(dtype, gguf.data(), N, K, host.data());
    dev = new DevBuf<uint8_t>(host.size());
    dev->upload(host);
    dw.data = dev->p;
    dw.fmt = f;
    dw.rows = int32_t(N);
    dw.cols = int32_t(K);
  }
  ~Weight() { delete dev; }
  Weight(const Weight&) = delete;
  Weight& operator=(const Weight&) = delete;

  // Row r as the kernels see it: exact GGUF dequantization; fp16 for sources
  // that the upload converts (BF16, F32).
  void row(int64_t r, float* out) const {
    qsp::dequantize_row(dtype, gguf.data() + size_t(r) * row_bytes, out, uint64_t(K));
    if (dtype == QSP_DTYPE_BF16 || dtype == QSP_DTYPE_F32) {
      for (int64_t i = 0; i < K; ++i) out[i] = qsp::fp16_to_fp32(qsp::fp32_to_fp16(out[i]));
    }
  }
};

// Activations [M][ldx] fp16 ~ N(0, 1); the padding columns hold NaN.
struct Acts {
  int M, K, ldx;
  std::vector<uint16_t> h;
  DevBuf<uint16_t> d;
  Acts(int m, int k, int ld, uint64_t seed) : M(m), K(k), ldx(ld), h(size_t(m) * ld, 0x7fffu), d(size_t(m) * ld) {
    Rng rng(seed);
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < K; ++i) h[size_t(r) * ldx + i] = qsp::fp32_to_fp16(rng.normal());
    d.upload(h);
  }
  float at(int r, int i) const { return qsp::fp16_to_fp32(h[size_t(r) * ldx + i]); }
};

// The rows the reference is computed for: all of a small M; else first,
// last and a spread whose residues mod 128 / 64 / 16 differ (tile positions).
std::vector<int> sample_rows(int M) {
  std::vector<int> r;
  if (M <= 16) {
    for (int i = 0; i < M; ++i) r.push_back(i);
    return r;
  }
  r.push_back(0);
  r.push_back(M - 1);
  for (int i = 0; i < 14; ++i) r.push_back((i * 131 + 7) % M);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// ref[j][n] = sum_k x[rows[j]][k] * W[n][k] in fp64.
std::vector<double> reference(const Weight& w, const Acts& x, const std::vector<int>& rows) {
  const int64_t N = w.N, K = w.K;
  std::vector<double> ref(rows.size() * size_t(N));
  std::vector<float> wr(static_cast<size_t>(K));
  std::vector<float> xs(rows.size() * size_t(K));
  for (size_t j = 0; j < rows.size(); ++j)
    for (int64_t i = 0; i < K; ++i) xs[j * K + i] = x.at(rows[j], int(i));
  for (int64_t n = 0; n < N; ++n) {
    w.row(n, wr.data());
    for (size_t j = 0; j < rows.size(); ++j) {
      const float* xr = xs.data() + j * K;
      // Four partial sums (K % 32 == 0): the same fp64 result to ~1e-16, 4x the ILP.
      double acc[4] = {0.0, 0.0, 0.0, 0.0};
      for (int64_t i = 0; i < K; i += 4)
        for (int u = 0; u < 4; ++u) acc[u] += double(xr[i + u]) * double(wr[i + u]);
      ref[j * N + n] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
  }
  return ref;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

const char* ep_name(Epilogue ep) {
  switch (ep) {
    case Epilogue::kStoreF16: return "StoreF16";
    case Epilogue::kStoreF32: return "StoreF32";
    case Epilogue::kAddF32: return "AddF32";
    case Epilogue::kSwiGLU: return "SwiGLU";
  }
  return "?";
}

// Runs one gemm and checks every element: finite everywhere, the gap
// untouched, and against the reference on the sampled rows:
//   ||out - ref|| / ||ref|| <= 2e-3 and |out - ref| <= 1e-2 rms(ref) + 2e-3 |ref|.
void check_gemm(const Weight& w, const Weight* w2, const Acts& x, Epilogue ep, int ldo, const std::vector<int>& rows,
                const std::vector<double>& ref, const std::vector<double>* ref2, uint64_t seed,
                GemmPath path = GemmPath::kAuto, const Weight* cat0 = nullptr, const Weight* cat1 = nullptr) {
  const int M = x.M;
  const int64_t N = w.N + (cat0 ? cat0->N : 0) + (cat1 ? cat1->N : 0);
  const bool half_out = ep == Epilogue::kStoreF16 || ep == Epilogue::kSwiGLU;
  const size_t esz = half_out ? 2 : 4;
  const size_t count = size_t(M) * size_t(ldo);
  INFO("gemm " << N << "x" << w.K << (cat0 ? " (row groups)" : "") << " dtype " << w.dtype << " M=" << M << " ldx=" << x.ldx << " ldo=" << ldo << " "
               << ep_name(ep) << " path " << int(path));

  // Initial output bytes: NaN poison, or random residuals for kAddF32.
  std::vector<uint8_t> init(count * esz, 0xff);
  if (ep == Epilogue::kAddF32) {
    Rng rng(seed);
    float* f = reinterpret_cast<float*>(init.data());
    for (size_t i = 0; i < count; ++i) f[i] = rng.normal();
  }
  DevBuf<uint8_t> out(init.size());
  out.upload(init);

  GemmArgs a;
  a.x = reinterpret_cast<const __half*>(x.d.p);
  a.ldx = x.ldx;
  a.M = M;
  a.w = w.dw;
  if (w2) a.w2 = w2->dw;
  a.ep = ep;
  a.out_h = half_out ? reinterpret_cast<__half*>(out.p) : nullptr;
  a.out_f = half_out ? nullptr : reinterpret_cast<float*>(out.p);
  a.ldo = ldo;
  a.path = path;
  if (cat0) a.wcat[0] = cat0->dw;
  if (cat1) a.wcat[1] = cat1->dw;
  CUDA_REQUIRE(qsp::kern::gemm(a, nullptr));
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = out.download();

  auto value = [&](const std::vector<uint8_t>& b, size_t i) -> double {
    if (half_out) {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      return qsp::fp16_to_fp32(h);
    }
    float f;
    std::memcpy(&f, b.data() + 4 * i, 4);
    return f;
  };

  // Every element written and finite; the gap untouched.
  int64_t bad = 0, gap_bad = 0;
  for (int m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) bad += !std::isfinite(value(got, size_t(m) * ldo + n));
    const size_t g0 = (size_t(m) * ldo + N) * esz, g1 = (size_t(m) + 1) * ldo * esz;
    gap_bad += std::memcmp(got.data() + g0, init.data() + g0, g1 - g0) != 0;
  }
  CHECK(bad == 0);
  CHECK(gap_bad == 0);

  // Numbers on the sampled rows.
  double se = 0.0, sr = 0.0;
  std::vector<double> want(rows.size() * size_t(N));
  for (size_t j = 0; j < rows.size(); ++j)
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = j * N + n;
      double e = ref[i];
      if (ep == Epilogue::kSwiGLU) e = silu(ref[i]) * (*ref2)[i];
      want[i] = e;
      sr += e * e;
    }
  const double rms = std::sqrt(sr / double(want.size()));
  int64_t over = 0;
  double worst = 0.0;
  for (size_t j = 0; j < rows.size(); ++j)
    for (int64_t n = 0; n < N; ++n) {
      const size_t o = size_t(rows[j]) * ldo + n;
      double v = value(got, o);
      if (ep == Epilogue::kAddF32) v -= value(init, o);
      const double e = want[j * N + n], d = std::fabs(v - e);
      se += (v - e) * (v - e);
      if (!(d <= 1e-2 * rms + 2e-3 * std::fabs(e))) ++over;
      if (!(d <= worst)) worst = d;
    }
  const double rel = std::sqrt(se / std::max(sr, 1e-300));
  INFO("rel L2 " << rel << ", max abs err " << worst << ", rms(ref) " << rms << ", over tolerance " << over);
  CHECK(rms > 0.0);
  CHECK(rel <= 2e-3);
  CHECK(over == 0);
}

const Epilogue kAllEps[] = {Epilogue::kStoreF16, Epilogue::kStoreF32, Epilogue::kAddF32, Epilogue::kSwiGLU};

// All epilogues for each M on one (w, w2) pair; ldx and ldo vary per case:
// tight, padded (aligned) and odd (scalar-store path).
void sweep(const Weight& w, const Weight& w2, const std::vector<int>& Ms, uint64_t seed,
           GemmPath path = GemmPath::kAuto) {
  int variant = 0, mi = 0;
  for (int M : Ms) {
    const int ldx = int(w.K) + (mi++ % 2 ? 8 : 0);
    Acts x(M, int(w.K), ldx, seed + 1000 + M);
    const std::vector<int> rows = sample_rows(M);
    const std::vector<double> ref = reference(w, x, rows);
    const std::vector<double> ref2 = reference(w2, x, rows);
    for (Epilogue ep : kAllEps) {
      const int pad = variant % 3 == 0 ? 0 : variant % 3 == 1 ? 8 : 1;
      ++variant;
      check_gemm(w, &w2, x, ep, int(w.N) + pad, rows, ref, &ref2, seed + variant, path);
    }
  }
}

// A kStoreF32 call forced onto the wgmma path: w is 128 x 64, x has 64 columns.
GemmArgs forced_wgmma(const Weight& w, const Acts& x, float* out) {
  GemmArgs a;
  a.x = reinterpret_cast<const __half*>(x.d.p);
  a.ldx = 64;
  a.M = x.M;
  a.w = w.dw;
  a.ep = Epilogue::kStoreF32;
  a.out_f = out;
  a.ldo = 128;
  a.path = GemmPath::kWgmma;
  return a;
}

// Whether the wgmma (sm_90a) path runs here: probe with a tiny forced call.
bool wgmma_runs() {
  Weight w(QSP_DTYPE_Q4_0, 128, 64, 77);
  Acts x(32, 64, 64, 78);
  DevBuf<float> out(size_t(32) * 128);
  const cudaError_t e = qsp::kern::gemm(forced_wgmma(w, x, out.p), nullptr);
  REQUIRE((e == cudaSuccess || e == cudaErrorNotSupported));
  CUDA_REQUIRE(cudaDeviceSynchronize());
  return e == cudaSuccess;
}

}  // namespace

TEST_CASE("gemm: Q4_0 / Q8_0 / F16, all epilogues, small and medium shapes", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  const std::vector<int> Ms = {1, 2, 3, 7, 17, 100, 513, 2048};
  struct Shape {
    int64_t N, K;
  };
  // Real layer shapes plus tile-edge ones: N not a multiple of 16 / 128 /
  // 256, K a multiple of 32 but not of 64.
  const Shape shapes[] = {{1024, 1024}, {3072, 1024}, {1024, 3072}, {96, 256}, {40, 96}, {1000, 160}};
  const int32_t dtypes[] = {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_F16};
  uint64_t seed = 1;
  for (int32_t dt : dtypes) {
    for (const Shape& s : shapes) {
      // F16 weights also arrive as BF16 / F32 (converted at upload).
      int32_t src = dt;
      if (dt == QSP_DTYPE_F16 && s.N == 96) src = QSP_DTYPE_BF16;
      if (dt == QSP_DTYPE_F16 && s.N == 40) src = QSP_DTYPE_F32;
      Weight w(src, s.N, s.K, seed++), w2(src, s.N, s.K, seed++);
      sweep(w, w2, Ms, seed++);
    }
  }
}

TEST_CASE("gemm: large prefill shapes", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 100;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0}) {
    {
      Weight w(dt, 4096, 4096, seed++), w2(dt, 4096, 4096, seed++);
      sweep(w, w2, {1, 16, 2048}, seed++);
    }
    {
      Weight w(dt, 12288, 4096, seed++), w2(dt, 12288, 4096, seed++);
      sweep(w, w2, {7, 513}, seed++);
    }
  }
  Weight w(QSP_DTYPE_F16, 4096, 4096, seed++), w2(QSP_DTYPE_F16, 4096, 4096, seed++);
  sweep(w, w2, {1, 2048}, seed++);
}

// Each kernel family forced on its own (kAuto above mixes them by shape):
// wgmma (sm_90a only) and mma.sync (what sm_80 / sm_89 run) on the shapes
// and token counts where both can run, including partial tiles in every
// dimension and K ending half way through a 64-column chunk.
TEST_CASE("gemm: wgmma and mma.sync paths, each forced", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  int dev = 0, major = 0;
  CUDA_REQUIRE(cudaGetDevice(&dev));
  CUDA_REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  const bool wg = wgmma_runs();
  if (major == 9) {
    CHECK(wg);  // a Hopper GPU must get the Hopper kernel
  } else {
    std::printf("SKIPPED: wgmma path (needs sm_90a; this device is sm_%d*), mma.sync path still tested\n", major);
  }
  struct Shape {
    int64_t N, K;
  };
  const Shape shapes[] = {{4096, 4096}, {1000, 160}, {96, 256}, {40, 96}, {3072, 1024}};
  uint64_t seed = 500;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0}) {
    for (const Shape& s : shapes) {
      Weight w(dt, s.N, s.K, seed++), w2(dt, s.N, s.K, seed++);
      const std::vector<int> Ms = s.N == 4096 ? std::vector<int>{17, 300, 2048} : std::vector<int>{17, 100, 513};
      if (wg) sweep(w, w2, Ms, seed++, GemmPath::kWgmma);
      sweep(w, w2, Ms, seed++, GemmPath::kMma);
    }
  }
  // What the wgmma path refuses: fp16 weights and M <= 16 (the GEMV's).
  Weight wf(QSP_DTYPE_F16, 128, 64, 9);
  Acts x(32, 64, 64, 10);
  DevBuf<float> out(size_t(32) * 128);
  GemmArgs a = forced_wgmma(wf, x, out.p);
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorNotSupported);
  Weight wq(QSP_DTYPE_Q4_0, 128, 64, 11);
  a.w = wq.dw;
  a.M = 16;
  CHECK(qsp::kern::gemm(a, nullptr) == cudaErrorNotSupported);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

// Small enough for compute-sanitizer's racecheck: the GEMV (M <= 8 and
// <= 16), mma.sync (cluster split-K where the plan takes it) and wgmma
// (both token tiles), every epilogue, Q4_0 / Q8_0 / F16.
TEST_CASE("gemm: every kernel path on small shapes", "[gpu][gemm][sanitize]") {
  QSP_REQUIRE_GPU();
  const bool wg = wgmma_runs();
  uint64_t seed = 700;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_F16}) {
    Weight w(dt, 256, 256, seed++), w2(dt, 256, 256, seed++);
    sweep(w, w2, {1, 9, 40, 300}, seed++);
    if (dt == QSP_DTYPE_F16) continue;
    sweep(w, w2, {40, 300}, seed++, GemmPath::kMma);
    if (wg) sweep(w, w2, {40, 300}, seed++, GemmPath::kWgmma);
  }
}

// Q, K and V as one launch (GemmArgs::wcat): the outputs are the three
// products side by side, on every kernel family.
TEST_CASE("gemm: row groups (Q | K | V in one launch)", "[gpu][gemm][wgmma]") {
  QSP_REQUIRE_GPU();
  struct Case {
    int64_t q, k, v, K;
  };
  // Qwen3-8B and -0.6B projections, and a last group that ends mid-tile.
  const Case cases[] = {{4096, 1024, 1024, 4096}, {2048, 1024, 1024, 1024}, {64, 32, 40, 160}};
  uint64_t seed = 900;
  const bool wg = wgmma_runs();
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0}) {
    for (const Case& c : cases) {
      Weight wq(dt, c.q, c.K, seed++), wk(dt, c.k, c.K, seed++), wv(dt, c.v, c.K, seed++);
      const int64_t N = c.q + c.k + c.v;
      for (int M : {1, 7, 100, 2048}) {
        Acts x(M, int(c.K), int(c.K), seed++);
        const std::vector<int> rows = sample_rows(M);
        const std::vector<double> rq = reference(wq, x, rows), rk = reference(wk, x, rows), rv = reference(wv, x, rows);
        std::vector<double> ref(rows.size() * size_t(N));
        for (size_t j = 0; j < rows.size(); ++j) {
          std::copy(rq.begin() + j * c.q, rq.begin() + (j + 1) * c.q, ref.begin() + j * N);
          std::copy(rk.begin() + j * c.k, rk.begin() + (j + 1) * c.k, ref.begin() + j * N + c.q);
          std::copy(rv.begin() + j * c.v, rv.begin() + (j + 1) * c.v, ref.begin() + j * N + c.q + c.k);
        }
        std::vector<GemmPath> paths = {GemmPath::kAuto};
        if (M > 16) paths.push_back(GemmPath::kMma);
        if (M > 16 && wg) paths.push_back(GemmPath::kWgmma);
        for (GemmPath p : paths) {
          check_gemm(wq, nullptr, x, Epilogue::kStoreF32, int(N) + 4, rows, ref, nullptr, seed++, p, &wk, &wv);
          check_gemm(wq, nullptr, x, Epilogue::kAddF32, int(N), rows, ref, nullptr, seed++, p, &wk, &wv);
        }
      }
    }
  }
  // A group whose first member is not a whole number of tiles is refused.
  Weight a(QSP_DTYPE_Q4_0, 40, 64, 1), b(QSP_DTYPE_Q4_0, 32, 64, 2), f(QSP_DTYPE_F16, 32, 64, 3);
  Acts x(4, 64, 64, 4);
  DevBuf<float> out(size_t(4) * 128);
  GemmArgs g;
  g.x = reinterpret_cast<const __half*>(x.d.p);
  g.ldx = 64;
  g.M = 4;
  g.w = a.dw;
  g.wcat[0] = b.dw;
  g.ep = Epilogue::kStoreF32;
  g.out_f = out.p;
  g.ldo = 128;
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.w = b.dw;
  g.wcat[0] = f.dw;  // another format
  CHECK(qsp::kern::gemm(g, nullptr) == cudaErrorInvalidValue);
  g.wcat[0] = a.dw;  // 32 + 40 rows: fine
  CUDA_REQUIRE(qsp::kern::gemm(g, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

TEST_CASE("gemm: LM head 151936x1024", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 200;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_F16}) {
    Weight w(dt, 151936, 1024, seed++);
    for (int M : {1, 3}) {
      Acts x(M, 1024, 1024, seed++);
      const std::vector<int> rows = sample_rows(M);
      const std::vector<double> ref = reference(w, x, rows);
      check_gemm(w, nullptr, x, Epilogue::kStoreF32, 151936, rows, ref, nullptr, seed++);
    }
  }
}

TEST_CASE("gemm: rejects unsupported input without launching", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  const char* why = nullptr;
  CHECK_FALSE(qsp::kern::gemm_supported(WFormat::kQ4_0, 64, 48, &why));
  CHECK(why != nullptr);
  CHECK_FALSE(qsp::kern::gemm_supported(WFormat::kQ8_0, 0, 64, &why));
  CHECK(qsp::kern::gemm_supported(WFormat::kF16, 96, 256, &why));

  Weight w(QSP_DTYPE_Q4_0, 64, 128, 7), w_other(QSP_DTYPE_Q4_0, 64, 256, 8);
  Acts x(4, 128, 128, 9);
  DevBuf<float> out(size_t(4) * 64);
  GemmArgs good;
  good.x = reinterpret_cast<const __half*>(x.d.p);
  good.ldx = 128;
  good.M = 4;
  good.w = w.dw;
  good.ep = Epilogue::kStoreF32;
  good.out_f = out.p;
  good.ldo = 64;
  CUDA_REQUIRE(qsp::kern::gemm(good, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());

  std::vector<GemmArgs> bad(11, good);
  bad[0].M = 0;
  bad[1].x = nullptr;
  bad[2].ldx = 120;                         // < K
  bad[3].ldx = 132;                         // not a multiple of 8
  bad[4].ldo = 63;                          // < N
  bad[5].out_f = nullptr;                   // kStoreF32 without out_f
  bad[6].ep = Epilogue::kSwiGLU;            // no w2 (and no out_h)
  bad[6].out_h = reinterpret_cast<__half*>(out.p);
  bad[7] = bad[6];
  bad[7].w2 = w_other.dw;                   // w2 of another shape
  bad[8].w.cols = 48;                       // K not a multiple of 32
  bad[9].ep = static_cast<Epilogue>(7);
  bad[10].path = static_cast<GemmPath>(5);
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("bad case " << i);
    CHECK(qsp::kern::gemm(bad[i], nullptr) == cudaErrorInvalidValue);
  }
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

TEST_CASE("embed: rows of Q4_0 / Q8_0 / F16 tables", "[gpu][gemm]") {
  QSP_REQUIRE_GPU();
  uint64_t seed = 300;
  for (int32_t dt : {QSP_DTYPE_Q4_0, QSP_DTYPE_Q8_0, QSP_DTYPE_F16, QSP_DTYPE_BF16}) {
    for (int64_t cols : {int64_t(96), int64_t(1024)}) {
      const int64_t rows = 1000;  // not a multiple of the 16-row tile
      INFO("embed dtype " << dt << " table " << rows << "x" << cols);
      Weight w(dt, rows, cols, seed++);
      const int M = 37;
      Rng rng(seed++);
      std::vector<int32_t> tok(M);
      for (int i = 0; i < M; ++i) tok[i] = int32_t(rng.next() % uint64_t(rows));
      tok[0] = 0;
      tok[1] = int32_t(rows - 1);
      tok[2] = -1;                // out of range: a zero row
      tok[3] = int32_t(rows);     // out of range: a zero row
      DevBuf<int32_t> dtok(tok.size());
      dtok.upload(tok);
      DevBuf<float> out(size_t(M) * cols);
      CUDA_REQUIRE(cudaMemset(out.p, 0xff, out.n * sizeof(float)));
      CUDA_REQUIRE(qsp::kern::embed(w.dw, dtok.p, M, out.p, nullptr));
      CUDA_REQUIRE(cudaGetLastError());
      CUDA_REQUIRE(cudaDeviceSynchronize());
      const std::vector<float> got = out.download();
      std::vector<float> ref(static_cast<size_t>(cols));
      int64_t mismatches = 0;
      for (int m = 0; m < M; ++m) {
        if (tok[m] >= 0 && tok[m] < rows) {
          w.row(tok[m], ref.data());
        } else {
          std::fill(ref.begin(), ref.end(), 0.0f);
        }
        // d * (q - 8) in fp32 on both sides: exact.
        for (int64_t c = 0; c < cols; ++c) mismatches += !(got[size_t(m) * cols + c] == ref[size_t(c)]);
      }
      CHECK(mismatches == 0);
    }
  }
  // Rejected without a launch.
  Weight w(QSP_DTYPE_Q8_0, 16, 64, 1);
  DevBuf<int32_t> dtok(1);
  DevBuf<float> out(64);
  CHECK(qsp::kern::embed(w.dw, nullptr, 1, out.p, nullptr) == cudaErrorInvalidValue);
  CHECK(qsp::kern::embed(w.dw, dtok.p, -1, out.p, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(qsp::kern::embed(w.dw, dtok.p, 0, out.p, nullptr));
}
