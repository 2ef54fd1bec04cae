// bench_prefill's baseline: the same layers with fp16 weights through cuBLAS
// (fp32 accumulation), qsp's own norm / RoPE / attention kernels between
// them: what dequantizing the model to fp16 would buy.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/kernels.h"
#include "prefill_common.h"
#include "support/check.h"

#define BK(x)                                                                               \
  do {                                                                                      \
    cublasStatus_t s_ = (x);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "%s:%d %s: cublas %d\n", __FILE__, __LINE__, #x, int(s_));        \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace bench {
namespace {

// Gaussian weights (Box-Muller on two 24-bit uniforms of one hash), as the
// trained models' and as the qsp rows' values before quantization
// (bench_weights.h): the tensor cores' power, and so the clocks, depend on
// the values (bench/RESULTS.md, sixteenth session).
__global__ void fill_half(__half* p, size_t n, float sd, uint64_t seed) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u1 = (float(x & 0xffffff) + 0.5f) / 16777216.0f, u2 = float((x >> 24) & 0xffffff) / 16777216.0f;
    p[i] = __float2half(sd * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}
__global__ void fill_float(float* p, size_t n, float mean, float sd, uint64_t seed) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 7) * 0xD1B54A32D192ED03ull ^ seed;
    x ^= x >> 29;
    const float u = float(x & 0xffffff) / 16777216.0f - 0.5f;
    p[i] = mean + u * sd * 3.4641f;
  }
}
__global__ void swiglu_kernel(const __half* gu, __half* out, int n, int F) {
  // gu: [n][2F] (gate | up) -> out [n][F]
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t total = size_t(n) * F;
  for (; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t m = i / F, c = i % F;
    const float g = __half2float(gu[m * 2 * F + c]), u = __half2float(gu[m * 2 * F + F + c]);
    out[i] = __float2half(g / (1.0f + __expf(-g)) * u);
  }
}

}  // namespace

struct CublasBaseline::Impl {
  Shape s;
  uint32_t max_seq;
  cublasHandle_t blas;
  cudaStream_t stream;
  std::vector<__half*> wqkv, wo, wgu, wd;
  float *norms, *x, *qkv, *logits;
  __half *xn, *q, *att, *gu, *act, *kc, *vc, *lm;
  int32_t* d_past;
  void* attn_scratch;
  size_t attn_scratch_bytes;

  template <class T>
  static T* dalloc(size_t n) {
    void* p;
    QSP_CK(cudaMalloc(&p, n * sizeof(T)));
    return static_cast<T*>(p);
  }

  Impl(const Shape& sh, uint32_t chunk, uint32_t max_seq_) : s(sh), max_seq(max_seq_) {
    BK(cublasCreate(&blas));
    QSP_CK(cudaStreamCreate(&stream));
    BK(cublasSetStream(blas, stream));
    const size_t H = s.hidden, Q = size_t(s.heads) * s.head_dim, KV = size_t(s.kv_heads) * s.head_dim, F = s.ffn;
    uint64_t seed = 1;
    auto rand_half = [&](size_t n, float sd) {
      __half* p = dalloc<__half>(n);
      fill_half<<<1024, 256, 0, stream>>>(p, n, sd, ++seed);
      return p;
    };
    for (uint32_t l = 0; l < s.layers; ++l) {
      wqkv.push_back(rand_half((Q + 2 * KV) * H, 0.6f / std::sqrt(float(H))));
      wo.push_back(rand_half(H * Q, 0.6f / std::sqrt(float(Q))));
      wgu.push_back(rand_half(2 * F * H, 0.6f / std::sqrt(float(H))));
      wd.push_back(rand_half(H * F, 0.6f / std::sqrt(float(F))));
    }
    lm = rand_half(size_t(s.vocab) * H, 0.05f);
    norms = dalloc<float>(H + s.head_dim * 2);
    fill_float<<<64, 256, 0, stream>>>(norms, H + s.head_dim * 2, 1.0f, 0.2f, 99);
    x = dalloc<float>(chunk * H);
    fill_float<<<1024, 256, 0, stream>>>(x, chunk * H, 0.0f, 1.0f, 5);
    qkv = dalloc<float>(chunk * (Q + 2 * KV));
    logits = dalloc<float>(s.vocab);
    xn = dalloc<__half>(chunk * H);
    q = dalloc<__half>(chunk * Q);
    att = dalloc<__half>(chunk * Q);
    gu = dalloc<__half>(chunk * 2 * F);
    act = dalloc<__half>(chunk * F);
    const size_t kv = size_t(s.layers) * s.kv_heads * max_seq * s.head_dim;
    kc = dalloc<__half>(kv);
    vc = dalloc<__half>(kv);
    d_past = dalloc<int32_t>(1);
    attn_scratch_bytes = qsp::kern::attention_scratch_bytes(int32_t(chunk), int32_t(s.heads),
                                                            int32_t(s.head_dim), int32_t(max_seq));
    attn_scratch = attn_scratch_bytes ? dalloc<char>(attn_scratch_bytes) : nullptr;
    QSP_CK(cudaStreamSynchronize(stream));
  }

  // C[m][n] (row-major, ld ldc) = A[m][k] (fp16) * W[n][k]^T, in column-major
  // terms C^T = W * A^T: an "NT" call with W as the first operand.
  void gemm(const __half* A, int M, const __half* W, int N, int K, void* C, cudaDataType ct, int ldc, float beta) {
    const float alpha = 1.0f;
    BK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, W, CUDA_R_16F, K, A, CUDA_R_16F, K, &beta, C,
                    ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  void forward(int n, int past) {
    using namespace qsp::kern;
    const int H = int(s.hidden), Q = int(s.heads * s.head_dim), KV = int(s.kv_heads * s.head_dim), F = int(s.ffn);
    QSP_CK(cudaMemcpyAsync(d_past, &past, sizeof past, cudaMemcpyHostToDevice, stream));
    const size_t layer_kv = size_t(s.kv_heads) * max_seq * s.head_dim;
    for (uint32_t l = 0; l < s.layers; ++l) {
      QSP_CK(rmsnorm_f16(x, H, norms, xn, n, H, 1e-6f, stream));
      gemm(xn, n, wqkv[l], Q + 2 * KV, H, qkv, CUDA_R_32F, Q + 2 * KV, 0.0f);
      QkRopeArgs r;
      r.qkv = qkv;
      r.ld = Q + 2 * KV;
      r.q_norm = norms + H;
      r.k_norm = norms + H + s.head_dim;
      r.q_out = q;
      r.k_cache = kc + l * layer_kv;
      r.v_cache = vc + l * layer_kv;
      r.M = n;
      r.n_heads = int(s.heads);
      r.n_kv_heads = int(s.kv_heads);
      r.head_dim = int(s.head_dim);
      r.max_seq = int(max_seq);
      r.past = d_past;
      QSP_CK(qk_rope(r, stream));
      AttnArgs a;
      a.q = q;
      a.k_cache = r.k_cache;
      a.v_cache = r.v_cache;
      a.out = att;
      a.M = n;
      a.n_heads = r.n_heads;
      a.n_kv_heads = r.n_kv_heads;
      a.head_dim = r.head_dim;
      a.max_seq = r.max_seq;
      a.past = d_past;
      a.scale = 1.0f / std::sqrt(float(s.head_dim));
      a.scratch = attn_scratch;
      a.scratch_bytes = attn_scratch_bytes;
      QSP_CK(attention(a, stream));
      gemm(att, n, wo[l], H, Q, x, CUDA_R_32F, H, 1.0f);
      QSP_CK(rmsnorm_f16(x, H, norms, xn, n, H, 1e-6f, stream));
      gemm(xn, n, wgu[l], 2 * F, H, gu, CUDA_R_16F, 2 * F, 0.0f);
      swiglu_kernel<<<2048, 256, 0, stream>>>(gu, act, n, F);
      gemm(act, n, wd[l], H, F, x, CUDA_R_32F, H, 1.0f);
    }
    QSP_CK(rmsnorm_f16(x + size_t(n - 1) * H, H, norms, xn, 1, H, 1e-6f, stream));
    gemm(xn, 1, lm, int(s.vocab), H, logits, CUDA_R_32F, int(s.vocab), 0.0f);
    QSP_CK(cudaGetLastError());
  }

  double time(int n, int past, int reps) {
    cudaEvent_t a, b;
    QSP_CK(cudaEventCreate(&a));
    QSP_CK(cudaEventCreate(&b));
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      QSP_CK(cudaEventRecord(a, stream));
      forward(n, past);
      QSP_CK(cudaEventRecord(b, stream));
      QSP_CK(cudaEventSynchronize(b));
      float ms = 0;
      QSP_CK(cudaEventElapsedTime(&ms, a, b));
      if (r) t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(t);
  }

  ~Impl() {
    for (auto* v : {&wqkv, &wo, &wgu, &wd})
      for (__half* p : *v) cudaFree(p);
    for (void* p : {(void*)lm, (void*)norms, (void*)x, (void*)qkv, (void*)logits, (void*)xn, (void*)q, (void*)att,
                    (void*)gu, (void*)act, (void*)kc, (void*)vc, (void*)d_past, attn_scratch})
      if (p) cudaFree(p);
    cublasDestroy(blas);
    cudaStreamDestroy(stream);
  }
};

CublasBaseline::CublasBaseline(const Shape& s, uint32_t chunk, uint32_t max_seq) : impl_(new Impl(s, chunk, max_seq)) {}
CublasBaseline::~CublasBaseline() = default;
double CublasBaseline::time(int n, int past, int reps) { return impl_->time(n, past, reps); }

}  // namespace bench
