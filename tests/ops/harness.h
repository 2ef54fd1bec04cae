// The GPU op harness, in the manner of llama.cpp's test-backend-ops: each op
// test (tests/ops/test_op_<op>.cpp) runs the CPU backend's op (src/cpu/ops.h)
// and the CUDA op (kernels/kernels.h) on the same random inputs of realistic
// scale and compares them with the op's tolerance. Where the GPU takes fp16
// inputs (activations, Q, the KV cache, weights uploaded as BF16 / F32), the
// CPU op gets exactly those fp16 values widened to fp32, so the comparison
// measures the kernel, not the input rounding. The CPU ops accumulate in fp32
// and are themselves checked against float64 in tests/test_cpu_ops.cpp
// (errors ~1e-6, far under every tolerance here).
//
// Output buffers are poisoned with 0xFF bytes (NaN in fp16 and fp32) before
// each run, so an element a kernel forgets to write fails, and memory it must
// not touch is checked to still hold the poison.
#pragma once

#include <catch2/catch.hpp>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/quant.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "kernels/kernels.h"
#include "support/cuda.h"
#include "support/model.h"
#include "support/ref.h"
#include "support/rng.h"

namespace qsp_test {

// The thread pool every CPU op of the harness runs on.
inline qsp::ThreadPool& cpu_pool() {
  static qsp::ThreadPool pool(int(std::max(1u, std::min(16u, std::thread::hardware_concurrency()))));
  return pool;
}

inline std::vector<float> widen_f16(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = qsp::fp16_to_fp32(h[i]);
  return f;
}

inline std::vector<uint16_t> to_f16(const std::vector<float>& f) {
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) h[i] = qsp::fp32_to_fp16(f[i]);
  return h;
}

// A weight matrix N x K: its GGUF bytes, the CPU op's view of what the GPU
// holds (the same bytes; fp16 for BF16 / F32 sources, which the upload
// converts), and the device copy in the kernels' layout. Rows ~ N(0, sigma)
// with sigma drawn in [0.02, 0.05) per row, quantized with the reference
// quantizers.
struct OpWeight {
  int32_t dtype = QSP_DTYPE_Q4_0;
  int64_t N = 0, K = 0;
  std::vector<uint8_t> gguf;
  int32_t cpu_dtype = QSP_DTYPE_Q4_0;
  std::vector<uint8_t> cpu_bytes;
  std::unique_ptr<DevBuf> dev;
  qsp::kern::DWeight dw;

  OpWeight(int32_t dt, int64_t n, int64_t k, uint64_t seed) : dtype(dt), N(n), K(k) {
    Rng rng(seed);
    std::vector<float> src(size_t(N) * size_t(K));
    for (int64_t r = 0; r < N; ++r) {
      const float sigma = 0.02f + 0.03f * rng.uniform();
      for (int64_t i = 0; i < K; ++i) src[size_t(r) * K + i] = sigma * rng.normal();
    }
    gguf = quantize_rows(dtype, src.data(), uint64_t(N), uint64_t(K));
    REQUIRE(!gguf.empty());
    if (dtype == QSP_DTYPE_BF16 || dtype == QSP_DTYPE_F32) {
      const uint64_t row_bytes = gguf.size() / uint64_t(N);
      std::vector<float> row(static_cast<size_t>(K));
      cpu_dtype = QSP_DTYPE_F16;
      cpu_bytes.resize(size_t(N) * size_t(K) * 2);
      for (int64_t r = 0; r < N; ++r) {
        qsp::dequantize_row(dtype, gguf.data() + size_t(r) * row_bytes, row.data(), uint64_t(K));
        for (int64_t i = 0; i < K; ++i)
          reinterpret_cast<uint16_t*>(cpu_bytes.data())[size_t(r) * K + i] = qsp::fp32_to_fp16(row[i]);
      }
    } else {
      cpu_dtype = dtype;
      cpu_bytes = gguf;
    }
    const qsp::kern::WFormat f = qsp::kern::format_for(dtype);
    const char* why = nullptr;
    const bool supported = qsp::kern::gemm_supported(f, N, K, &why);
    INFO("shape " << N << "x" << K << ": " << (why ? why : ""));
    REQUIRE(supported);
    std::vector<uint8_t> host(qsp::kern::dweight_bytes(f, N, K));
    qsp::kern::repack_weight(dtype, gguf.data(), N, K, host.data());
    dev.reset(new DevBuf(host.size()));
    dev->upload(host);
    dw.data = dev->p;
    dw.fmt = f;
    dw.rows = int32_t(N);
    dw.cols = int32_t(K);
  }
  OpWeight(const OpWeight&) = delete;
  OpWeight& operator=(const OpWeight&) = delete;

  qsp::cpu::Matrix cpu() const { return qsp::cpu::Matrix{cpu_dtype, uint64_t(N), uint64_t(K), cpu_bytes.data()}; }
};

// fp16 activations [M][ldx] ~ N(0, 1) on host and device; the padding
// columns hold NaN, so a kernel reading past K fails.
struct OpActs {
  int M, K, ldx;
  std::vector<uint16_t> h;
  DevBuf d;
  OpActs(int m, int k, int ld, uint64_t seed)
      : M(m), K(k), ldx(ld), h(size_t(m) * ld, 0x7fffu), d(size_t(m) * ld * 2) {
    Rng rng(seed);
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < K; ++i) h[size_t(r) * ldx + i] = qsp::fp32_to_fp16(rng.normal());
    d.upload(h);
  }
  const __half* ptr() const { return d.as<const __half>(); }
  // The given rows, widened to fp32 and packed [rows.size()][K]: the CPU op's input.
  std::vector<float> rows_f32(const std::vector<int>& rows) const {
    std::vector<float> x(rows.size() * size_t(K));
    for (size_t j = 0; j < rows.size(); ++j)
      for (int i = 0; i < K; ++i) x[j * K + i] = qsp::fp16_to_fp32(h[size_t(rows[j]) * ldx + i]);
    return x;
  }
};

// The rows a long output is compared on: all of a small M; else first, last
// and a spread whose residues mod 128 / 64 / 16 differ (tile positions).
// Every row is still checked for being written.
inline std::vector<int> sample_rows(int M) {
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

// The CPU op: y[j][n] = W[n] . x[rows[j]] (cpu::matmul on the sampled rows).
inline std::vector<float> cpu_matmul(const OpWeight& w, const OpActs& x, const std::vector<int>& rows) {
  const std::vector<float> xs = x.rows_f32(rows);
  std::vector<float> y(rows.size() * size_t(w.N));
  qsp::cpu::matmul(w.cpu(), xs.data(), int64_t(rows.size()), y.data(), w.N, cpu_pool());
  return y;
}

}  // namespace qsp_test
