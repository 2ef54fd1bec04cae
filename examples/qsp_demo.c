/*
 * qsp_demo — the main job until the GGUF loader and the `qsp` tool land:
 * builds a small random Qwen3-style model in memory, uploads it through the
 * public C API, prefills a prompt and prints time, tokens/s and the top-5
 * logits. It runs on the GPU when one is usable and on the CPU otherwise,
 * and says which.
 *
 * usage: qsp_demo [n_tokens] [cpu|cuda|auto]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qsp/qsp.h"

/* ---- deterministic random weights -------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double rng_uniform(void) { /* xorshift64*, in (0, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return ((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) + 1e-17;
}
static float rng_normal(float mean, float sd) {
  return mean + sd * (float)(sqrt(-2.0 * log(rng_uniform())) * cos(6.283185307179586 * rng_uniform()));
}

static uint16_t half_from_float(float f) { /* round to nearest even, normal range */
  uint32_t x;
  uint32_t sign, mant, rest;
  int32_t exp;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  mant = x & 0x7fffffu;
  if (exp <= 0) return (uint16_t)sign; /* tiny scales flush to zero: fine for a demo */
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  rest = mant & 0x1fffu;
  mant >>= 13;
  x = sign | ((uint32_t)exp << 10) | mant;
  if (rest > 0x1000u || (rest == 0x1000u && (mant & 1u))) ++x;
  return (uint16_t)x;
}

/* Fills a Q4_0 (18-byte blocks) or F32 tensor with N(mean, sd) values. */
static void* make_tensor(qsp_tensor* t, uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols, float mean,
                         float sd) {
  uint64_t r, b, j, nb = cols / 32;
  unsigned char* p;
  t->handle = handle;
  t->dtype = dtype;
  t->reserved = 0;
  t->n_rows = rows;
  t->n_cols = cols;
  t->n_bytes = qsp_dtype_size(dtype, rows, cols);
  p = (unsigned char*)malloc((size_t)t->n_bytes);
  if (!p) return NULL;
  t->data = p;
  if (dtype == QSP_DTYPE_F32) {
    float* f = (float*)p;
    for (r = 0; r < rows * cols; ++r) f[r] = rng_normal(mean, sd);
    return p;
  }
  for (r = 0; r < rows; ++r) {
    for (b = 0; b < nb; ++b) {
      float x[32], amax = 0.0f, max = 0.0f, d, id;
      uint16_t h;
      unsigned char* blk = p + (r * nb + b) * 18;
      for (j = 0; j < 32; ++j) {
        x[j] = rng_normal(mean, sd);
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
      }
      d = max / -8.0f;
      id = d != 0.0f ? 1.0f / d : 0.0f;
      h = half_from_float(d);
      memcpy(blk, &h, 2);
      for (j = 0; j < 16; ++j) {
        int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
        q0 = q0 > 15 ? 15 : q0;
        q1 = q1 > 15 ? 15 : q1;
        blk[2 + j] = (unsigned char)(q0 | (q1 << 4));
      }
    }
  }
  return p;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                            \
  do {                                                                                         \
    qsp_status st_ = (call);                                                                   \
    if (st_ != QSP_OK) {                                                                       \
      fprintf(stderr, "qsp_demo: %s failed: %s (%s)\n", #call, qsp_status_string(st_), qsp_last_error()); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

int main(int argc, char** argv) {
  /* A small Qwen3-shaped model: 4 layers, hidden 512, 8 q / 4 kv heads of 64. */
  const uint32_t L = 4, H = 512, F = 1536, NH = 8, NKV = 4, D = 64, VOCAB = 8192;
  uint32_t n_tokens = argc > 1 ? (uint32_t)atoi(argv[1]) : 256, l, i, top[5];
  const char* want = argc > 2 ? argv[2] : "auto";
  qsp_context_params p;
  qsp_context* ctx = NULL;
  qsp_context_info info;
  qsp_output_weights out;
  qsp_tensor embd;
  int32_t* tokens;
  const float* logits;
  uint32_t n_vocab, kv_len;
  int32_t greedy;
  double t0, t1;
  uint64_t h = 1000;
  void* keep[64];
  int n_keep = 0;

  if (n_tokens == 0 || n_tokens > 4096) {
    fprintf(stderr, "qsp_demo: n_tokens must be in 1..4096\n");
    return 2;
  }
  qsp_context_params_init(&p);
  p.n_layers = L;
  p.hidden_size = H;
  p.intermediate_size = F;
  p.n_heads = NH;
  p.n_kv_heads = NKV;
  p.head_dim = D;
  p.vocab_size = VOCAB;
  p.max_seq_len = 4096;
  p.rope_theta = 1e6f;
  p.rope_style = QSP_ROPE_NEOX;
  p.qk_norm = 1;
  p.backend = strcmp(want, "cpu") == 0 ? QSP_BACKEND_CPU : strcmp(want, "cuda") == 0 ? QSP_BACKEND_CUDA : QSP_BACKEND_AUTO;
  printf("qsp %s — demo on a random Qwen3-style model (%u layers, hidden %u, Q4_0)\n", qsp_version_string(), L, H);
  if (p.backend == QSP_BACKEND_AUTO && !qsp_backend_available(QSP_BACKEND_CUDA))
    printf("no CUDA device found: running on the CPU reference backend\n");
  CHECK(qsp_context_create(&p, &ctx));
  qsp_context_info_init(&info);
  CHECK(qsp_context_get_info(ctx, &info));
  printf("backend: %s on %s\n", info.backend == QSP_BACKEND_CUDA ? "CUDA" : "CPU", info.device_name);

  t0 = now_s();
  for (l = 0; l < L; ++l) {
    qsp_layer_weights w;
    const float sh = 0.6f / sqrtf((float)H), sf = 0.6f / sqrtf((float)F);
    qsp_layer_weights_init(&w);
    keep[n_keep++] = make_tensor(&w.attn_norm, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f);
    keep[n_keep++] = make_tensor(&w.wq, ++h, QSP_DTYPE_Q4_0, NH * D, H, 0.0f, sh);
    keep[n_keep++] = make_tensor(&w.wk, ++h, QSP_DTYPE_Q4_0, NKV * D, H, 0.0f, sh);
    keep[n_keep++] = make_tensor(&w.wv, ++h, QSP_DTYPE_Q4_0, NKV * D, H, 0.0f, sh);
    keep[n_keep++] = make_tensor(&w.q_norm, ++h, QSP_DTYPE_F32, 1, D, 1.0f, 0.2f);
    keep[n_keep++] = make_tensor(&w.k_norm, ++h, QSP_DTYPE_F32, 1, D, 1.0f, 0.2f);
    keep[n_keep++] = make_tensor(&w.wo, ++h, QSP_DTYPE_Q4_0, H, NH * D, 0.0f, sh);
    keep[n_keep++] = make_tensor(&w.ffn_norm, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f);
    keep[n_keep++] = make_tensor(&w.w_gate, ++h, QSP_DTYPE_Q4_0, F, H, 0.0f, sh);
    keep[n_keep++] = make_tensor(&w.w_up, ++h, QSP_DTYPE_Q4_0, F, H, 0.0f, sh);
    keep[n_keep++] = make_tensor(&w.w_down, ++h, QSP_DTYPE_Q4_0, H, F, 0.0f, sf);
    CHECK(qsp_upload_layer(ctx, l, &w));
  }
  keep[n_keep++] = make_tensor(&embd, ++h, QSP_DTYPE_Q4_0, VOCAB, H, 0.0f, 0.05f);
  CHECK(qsp_upload_embedding(ctx, &embd));
  qsp_output_weights_init(&out);
  keep[n_keep++] = make_tensor(&out.norm, ++h, QSP_DTYPE_F32, 1, H, 1.0f, 0.2f);
  out.lm_head = embd; /* tied embeddings: the same handle, stored once */
  CHECK(qsp_upload_output(ctx, &out));
  t1 = now_s();
  for (i = 0; i < (uint32_t)n_keep; ++i) free(keep[i]); /* the library copied what it keeps */
  printf("uploaded %u layers in %.1f ms\n", L, (t1 - t0) * 1e3);

  tokens = (int32_t*)malloc(sizeof(int32_t) * n_tokens);
  if (!tokens) return 1;
  for (i = 0; i < n_tokens; ++i) tokens[i] = (int32_t)(rng_uniform() * VOCAB) % (int32_t)VOCAB;
  CHECK(qsp_prefill(ctx, tokens, n_tokens)); /* warm-up */
  CHECK(qsp_kv_clear(ctx));
  t0 = now_s();
  CHECK(qsp_prefill(ctx, tokens, n_tokens));
  t1 = now_s();
  CHECK(qsp_kv_length(ctx, &kv_len));
  CHECK(qsp_get_logits(ctx, &logits, &n_vocab));
  CHECK(qsp_greedy_token(ctx, &greedy));
  printf("prefill: %u tokens in %.2f ms = %.0f tokens/s (KV cache now %u tokens)\n", n_tokens, (t1 - t0) * 1e3,
         n_tokens / (t1 - t0), kv_len);
  for (i = 0; i < 5; ++i) { /* top-5 by repeated selection */
    uint32_t v, best = 0, k;
    int used;
    float bv = -INFINITY;
    for (v = 0; v < n_vocab; ++v) {
      used = 0;
      for (k = 0; k < i; ++k) used |= top[k] == v;
      if (!used && logits[v] > bv) { bv = logits[v]; best = v; }
    }
    top[i] = best;
    printf("  top-%u: token %5u  logit %+.4f\n", i + 1, best, bv);
  }
  printf("greedy next token: %d\n", greedy);
  free(tokens);
  qsp_context_destroy(ctx);
  return 0;
}
