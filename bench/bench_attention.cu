// bench_attention: the causal flash-attention kernel alone, in the shape of
// Qwen3-8B / Llama-3-8B (32 query heads, 8 KV heads, head_dim 128).
//   prefill: M = 512, 2048, 8192 tokens with past = 0 (one chunk)
//   decode:  M = 1 with past = 2048, 8192
// CUDA events, warm-up, median of --reps (default 30) launches. Prints ms,
// effective TFLOPS (causal: 4 * M * L * head_dim * heads / 2 for a square
// chunk, 4 * L * head_dim * heads for one token) and, for decode, the
// effective K/V read bandwidth.
//
// usage: bench_attention [--reps N] [--heads H] [--kv-heads K] [--head-dim D]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "support/check.h"
#include "kernels/kernels.h"

namespace {

// Deterministic pseudo-random fp16 in about [-scale, scale].
__global__ void fill_random(__half* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ (seed + uint32_t(i >> 32) * 97u);
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    p[i] = __float2half((float(h) * (1.0f / 4294967296.0f) * 2.0f - 1.0f) * scale);
  }
}

struct Case {
  const char* kind;
  int M, past;
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it comes: a timed-out run keeps them
  int reps = 30, heads = 32, kv_heads = 8, head_dim = 128;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(20, next());
    else if (!std::strcmp(argv[i], "--heads")) heads = next();
    else if (!std::strcmp(argv[i], "--kv-heads")) kv_heads = next();
    else if (!std::strcmp(argv[i], "--head-dim")) head_dim = next();
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--heads H] [--kv-heads K] [--head-dim D]\n", argv[0]);
      return 2;
    }
  }
  if (!qsp::kern::attention_supported(head_dim) || heads < 1 || kv_heads < 1 || heads % kv_heads) {
    std::fprintf(stderr, "unsupported shape\n");
    return 2;
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  QSP_CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs)\nshape: %d q heads, %d kv heads, head_dim %d, fp16, causal\n\n", prop.name,
              prop.multiProcessorCount, heads, kv_heads, head_dim);

  const Case cases[] = {{"prefill", 128, 0},   {"prefill", 256, 0},    {"prefill", 512, 0},
                        {"prefill", 1024, 0},  {"prefill", 2048, 0},   {"prefill", 8192, 0},
                        {"chunk", 512, 1536},  {"chunk", 2048, 6144},  {"chunk", 64, 2048},
                        {"chunk", 128, 2048},  {"chunk", 128, 8064},   {"chunk", 256, 7936},
                        {"chunk", 512, 7680},  {"chunk", 1024, 7168},  {"decode", 1, 2048},
                        {"decode", 1, 8192}};
  const int max_seq = 8192 + 64;
  const int max_M = 8192;
  const size_t q_elems = size_t(max_M) * heads * head_dim;
  const size_t kv_elems = size_t(kv_heads) * max_seq * head_dim;
  __half *q, *k, *v, *out;
  int32_t* d_past;
  QSP_CK(cudaMalloc(&q, q_elems * 2));
  QSP_CK(cudaMalloc(&out, q_elems * 2));
  QSP_CK(cudaMalloc(&k, kv_elems * 2));
  QSP_CK(cudaMalloc(&v, kv_elems * 2));
  QSP_CK(cudaMalloc(&d_past, sizeof(int32_t)));
  fill_random<<<1024, 256>>>(q, q_elems, 1u, 2.0f);
  fill_random<<<1024, 256>>>(k, kv_elems, 2u, 2.0f);
  fill_random<<<1024, 256>>>(v, kv_elems, 3u, 1.0f);
  QSP_CK(cudaGetLastError());
  const size_t scratch_bytes = qsp::kern::attention_scratch_bytes(max_M, heads, head_dim, max_seq);
  void* scratch = nullptr;
  if (scratch_bytes) QSP_CK(cudaMalloc(&scratch, scratch_bytes));
  std::printf("split-KV scratch: %.2f MB\n\n", scratch_bytes / 1e6);

  cudaStream_t stream;
  QSP_CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  QSP_CK(cudaEventCreate(&t0));
  QSP_CK(cudaEventCreate(&t1));

  std::printf("%-8s %6s %6s %10s %10s %10s\n", "kind", "M", "past", "ms", "TFLOPS", "KV GB/s");
  for (const Case& c : cases) {
    QSP_CK(cudaMemcpy(d_past, &c.past, sizeof(int32_t), cudaMemcpyHostToDevice));
    qsp::kern::AttnArgs a;
    a.q = q;
    a.k_cache = k;
    a.v_cache = v;
    a.out = out;
    a.M = c.M;
    a.n_heads = heads;
    a.n_kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.max_seq = max_seq;
    a.past = d_past;
    a.scale = 1.0f / std::sqrt(float(head_dim));
    a.scratch = scratch;
    a.scratch_bytes = scratch_bytes;
    // Median ms of one path; < 0 when the path cannot run here.
    auto time_path = [&](qsp::kern::AttnPath path) -> double {
      a.path = path;
      const cudaError_t e = qsp::kern::attention(a, stream);
      if (e == cudaErrorNotSupported) return -1.0;
      QSP_CK(e);
      for (int w = 0; w < 4; ++w) QSP_CK(qsp::kern::attention(a, stream));
      QSP_CK(cudaStreamSynchronize(stream));
      std::vector<float> ms(reps);
      for (int r = 0; r < reps; ++r) {
        QSP_CK(cudaEventRecord(t0, stream));
        QSP_CK(qsp::kern::attention(a, stream));
        QSP_CK(cudaEventRecord(t1, stream));
        QSP_CK(cudaEventSynchronize(t1));
        QSP_CK(cudaEventElapsedTime(&ms[r], t0, t1));
      }
      std::sort(ms.begin(), ms.end());
      return ms[reps / 2];
    };
    const double L = double(c.past) + c.M;  // keys the last query sees
    // Causal: query m sees past + m + 1 keys; 4 flops per (query, key, dim, head).
    double pairs = 0.0;
    for (int m = 0; m < c.M; ++m) pairs += double(c.past) + m + 1;
    const double flops = 4.0 * pairs * head_dim * heads;
    const double kv_bytes = 2.0 * kv_heads * L * head_dim * 2.0;
    const double med = time_path(qsp::kern::AttnPath::kAuto);
    std::printf("%-8s %6d %6d %10.4f %10.1f %10.1f\n", c.kind, c.M, c.past, med, flops / (med * 1e-3) / 1e12,
                kv_bytes / (med * 1e-3) / 1e9);
    if (c.M > 1) {
      const double mma = time_path(qsp::kern::AttnPath::kMma), wg = time_path(qsp::kern::AttnPath::kWgmma);
      const double wg1 = time_path(qsp::kern::AttnPath::kWgmmaOne);
      std::printf("%-8s %6d %6d    paths: mma.sync %.1f TFLOPS", c.kind, c.M, c.past, flops / (mma * 1e-3) / 1e12);
      if (wg > 0) std::printf(", wgmma %.1f TFLOPS", flops / (wg * 1e-3) / 1e12);
      if (wg1 > 0) std::printf(", wgmma one warpgroup %.1f TFLOPS", flops / (wg1 * 1e-3) / 1e12);
      std::printf("\n");
    }
  }
  QSP_CK(cudaStreamDestroy(stream));
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(out);
  cudaFree(d_past);
  if (scratch) cudaFree(scratch);
  return 0;
}
