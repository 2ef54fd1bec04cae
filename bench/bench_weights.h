// bench_prefill's synthetic weights: quantized blocks of every format, the
// synthesizer's (realistic, the default) or random codes at the scale
// trained models carry (fast), f32 vectors, and the --type choice (one
// format, or a llama.cpp mix through the synthesizer's rules).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "common/quant.h"
#include "gguf_write/gguf_synth.h"
#include "qsp/qsp.h"
#include "support/rng.h"

namespace bench {

// Fast random bytes for quantized weights: random codes (and random sub-block
// scales for the K-quants) with the fp16 block scales set to what trained
// models carry (~0.6/sqrt(K) per element). Reference-quantizing 8B random
// weights would take minutes per type; the kernels' speed does not depend on
// the values.
struct BlockScales {
  int32_t dtype;
  uint32_t block_bytes, elems;
  int d_off, m_off;  // byte offsets of the fp16 d (and min, -1: none)
  float d_per_elem;   // d in units of the element scale
};
constexpr BlockScales kBlockScales[] = {
    {QSP_DTYPE_Q4_0, 18, 32, 0, -1, 2.5f / 8},      {QSP_DTYPE_Q8_0, 34, 32, 0, -1, 2.5f / 127},
    {QSP_DTYPE_Q4_1, 20, 32, 0, 2, 5.0f / 15},      {QSP_DTYPE_Q5_0, 22, 32, 0, -1, 2.5f / 16},
    {QSP_DTYPE_Q5_1, 24, 32, 0, 2, 5.0f / 31},      {QSP_DTYPE_Q2_K, 84, 256, 80, 82, 5.0f / 3 / 15},
    {QSP_DTYPE_Q3_K, 110, 256, 108, -1, 2.5f / 4 / 32}, {QSP_DTYPE_Q4_K, 144, 256, 0, 2, 5.0f / 15 / 63},
    {QSP_DTYPE_Q5_K, 176, 256, 0, 2, 5.0f / 31 / 63}, {QSP_DTYPE_Q6_K, 210, 256, 208, -1, 2.5f / 32 / 127},
};

inline std::vector<uint8_t> random_quant(int32_t dtype, uint64_t rows, uint64_t cols, uint64_t seed) {
  std::vector<uint8_t> b(qsp_dtype_size(dtype, rows, cols));
  qsp_test::Rng r(seed);
  for (size_t i = 0; i + 8 <= b.size(); i += 8) {
    uint64_t v = r.next();
    std::memcpy(&b[i], &v, 8);
  }
  const BlockScales* bs = nullptr;
  for (const BlockScales& x : kBlockScales)
    if (x.dtype == dtype) bs = &x;
  if (!bs) {
    std::fprintf(stderr, "bench_prefill: no random blocks for %s\n", qsp_dtype_name(dtype));
    std::exit(2);
  }
  const float elem_sd = 0.6f / std::sqrt(float(cols));
  for (size_t off = 0; off < b.size(); off += bs->block_bytes) {
    const float jitter = 0.75f + 0.5f * float(r.next() & 0xffff) / 65535.0f;
    const uint16_t h = qsp::fp32_to_fp16(elem_sd * bs->d_per_elem * jitter);
    std::memcpy(&b[off + bs->d_off], &h, 2);
    if (bs->m_off >= 0) std::memcpy(&b[off + bs->m_off], &h, 2);
  }
  return b;
}

// What the synthetic models' matrices hold (--weights):
//  - kRealistic (the default): the reference quantizer's blocks of Gaussian
//    weights (sd 0.6 / sqrt(cols); the embedding 0.05), the values `qsp
//    synth` writes (gguf_synth's synth_rows), generated on every core.
//  - kFast: random_quant's random codes, ~3x faster to make.
// The kernels run the same code paths on both, but not at the same clocks:
// on the H200 (2026-12-05, sixteenth session) the 8B Q4_0 pass at 2048
// tokens drew the 700 W cap on a synthesized file's weights (SM clock median
// 1695 MHz, power-cap reason in 36 of 48 samples) and not on random codes
// (1980 MHz): 50.4 ms against 45.7, while `qsp bench` and bench_prefill
// --gguf agreed within 0.4% on the file. Users' files are the former
// (issue 17: "fix the side that is wrong").
enum class Weights { kRealistic, kFast };
inline Weights g_weights = Weights::kRealistic;

inline std::vector<uint8_t> realistic_quant(int32_t dtype, uint64_t rows, uint64_t cols, uint64_t seed, float sd) {
  qsp::gguf::SynthTensor t;
  t.name = "bench";
  t.type = dtype;
  t.rows = rows;
  t.cols = cols;
  t.stddev = sd;
  t.seed = seed;
  std::vector<uint8_t> b(qsp_dtype_size(dtype, rows, cols));
  const size_t rb = b.size() / rows;
  const uint64_t n = std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  std::vector<std::exception_ptr> err(n);
  for (uint64_t i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      const uint64_t r0 = rows * i / n, r1 = rows * (i + 1) / n;
      try {
        qsp::gguf::synth_rows(t, r0, r1, b.data() + r0 * rb);
      } catch (...) {
        err[i] = std::current_exception();
      }
    });
  for (std::thread& x : th) x.join();
  for (const std::exception_ptr& e : err)
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "bench_prefill: %s\n", ex.what());
        std::exit(2);
      }
    }
  return b;
}

// A quantized matrix as --weights asks; embedding: the token table's scale.
inline std::vector<uint8_t> bench_quant(int32_t dtype, uint64_t rows, uint64_t cols, uint64_t seed,
                                        bool embedding = false) {
  if (g_weights == Weights::kFast) return random_quant(dtype, rows, cols, seed);
  return realistic_quant(dtype, rows, cols, seed, embedding ? 0.05f : 0.6f / std::sqrt(float(cols)));
}

inline std::vector<uint8_t> random_f32(uint64_t n, float mean, float sd, uint64_t seed) {
  qsp_test::Rng r(seed);
  const std::vector<float> v = qsp_test::randn(n, sd, r, mean);
  std::vector<uint8_t> b(n * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// What --type names: one format for every matrix, or a llama.cpp file type
// (q4_k_m, ...) whose per-tensor mix synth_mix_type gives, as `qsp synth`
// writes it (tools/gguf_write: the rules of docs/GGUF.md).
struct BenchType {
  int32_t dtype = 0;  // the format, or the mix's base
  const qsp::gguf::SynthFileType* mix = nullptr;
  std::string name() const { return mix ? mix->name : qsp_dtype_name(dtype); }
  // The type of matrix `tensor` (GGUF name) of shape s with `cols` columns.
  int32_t of(const char* shape_name, const std::string& tensor, uint64_t cols, int32_t plain) const {
    if (!mix) return plain;
    const qsp::gguf::SynthPreset* p = qsp::gguf::find_synth_preset(shape_name);
    if (!p) {
      std::fprintf(stderr, "bench_prefill: no synth preset %s for the %s mix\n", shape_name, mix->name);
      std::exit(2);
    }
    return qsp::gguf::synth_mix_type(*p, *mix, tensor, cols);
  }
};

// An empty b: a cached handle, no data (n_bytes still the tensor's size).
inline qsp_tensor view(uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols, const std::vector<uint8_t>& b) {
  qsp_tensor t{};
  t.handle = handle;
  t.dtype = dtype;
  t.n_rows = rows;
  t.n_cols = cols;
  t.data = b.empty() ? nullptr : b.data();
  t.n_bytes = qsp_dtype_size(dtype, rows, cols);
  return t;
}

}  // namespace bench
