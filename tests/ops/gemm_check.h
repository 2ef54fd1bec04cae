// The GEMM comparison shared by test_op_gemm.cpp and test_op_lm_head.cpp:
// kern::gemm against the CPU backend's ops on the same weights and fp16
// activations: cpu::matmul (kStoreF16 / kStoreF32; kAddF32 adds onto a random
// residual, compared as out - residual), cpu::matmul of gate and up followed
// by cpu::swiglu (kSwiGLU).
//
// Tolerance (unchanged from the fp64-reference tests this replaces; the CPU
// ops' own error, ~1e-6 relative, is negligible next to it): on the sampled
// rows ||out - ref|| / ||ref|| <= 2e-3 and every element
// |out - ref| <= 1e-2 rms(ref) + 2e-3 |ref|; every element of every row
// finite; the row-stride gap (ldo > N) untouched.
#pragma once

#include <cstring>

#include "ops/harness.h"

namespace qsp_test {

using qsp::kern::Epilogue;
using qsp::kern::GemmArgs;
using qsp::kern::GemmPath;
using qsp::kern::WgmmaWeights;

inline const char* ep_name(Epilogue ep) {
  switch (ep) {
    case Epilogue::kStoreF16: return "StoreF16";
    case Epilogue::kStoreF32: return "StoreF32";
    case Epilogue::kAddF32: return "AddF32";
    case Epilogue::kSwiGLU: return "SwiGLU";
  }
  return "?";
}

// The GemmArgs of w (and w2 for kSwiGLU) over x into out (fp16 for
// kStoreF16 / kSwiGLU, else fp32) of row stride ldo; the path and the
// forcing fields at their defaults.
inline GemmArgs gemm_args(const OpWeight& w, const OpWeight* w2, const OpActs& x, Epilogue ep, const DevBuf& out,
                          int ldo) {
  const bool half_out = ep == Epilogue::kStoreF16 || ep == Epilogue::kSwiGLU;
  GemmArgs a;
  a.x = x.ptr();
  a.ldx = x.ldx;
  a.M = x.M;
  a.w = w.dw;
  if (w2) a.w2 = w2->dw;
  a.ep = ep;
  a.out_h = half_out ? out.as<__half>() : nullptr;
  a.out_f = half_out ? nullptr : out.as<float>();
  a.ldo = ldo;
  return a;
}

// ref: the CPU op's accumulators [rows][N] (for row groups: the groups side
// by side); ref2: up's for kSwiGLU. cat0 / cat1: row groups after w.
inline void check_gemm(const OpWeight& w, const OpWeight* w2, const OpActs& x, Epilogue ep, int ldo,
                       const std::vector<int>& rows, const std::vector<float>& ref, const std::vector<float>* ref2,
                       uint64_t seed, GemmPath path = GemmPath::kAuto, const OpWeight* cat0 = nullptr,
                       const OpWeight* cat1 = nullptr, int wg_tile = 0, int wg_splits = 0,
                       WgmmaWeights weights = WgmmaWeights::kAuto,  // GemmArgs::wgmma_weights
                       int wg_head = 0, int wg_per_sm = 0,
                       qsp::kern::GemvI8 gemv_i8 = qsp::kern::GemvI8::kAuto) {
  const int M = x.M;
  const int64_t N = w.N + (cat0 ? cat0->N : 0) + (cat1 ? cat1->N : 0);
  const bool half_out = ep == Epilogue::kStoreF16 || ep == Epilogue::kSwiGLU;
  const size_t esz = half_out ? 2 : 4;
  const size_t count = size_t(M) * size_t(ldo);
  INFO("gemm " << N << "x" << w.K << (cat0 ? " (row groups)" : "") << " dtype " << qsp_dtype_name(w.dtype)
               << " M=" << M << " ldx=" << x.ldx << " ldo=" << ldo << " " << ep_name(ep) << " path " << int(path)
               << " wgmma tile " << wg_tile << " splits " << wg_splits << " head " << wg_head << " weights "
               << int(weights) << " per SM " << wg_per_sm << " integer GEMV " << int(gemv_i8));

  // Initial output bytes: NaN poison, or random residuals for kAddF32.
  std::vector<uint8_t> init(count * esz, 0xff);
  if (ep == Epilogue::kAddF32) {
    Rng rng(seed);
    float* f = reinterpret_cast<float*>(init.data());
    for (size_t i = 0; i < count; ++i) f[i] = rng.normal();
  }
  DevBuf out(init.size());
  out.upload(init);

  GemmArgs a = gemm_args(w, w2, x, ep, out, ldo);
  a.path = path;
  a.wg_tile = wg_tile;
  a.wg_splits = wg_splits;
  a.wg_head = wg_head;
  a.wg_per_sm = wg_per_sm;
  a.wgmma_weights = weights;
  a.gemv_i8 = gemv_i8;
  if (cat0) a.wcat[0] = cat0->dw;
  if (cat1) a.wcat[1] = cat1->dw;
  CUDA_REQUIRE(qsp::kern::gemm(a, nullptr));
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = out.download<uint8_t>();

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

  // What the CPU ops give on the sampled rows.
  std::vector<float> want(ref);
  if (ep == Epilogue::kSwiGLU) qsp::cpu::swiglu(ref.data(), ref2->data(), want.data(), int64_t(want.size()), cpu_pool());
  double sr = 0.0;
  for (float e : want) sr += double(e) * e;
  const double rms = std::sqrt(sr / double(want.size()));
  RelL2 err;
  int64_t over = 0;
  for (size_t j = 0; j < rows.size(); ++j)
    for (int64_t n = 0; n < N; ++n) {
      const size_t o = size_t(rows[j]) * ldo + n;
      double v = value(got, o);
      if (ep == Epilogue::kAddF32) v -= value(init, o);
      const double e = want[j * N + n];
      err.add(v, e);
      if (!(std::fabs(v - e) <= 1e-2 * rms + 2e-3 * std::fabs(e))) ++over;
    }
  INFO("rel L2 " << err.value() << ", max abs err " << err.max_abs << ", rms(ref) " << rms << ", over tolerance "
                 << over);
  CHECK(rms > 0.0);
  CHECK(err.value() <= 2e-3);
  CHECK(over == 0);
}

// The CPU reference of a row group (GemmArgs::wcat): the products of q, k
// and v (v may be null: a two-member group) side by side, [rows][q.N + k.N
// (+ v.N)].
inline std::vector<float> group_ref(const OpWeight& q, const OpWeight& k, const OpWeight* v, const OpActs& x,
                                    const std::vector<int>& rows) {
  const OpWeight* parts[3] = {&q, &k, v};
  int64_t N = 0;
  for (const OpWeight* w : parts) N += w ? w->N : 0;
  std::vector<float> ref(rows.size() * size_t(N));
  int64_t col = 0;
  for (const OpWeight* w : parts) {
    if (!w) continue;
    const std::vector<float> r = cpu_matmul(*w, x, rows);
    for (size_t j = 0; j < rows.size(); ++j)
      std::copy(r.begin() + j * w->N, r.begin() + (j + 1) * w->N, ref.begin() + j * N + col);
    col += w->N;
  }
  return ref;
}

// All epilogues for each M on one (w, w2) pair; ldx alternates tight and
// padded by M, ldo cycles tight, padded (aligned) and odd (scalar stores).
// With path kWgmma, every token tile x K split of `tiles` x `splits` too (0:
// the plan's); the references are computed once per M. weights, per_sm: check_gemm's.
inline void gemm_sweep(const OpWeight& w, const OpWeight& w2, const std::vector<int>& Ms, uint64_t seed,
                       GemmPath path = GemmPath::kAuto, const std::vector<int>& tiles = {0},
                       const std::vector<int>& splits = {0}, WgmmaWeights weights = WgmmaWeights::kAuto,
                       int per_sm = 0) {
  int v = 0, mi = 0;
  for (int M : Ms) {
    const int ldx = int(w.K) + (mi++ % 2 ? 8 : 0);
    OpActs x(M, int(w.K), ldx, seed + 1000 + M);
    const std::vector<int> rows = sample_rows(M);
    const std::vector<float> ref = cpu_matmul(w, x, rows), ref2 = cpu_matmul(w2, x, rows);
    for (int bt : tiles)
      for (int ks : splits)
        for (Epilogue ep : {Epilogue::kStoreF16, Epilogue::kStoreF32, Epilogue::kAddF32, Epilogue::kSwiGLU}) {
          const int pad = v % 3 == 0 ? 0 : v % 3 == 1 ? 8 : 1;
          ++v;
          check_gemm(w, &w2, x, ep, int(w.N) + pad, rows, ref, &ref2, seed + v, path, nullptr, nullptr, bt, ks, weights, 0,
                     per_sm);
        }
  }
}

// A kStoreF32 call forced onto the wgmma path: w is 128 x 64, x has 64 columns.
inline GemmArgs forced_wgmma(const OpWeight& w, const OpActs& x, float* out) {
  GemmArgs a;
  a.x = x.ptr();
  a.ldx = 64;
  a.M = x.M;
  a.w = w.dw;
  a.ep = Epilogue::kStoreF32;
  a.out_f = out;
  a.ldo = 128;
  a.path = GemmPath::kWgmma;
  return a;
}

// Whether the wgmma (sm_90a) GEMM runs here: probe with a tiny forced call.
inline bool gemm_wgmma_runs() {
  OpWeight w(QSP_DTYPE_Q4_0, 128, 64, 77);
  OpActs x(32, 64, 64, 78);
  DevBuf out(size_t(32) * 128 * 4);
  const cudaError_t e = qsp::kern::gemm(forced_wgmma(w, x, out.as<float>()), nullptr);
  REQUIRE((e == cudaSuccess || e == cudaErrorNotSupported));
  CUDA_REQUIRE(cudaDeviceSynchronize());
  return e == cudaSuccess;
}

}  // namespace qsp_test
