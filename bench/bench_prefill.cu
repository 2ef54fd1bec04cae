// bench_prefill: whole-model prefill throughput of qsp on the GPU, next to a
// baseline a user would otherwise pick, in the same run:
//   qsp      the public C API, backend CUDA, Q4_0 / Q8_0 weights (--type: any
//            quantized format, e.g. q4_K,q6_K)
//   cublas   the same layers with fp16 weights through cuBLAS (fp32
//            accumulation), qsp's own norm / RoPE / attention kernels between
//            them — i.e. what dequantizing the model to fp16 would buy.
// Synthetic random weights of realistic scale in the shapes of Qwen3-0.6B and
// Qwen3-8B. Prints ms, tokens/s and effective TOPS (2 x linear parameters x
// tokens + causal attention + the LM head once).
//
// usage: bench_prefill [--model 0.6b|8b|all] [--type q4_0|q8_0|q4_K|...|q4_k_m|...|all]
//                      [--tokens 1,128,512,2048,8192] [--reps N] [--no-baseline]
//                      [--batch SPEC,...]   (qsp_prefill_batch against qsp_prefill
//                      one context at a time; SPEC as parse_batch says)
//                      [--gguf FILE,...]    (instead of the synthetic shapes: the
//                      model of each file, its own weights, as `qsp bench` runs it)
//                      [--tp N,...]         (tensor parallelism: the model split N
//                      ways, a shard per GPU 0..N-1; "Ns": N shards in turn on
//                      GPU 0; each against the first entry, e.g. --tp 1,2,4)
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_weights.h"
#include "support/check.h"
#include "support/rng.h"
#include "common/quant.h"
#include "kernels/kernels.h"
#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

namespace {

using bench::BenchType;
using bench::kBlockScales;
using bench::BlockScales;
using bench::random_f32;
using bench::random_quant;
using bench::view;

struct Shape {
  const char* name;
  uint32_t layers, hidden, ffn, heads, kv_heads, head_dim, vocab;
};
const Shape kShapes[] = {
    {"qwen3-0.6b", 28, 1024, 3072, 16, 8, 128, 151936},
    {"qwen3-8b", 36, 4096, 12288, 32, 8, 128, 151936},
};

#define BK(x)                                                              \
  do {                                                                     \
    cublasStatus_t s_ = (x);                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                     \
      std::fprintf(stderr, "%s:%d %s: cublas %d\n", __FILE__, __LINE__, #x, int(s_)); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

double linear_params(const Shape& s) {
  const double H = s.hidden, Q = double(s.heads) * s.head_dim, KV = double(s.kv_heads) * s.head_dim;
  return s.layers * (H * Q + 2 * H * KV + Q * H + 3 * H * s.ffn);
}
// Causal attention over a chunk of n after `past`: QK^T and PV, 2 flops a MAC.
double attn_flops(const Shape& s, double n, double past) {
  const double pairs = n * past + n * (n + 1) / 2;
  return s.layers * 4.0 * s.heads * s.head_dim * pairs;
}
double total_flops(const Shape& s, double n, double past) {
  return 2 * linear_params(s) * n + attn_flops(s, n, past) + 2.0 * s.vocab * s.hidden;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int reps_for(uint32_t n, int reps) { return n >= 4096 ? std::max(3, reps / 3) : reps; }

// ---- qsp through the public API ------------------------------------------------
// generate = false: a second context of the same model. Every handle is in
// the weight cache already, so the views carry no data (the API then reads
// nothing: qsp.h, "Weights").
// n_devices / device_mask: qsp_context_params' split (0: unsplit).
qsp_context* make_qsp(const Shape& s, const BenchType& bt, uint32_t max_seq, bool generate = true,
                      uint32_t n_devices = 0, uint32_t device_mask = 0) {
  const int32_t dtype = bt.dtype;
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.n_devices = n_devices;
  p.device_mask = device_mask;
  p.n_layers = s.layers;
  p.hidden_size = s.hidden;
  p.intermediate_size = s.ffn;
  p.n_heads = s.heads;
  p.n_kv_heads = s.kv_heads;
  p.head_dim = s.head_dim;
  p.vocab_size = s.vocab;
  p.max_seq_len = max_seq;
  p.backend = QSP_BACKEND_CUDA;
  qsp_context* ctx = nullptr;
  QSP_QK(qsp_context_create(&p, &ctx));
  const uint64_t H = s.hidden, Q = uint64_t(s.heads) * s.head_dim, KV = uint64_t(s.kv_heads) * s.head_dim;
  uint64_t h = (uint64_t(dtype) << 40) ^ (uint64_t(s.hidden) << 20) ^ (bt.mix ? uint64_t(bt.mix->file_type + 1) << 32 : 0);
  const double t0 = now_ms();
  const auto gen_f32 = [&](uint64_t n, float mean, float sd, uint64_t seed) {
    return generate ? random_f32(n, mean, sd, seed) : std::vector<uint8_t>();
  };
  const auto gen_quant = [&](int32_t t, uint64_t rows, uint64_t cols, uint64_t seed) {
    return generate ? random_quant(t, rows, cols, seed) : std::vector<uint8_t>();
  };
  for (uint32_t l = 0; l < s.layers; ++l) {
    std::vector<uint8_t> an = gen_f32(H, 1, 0.2f, ++h), fn = gen_f32(H, 1, 0.2f, ++h);
    std::vector<uint8_t> qn = gen_f32(s.head_dim, 1, 0.2f, ++h), kn = gen_f32(s.head_dim, 1, 0.2f, ++h);
    const std::string blk = "blk." + std::to_string(l) + ".";
    const auto type = [&](const char* t, uint64_t cols) { return bt.of(s.name, blk + t + ".weight", cols, dtype); };
    const int32_t tq = type("attn_q", H), tk = type("attn_k", H), tv = type("attn_v", H), to = type("attn_output", Q),
                  tg = type("ffn_gate", H), tu = type("ffn_up", H), td = type("ffn_down", s.ffn);
    std::vector<uint8_t> wq = gen_quant(tq, Q, H, ++h), wk = gen_quant(tk, KV, H, ++h),
                         wv = gen_quant(tv, KV, H, ++h), wo = gen_quant(to, H, Q, ++h),
                         wg = gen_quant(tg, s.ffn, H, ++h), wu = gen_quant(tu, s.ffn, H, ++h),
                         wd = gen_quant(td, H, s.ffn, ++h);
    qsp_layer_weights w;
    qsp_layer_weights_init(&w);
    w.attn_norm = view(h + 100, QSP_DTYPE_F32, 1, H, an);
    w.ffn_norm = view(h + 101, QSP_DTYPE_F32, 1, H, fn);
    w.q_norm = view(h + 102, QSP_DTYPE_F32, 1, s.head_dim, qn);
    w.k_norm = view(h + 103, QSP_DTYPE_F32, 1, s.head_dim, kn);
    w.wq = view(h + 104, tq, Q, H, wq);
    w.wk = view(h + 105, tk, KV, H, wk);
    w.wv = view(h + 106, tv, KV, H, wv);
    w.wo = view(h + 107, to, H, Q, wo);
    w.w_gate = view(h + 108, tg, s.ffn, H, wg);
    w.w_up = view(h + 109, tu, s.ffn, H, wu);
    w.w_down = view(h + 110, td, H, s.ffn, wd);
    h += 200;
    QSP_QK(qsp_upload_layer(ctx, l, &w));
  }
  // Q8_0, tied, for a single format (as Qwen3-0.6B; 8B has its own head of
  // the same shape and cost); a mix's own embedding and head types.
  const int32_t te = bt.of(s.name, "token_embd.weight", H, QSP_DTYPE_Q8_0);
  const int32_t th = bt.of(s.name, "output.weight", H, QSP_DTYPE_Q8_0);
  std::vector<uint8_t> emb = gen_quant(te, s.vocab, H, ++h);
  std::vector<uint8_t> on = gen_f32(H, 1, 0.2f, ++h);
  qsp_tensor e = view(h + 1, te, s.vocab, H, emb);
  QSP_QK(qsp_upload_embedding(ctx, &e));
  qsp_output_weights o;
  qsp_output_weights_init(&o);
  o.norm = view(h + 2, QSP_DTYPE_F32, 1, H, on);
  o.lm_head = e;
  std::vector<uint8_t> head;
  if (th != te) {
    head = gen_quant(th, s.vocab, H, ++h);
    o.lm_head = view(h + 3, th, s.vocab, H, head);
  }
  QSP_QK(qsp_upload_output(ctx, &o));
  if (generate)
    std::printf("  [qsp] generated + uploaded %s %s in %.1f s\n", s.name, bt.name().c_str(), (now_ms() - t0) / 1e3);
  return ctx;
}

double time_qsp(qsp_context* ctx, uint32_t n, uint32_t past, int reps, const std::vector<int32_t>& tokens) {
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    QSP_QK(qsp_kv_truncate(ctx, 0));
    if (past) QSP_QK(qsp_prefill(ctx, tokens.data(), past));
    const double t0 = now_ms();
    QSP_QK(qsp_prefill(ctx, tokens.data() + past, n));
    const double dt = now_ms() - t0;
    if (r) t.push_back(dt);  // the first run warms up (and captures the decode graph)
  }
  return median(t);
}

// ---- Batched prefill across contexts (qsp_prefill_batch) -------------------------
// A spec: groups joined by '+', each "NxL" or "NxL@P": N sequences of L new
// tokens on P cached ones ("32x128", "64x1@512" = a decode step of 64
// sequences, "4x512+60x1@512" = prompts joining decoding sequences).
struct Group {
  uint32_t n = 0, len = 0, past = 0;
};

std::vector<Group> parse_batch(const std::string& spec) {
  std::vector<Group> g;
  size_t at = 0;
  while (at < spec.size()) {
    size_t end = spec.find('+', at);
    if (end == std::string::npos) end = spec.size();
    Group x;
    if (std::sscanf(spec.substr(at, end - at).c_str(), "%ux%u@%u", &x.n, &x.len, &x.past) < 2 || !x.n || !x.len) {
      std::fprintf(stderr, "bad batch spec '%s' (want NxL[@P][+NxL[@P]...])\n", spec.c_str());
      std::exit(2);
    }
    g.push_back(x);
    at = end + 1;
  }
  return g;
}

// One batch step against the same pieces through qsp_prefill, one context at
// a time (each call waits for its result, as a caller of qsp_prefill does),
// both from the same cache state; medians of `reps` after a warm-up.
void bench_batch(const Shape& s, const BenchType& bt, const std::string& spec, int reps, std::vector<std::string>& table) {
  const std::vector<Group> groups = parse_batch(spec);
  uint32_t max_seq = 16, n_tok = 0;
  std::vector<uint32_t> len, past;
  for (const Group& g : groups)
    for (uint32_t i = 0; i < g.n; ++i) {
      len.push_back(g.len);
      past.push_back(g.past);
      max_seq = std::max(max_seq, g.len + g.past + 16);
      n_tok += g.len;
    }
  const uint32_t S = uint32_t(len.size());
  std::vector<qsp_context*> ctx(S);
  for (uint32_t i = 0; i < S; ++i) ctx[i] = make_qsp(s, bt, max_seq, /*generate=*/i == 0);
  std::vector<std::vector<int32_t>> tok(S);
  for (uint32_t i = 0; i < S; ++i) {
    tok[i].resize(past[i] + len[i]);
    for (uint32_t t = 0; t < tok[i].size(); ++t) tok[i][t] = int32_t(((i + 1) * 7919u + t * 2654435761u) % s.vocab);
  }
  // Every cache back to its `past` tokens (built with one batch).
  const auto reset = [&] {
    std::vector<qsp_batch_seq> pre;
    for (uint32_t i = 0; i < S; ++i) {
      QSP_QK(qsp_kv_clear(ctx[i]));
      if (!past[i]) continue;
      qsp_batch_seq b{};
      b.ctx = ctx[i];
      b.tokens = tok[i].data();
      b.n_tokens = past[i];
      pre.push_back(b);
    }
    if (!pre.empty()) QSP_QK(qsp_prefill_batch(pre.data(), uint32_t(pre.size()), sizeof(qsp_batch_seq)));
  };
  std::vector<qsp_batch_seq> seqs(S);
  for (uint32_t i = 0; i < S; ++i) {
    seqs[i] = qsp_batch_seq{};
    seqs[i].ctx = ctx[i];
    seqs[i].tokens = tok[i].data() + past[i];
    seqs[i].n_tokens = len[i];
  }
  std::vector<double> tb, ts;
  for (int r = 0; r < reps + 1; ++r) {
    reset();
    double t0 = now_ms();
    QSP_QK(qsp_prefill_batch(seqs.data(), S, sizeof(qsp_batch_seq)));
    const double b = now_ms() - t0;
    reset();
    t0 = now_ms();
    for (uint32_t i = 0; i < S; ++i) QSP_QK(qsp_prefill(ctx[i], seqs[i].tokens, len[i]));
    const double one = now_ms() - t0;
    if (r) tb.push_back(b), ts.push_back(one);
  }
  const double mb = median(tb), ms = median(ts);
  char line[512];
  std::snprintf(line, sizeof line, "| %-10s | %-4s | batch %-16s | %4u | %6u | %9.3f | %10.0f | %9.3f | %10.0f | %5.2fx |",
                s.name, bt.name().c_str(), spec.c_str(), S, n_tok, mb, n_tok / mb * 1e3, ms, n_tok / ms * 1e3,
                ms / mb);
  std::puts(line);
  table.push_back(line);
  for (qsp_context* c : ctx) qsp_context_destroy(c);
}

// ---- the cuBLAS fp16 baseline -----------------------------------------------------
__global__ void fill_half(__half* p, size_t n, float sd, uint64_t seed) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = float(x & 0xffffff) / 16777216.0f - 0.5f;  // uniform, sd = 1/sqrt(12)
    p[i] = __float2half(u * sd * 3.4641f);
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

struct Baseline {
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

  Baseline(const Shape& sh, uint32_t chunk, uint32_t max_seq_) : s(sh), max_seq(max_seq_) {
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

  ~Baseline() {
    for (auto* v : {&wqkv, &wo, &wgu, &wd})
      for (__half* p : *v) cudaFree(p);
    for (void* p : {(void*)lm, (void*)norms, (void*)x, (void*)qkv, (void*)logits, (void*)xn, (void*)q, (void*)att,
                    (void*)gu, (void*)act, (void*)kc, (void*)vc, (void*)d_past, attn_scratch})
      if (p) cudaFree(p);
    cublasDestroy(blas);
    cudaStreamDestroy(stream);
  }
};

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> v;
  for (size_t at = 0; at <= list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    if (end > at) v.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return v;
}

std::vector<uint32_t> parse_list(const char* s) {
  std::vector<uint32_t> v;
  for (const char* p = s; *p;) {
    v.push_back(uint32_t(std::strtoul(p, const_cast<char**>(&p), 10)));
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace

// --gguf: the model of a GGUF file with its own weights (the tool's path:
// qsp_context_create_from_gguf), timed exactly as the synthetic models are,
// so a difference between `qsp bench` and this program can be split into
// weights (this row against the synthetic one) and harness (this row
// against `qsp bench` on the same file).
void bench_file(const std::string& path, const std::vector<uint32_t>& lengths, uint32_t max_seq, int reps,
                const std::vector<int32_t>& tokens, std::vector<std::string>& table) {
  qsp_gguf* g = nullptr;
  qsp_context_params p;
  qsp_context_params_init(&p);
  if (qsp_gguf_open(path.c_str(), &g) != QSP_OK || qsp_gguf_fill_params(g, &p) != QSP_OK) {
    std::fprintf(stderr, "bench_prefill: %s: %s\n", path.c_str(), qsp_gguf_last_error());
    qsp_gguf_close(g);
    std::exit(1);
  }
  qsp_gguf_close(g);
  const Shape s{path.c_str(), p.n_layers, p.hidden_size, p.intermediate_size, p.n_heads, p.n_kv_heads, p.head_dim,
                p.vocab_size};
  qsp_context_params exec;
  qsp_context_params_init(&exec);
  exec.backend = QSP_BACKEND_CUDA;
  exec.max_seq_len = max_seq;
  qsp_context* ctx = nullptr;
  const double t0 = now_ms();
  if (qsp_context_create_from_gguf(path.c_str(), &exec, &ctx) != QSP_OK) {
    std::fprintf(stderr, "bench_prefill: %s: %s\n", path.c_str(), qsp_gguf_last_error());
    std::exit(1);
  }
  std::printf("  [qsp] loaded %s in %.1f s\n", path.c_str(), (now_ms() - t0) / 1e3);
  const std::string name = path.substr(path.find_last_of('/') + 1);
  char line[512];
  std::vector<int32_t> tok(tokens.size());
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = tokens[i] % int32_t(p.vocab_size);
  for (uint32_t n : lengths) {
    const double ms = time_qsp(ctx, n, 0, reps_for(n, reps), tok);
    std::snprintf(line, sizeof line, "| %-10s | file | qsp    | %5u | %9.3f | %10.0f | %7.1f |", name.c_str(), n, ms,
                  n / ms * 1e3, total_flops(s, n, 0) / ms / 1e9);
    std::puts(line);
    table.push_back(line);
  }
  qsp_context_destroy(ctx);
}

// --type: "all" (q4_0 and q8_0) or a comma list of any quantized names (q4_K, ...).
std::vector<BenchType> bench_types(const std::string& type) {
  if (type == "all") return {BenchType{QSP_DTYPE_Q4_0}, BenchType{QSP_DTYPE_Q8_0}};
  std::vector<BenchType> v;
  for (size_t at = 0; at <= type.size();) {
    size_t end = type.find(',', at);
    if (end == std::string::npos) end = type.size();
    const std::string name = type.substr(at, end - at);
    bool found = false;
    for (const BlockScales& x : kBlockScales)
      if (name == qsp_dtype_name(x.dtype)) v.push_back(BenchType{x.dtype}), found = true;
    // A llama.cpp mix (q4_k_m, ...): its own spelling is lower case, so q4_k
    // above (q4_K) and the file types never collide.
    const qsp::gguf::SynthFileType* ft = found ? nullptr : qsp::gguf::find_synth_file_type(name);
    if (ft && name == ft->name) v.push_back(BenchType{ft->base, ft}), found = true;
    if (!found) {
      std::fprintf(stderr, "bench_prefill: unknown --type %s\n", name.c_str());
      std::exit(2);
    }
    at = end + 1;
  }
  return v;
}

// ---- Tensor parallelism (--tp) ----------------------------------------------------
// Entries "N" (a shard per GPU 0..N-1) and "Ns" (N shards in turn on GPU 0),
// each timed like the plain rows, with its speedup over the first entry.
void bench_tp(const Shape& s, const BenchType& bt, const std::vector<std::string>& tp,
              const std::vector<uint32_t>& lengths, uint32_t max_seq, int reps, const std::vector<int32_t>& tokens,
              std::vector<std::string>& table) {
  int gpus = 0;
  QSP_CK(cudaGetDeviceCount(&gpus));
  std::vector<double> first;  // ms of the first entry per length, then the decode step
  char line[512];
  for (const std::string& e : tp) {
    const bool in_turn = !e.empty() && e.back() == 's';
    const uint32_t n = uint32_t(std::atoi(e.c_str()));
    if (n < 1 || n > 32) {
      std::fprintf(stderr, "bad --tp entry '%s' (want N or Ns, N in 1..32)\n", e.c_str());
      std::exit(2);
    }
    if (!in_turn && int(n) > gpus) {
      std::printf("  [tp %s] skipped: %d GPU(s)\n", e.c_str(), gpus);
      continue;
    }
    const uint32_t mask = in_turn ? 0x1u : (n == 32 ? 0xffffffffu : (1u << n) - 1);
    qsp_context* ctx = make_qsp(s, bt, max_seq, true, n, n > 1 ? mask : 0);
    std::vector<double> ms;
    for (uint32_t len : lengths) ms.push_back(time_qsp(ctx, len, 0, reps_for(len, reps), tokens));
    ms.push_back(time_qsp(ctx, 1, 2048, reps, tokens));  // the decode step at 2048
    if (first.empty()) first = ms;
    const std::string label = in_turn ? "tp " + e + " (1 GPU)" : "tp " + e;
    for (size_t i = 0; i < ms.size(); ++i) {
      const bool decode = i == lengths.size();
      const uint32_t len = decode ? 1 : lengths[i];
      std::snprintf(line, sizeof line, "| %-10s | %-4s | %-14s | %6s | %9.3f | %10.0f | %7.1f | %5.2fx |", s.name,
                    bt.name().c_str(), label.c_str(), decode ? "1@2048" : std::to_string(len).c_str(), ms[i],
                    len / ms[i] * 1e3, total_flops(s, len, decode ? 2048 : 0) / ms[i] / 1e9, first[i] / ms[i]);
      std::puts(line);
      table.push_back(line);
    }
    qsp_context_destroy(ctx);
  }
}

int main(int argc, char** argv) {
  std::string model = "all", type = "all";
  std::vector<uint32_t> lengths = {1, 128, 512, 2048, 8192};
  int reps = 10;
  bool baseline = true;
  std::vector<std::string> batches;  // --batch specs: then only those run
  std::vector<std::string> files;    // --gguf files: then only those run
  std::vector<std::string> tp;       // --tp entries: then only those run
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--type" && i + 1 < argc) type = argv[++i];
    else if (a == "--tokens" && i + 1 < argc) lengths = parse_list(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--no-baseline") baseline = false;
    else if (a == "--gguf" && i + 1 < argc) files = split_commas(argv[++i]);
    else if (a == "--batch" && i + 1 < argc) batches = split_commas(argv[++i]);
    else if (a == "--tp" && i + 1 < argc) tp = split_commas(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--model 0.6b|8b|all] [--type q4_0|q8_0|all] [--tokens 1,128,...] [--reps N] [--no-baseline] [--batch 32x128,64x1@512,4x512+60x1@512] [--gguf FILE,...] [--tp 1,2,4,2s]\n", argv[0]);
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it comes: a timed-out run keeps them
  if (!qsp_backend_available(QSP_BACKEND_CUDA)) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  QSP_CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench_prefill: qsp %s on %s (%d SMs)\n", qsp_version_string(), prop.name, prop.multiProcessorCount);
  const uint32_t max_len = *std::max_element(lengths.begin(), lengths.end());
  const uint32_t max_seq = max_len + 2048 + 16;
  std::vector<int32_t> tokens(max_seq);
  for (uint32_t i = 0; i < max_seq; ++i) tokens[i] = int32_t((i * 2654435761u) % 151936u);

  std::vector<std::string> table;
  char line[512];
  if (!files.empty()) {
    for (const std::string& f : files) bench_file(f, lengths, max_seq, reps, tokens, table);
    return 0;
  }
  if (!tp.empty()) {
    for (const Shape& s : kShapes) {
      if (model != "all" && std::string(s.name).find(model) == std::string::npos) continue;
      for (const BenchType& bt : bench_types(type)) bench_tp(s, bt, tp, lengths, max_seq, reps, tokens, table);
    }
    std::printf("\n| model | type | split | tokens | ms | tokens/s | TOPS | speedup |\n|---|---|---|---|---|---|---|---|\n");
    for (const std::string& l : table) std::puts(l.c_str());
    return 0;
  }
  if (!batches.empty()) {
    for (const Shape& s : kShapes) {
      if (model != "all" && std::string(s.name).find(model) == std::string::npos) continue;
      for (const BenchType& bt : bench_types(type)) {
        for (const std::string& b : batches) bench_batch(s, bt, b, reps, table);
      }
    }
    std::printf("\n| model | type | batch | seqs | tokens | batch ms | tokens/s | one at a time ms | tokens/s | speedup |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& l : table) std::puts(l.c_str());
    return 0;
  }
  for (const Shape& s : kShapes) {
    if (model != "all" && std::string(s.name).find(model) == std::string::npos) continue;
    for (const BenchType& bt : bench_types(type)) {
      qsp_context* ctx = make_qsp(s, bt, max_seq);
      for (uint32_t n : lengths) {
        const double ms = time_qsp(ctx, n, 0, reps_for(n, reps), tokens);
        std::snprintf(line, sizeof line, "| %-10s | %-4s | qsp    | %5u | %9.3f | %10.0f | %7.1f |", s.name,
                      bt.name().c_str(), n, ms, n / ms * 1e3, total_flops(s, n, 0) / ms / 1e9);
        std::puts(line);
        table.push_back(line);
      }
      // The decode step deep into a prompt (graph replay, attention over 2048 keys).
      const double dms = time_qsp(ctx, 1, 2048, reps, tokens);
      std::snprintf(line, sizeof line, "| %-10s | %-4s | qsp    | 1@2048 | %8.3f | %10.0f | %7.1f |", s.name,
                    bt.name().c_str(), dms, 1e3 / dms, total_flops(s, 1, 2048) / dms / 1e9);
      std::puts(line);
      table.push_back(line);
      qsp_context_destroy(ctx);
    }
    if (baseline) {
      const uint32_t chunk = std::min<uint32_t>(max_len, 4096);
      Baseline b(s, chunk, max_seq);
      for (uint32_t n : lengths) {
        // Chunked like qsp above 4096 tokens, so both pay the same attention.
        double ms = 0;
        for (uint32_t done = 0; done < n; done += chunk) {
          const uint32_t c = std::min(chunk, n - done);
          ms += b.time(int(c), int(done), reps_for(n, reps));
        }
        std::snprintf(line, sizeof line, "| %-10s | f16  | cublas | %5u | %9.3f | %10.0f | %7.1f |", s.name, n, ms,
                      n / ms * 1e3, total_flops(s, n, 0) / ms / 1e9);
        std::puts(line);
        table.push_back(line);
      }
    }
  }
  std::printf("\n| model      | type | engine | tokens | ms | tokens/s | TOPS |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& l : table) std::puts(l.c_str());
  return 0;
}
