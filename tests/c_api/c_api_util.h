/*
 * c_api_util.h — the helpers of tests/test_c_api.c, in C99: the check macros
 * (failures are counted and printed, never abort), deterministic
 * pseudo-random floats (xorshift64*), fp16 conversion and Q8_0 / Q4_0
 * quantizers written independently of the library, the test's own small
 * model (tied embedding) and its upload. Header only, every function static,
 * for that one program (its -Wall -Werror build checks that all are used).
 */
#ifndef QSP_TESTS_C_API_UTIL_H
#define QSP_TESTS_C_API_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsp/qsp.h"

/* ---- Checks ------------------------------------------------------------ */

static int g_failures = 0;
static int g_checks = 0;

#define EXPECT(cond)                                                          \
  do {                                                                        \
    ++g_checks;                                                               \
    if (!(cond)) {                                                            \
      ++g_failures;                                                           \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);     \
    }                                                                         \
  } while (0)

/* A call that must succeed; on failure prints the status and the message. */
#define EXPECT_OK(call)                                                            \
  do {                                                                             \
    qsp_status st_ = (call);                                                       \
    ++g_checks;                                                                    \
    if (st_ != QSP_OK) {                                                           \
      ++g_failures;                                                                \
      fprintf(stderr, "%s:%d: FAILED: %s -> %d (%s): %s\n", __FILE__, __LINE__,   \
              #call, (int)st_, qsp_status_string(st_), qsp_last_error());          \
    }                                                                              \
  } while (0)

/* A call that must fail with `want`, leaving a message that contains `needle`
 * on the thread and (when ctx is not NULL) on the context. */
#define EXPECT_ERR(ctx, want, needle, call)                                            \
  do {                                                                                 \
    qsp_status st_ = (call);                                                           \
    ++g_checks;                                                                        \
    if (st_ != (want)) {                                                               \
      ++g_failures;                                                                    \
      fprintf(stderr, "%s:%d: FAILED: %s -> %d (%s), expected %d (%s)\n", __FILE__,   \
              __LINE__, #call, (int)st_, qsp_status_string(st_), (int)(want),          \
              qsp_status_string(want));                                                \
    } else {                                                                           \
      check_message(__LINE__, #call, (ctx), (needle));                                 \
    }                                                                                  \
  } while (0)

static void check_message(int line, const char* call, const qsp_context* ctx, const char* needle) {
  const char* msg = qsp_last_error();
  ++g_checks;
  if (msg == NULL || msg[0] == '\0' || strstr(msg, needle) == NULL) {
    ++g_failures;
    fprintf(stderr, "%s:%d: FAILED: %s: message \"%s\" should name \"%s\"\n", __FILE__, line, call,
            msg ? msg : "(null)", needle);
    return;
  }
  if (ctx != NULL && strcmp(qsp_context_last_error(ctx), msg) != 0) {
    ++g_failures;
    fprintf(stderr, "%s:%d: FAILED: %s: context message \"%s\" differs from \"%s\"\n", __FILE__, line,
            call, qsp_context_last_error(ctx), msg);
  }
}

/* ---- Pseudo-random floats, fp16, quantizers ----------------------------- */

static uint64_t xorshift64s(uint64_t* s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [-1, 1), exactly k * 2^-23 - 1. */
static float uniform(uint64_t* s) { return (float)(xorshift64s(s) >> 40) * (1.0f / 8388608.0f) - 1.0f; }

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* float -> IEEE half, round to nearest even; overflow to inf; NaN stays NaN. */
static uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  uint32_t e, m, q, rem, half, shift;
  if (ax >= 0x7F800000u) return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 rounds to inf */
  e = ax >> 23;
  if (e < 113) { /* below 2^-14: a half subnormal (units of 2^-24) or zero */
    if (e < 102) return (uint16_t)sign;
    m = (ax & 0x7FFFFFu) | 0x800000u;
    shift = 126 - e;
    q = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return (uint16_t)(sign | q);
  }
  m = ax & 0x7FFFFFu;
  q = ((e - 112u) << 10) | (m >> 13);
  rem = m & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return (uint16_t)(sign | q);
}

static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  float v;
  if (e == 0x1F) return bits_float(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    v = (float)m * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

static void put_u16(unsigned char* p, uint16_t v) {
  p[0] = (unsigned char)(v & 0xFF);
  p[1] = (unsigned char)(v >> 8);
}

static uint16_t get_u16(const unsigned char* p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* GGML's quantize_row_q8_0_ref: d = amax / 127, q = round(x / d). */
static void quantize_q8_0(const float* x, unsigned char* out, size_t n) {
  size_t b;
  int j;
  for (b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0.0f, d, id;
    for (j = 0; j < 32; ++j)
      if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    d = amax / 127.0f;
    id = d != 0.0f ? 1.0f / d : 0.0f;
    put_u16(out, float_to_half(d));
    for (j = 0; j < 32; ++j) {
      const float v = x[j] * id;
      out[2 + j] = (unsigned char)(signed char)roundf(v);
    }
  }
}

/* GGML's quantize_row_q4_0_ref: d = max / -8 (max: the value of largest |x|),
 * q = min(15, (int8)(x / d + 8.5)); elements j < 16 in the low nibbles. */
static void quantize_q4_0(const float* x, unsigned char* out, size_t n) {
  size_t b;
  int j;
  for (b = 0; b < n / 32; ++b, x += 32, out += 18) {
    float amax = 0.0f, mx = 0.0f, d, id;
    for (j = 0; j < 32; ++j)
      if (fabsf(x[j]) > amax) {
        amax = fabsf(x[j]);
        mx = x[j];
      }
    d = mx / -8.0f;
    id = d != 0.0f ? 1.0f / d : 0.0f;
    put_u16(out, float_to_half(d));
    for (j = 0; j < 16; ++j) {
      const float v0 = x[j] * id, v1 = x[j + 16] * id;
      const float w0 = v0 + 8.5f, w1 = v1 + 8.5f;
      int q0 = (signed char)w0, q1 = (signed char)w1;
      if (q0 > 15) q0 = 15;
      if (q1 > 15) q1 = 15;
      out[2 + j] = (unsigned char)(q0 | (q1 << 4));
    }
  }
}

/* Dequantizes one row of n values. */
static void dequantize(int32_t dtype, const unsigned char* p, float* out, size_t n) {
  size_t b, i;
  int j;
  if (dtype == QSP_DTYPE_F32) {
    for (i = 0; i < n; ++i) {
      uint32_t u = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
                   ((uint32_t)p[4 * i + 3] << 24);
      out[i] = bits_float(u);
    }
  } else if (dtype == QSP_DTYPE_F16) {
    for (i = 0; i < n; ++i) out[i] = half_to_float(get_u16(p + 2 * i));
  } else if (dtype == QSP_DTYPE_Q8_0) {
    for (b = 0; b < n / 32; ++b) {
      const float d = half_to_float(get_u16(p + 34 * b));
      for (j = 0; j < 32; ++j) out[32 * b + j] = d * (float)(signed char)p[34 * b + 2 + j];
    }
  } else if (dtype == QSP_DTYPE_Q4_0) {
    for (b = 0; b < n / 32; ++b) {
      const float d = half_to_float(get_u16(p + 18 * b));
      for (j = 0; j < 16; ++j) {
        out[32 * b + j] = d * (float)((p[18 * b + 2 + j] & 0x0F) - 8);
        out[32 * b + j + 16] = d * (float)((p[18 * b + 2 + j] >> 4) - 8);
      }
    }
  }
}

/* ---- Host tensors ------------------------------------------------------- */

typedef struct {
  qsp_tensor t;
  unsigned char* bytes;
} host_tensor;

/* A tensor of uniform values mean + scale * U[-1, 1), stored as dtype. */
static int make_tensor(host_tensor* ht, uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols, float mean,
                       float scale, uint64_t* rng) {
  uint64_t r, c;
  float* row = (float*)malloc((size_t)cols * sizeof(float));
  const uint64_t row_bytes = qsp_dtype_size(dtype, 1, cols);
  memset(ht, 0, sizeof *ht);
  ht->bytes = (unsigned char*)malloc((size_t)(row_bytes * rows));
  if (!row || !ht->bytes || row_bytes == 0) {
    free(row);
    return 0;
  }
  for (r = 0; r < rows; ++r) {
    unsigned char* dst = ht->bytes + r * row_bytes;
    for (c = 0; c < cols; ++c) row[c] = mean + scale * uniform(rng);
    if (dtype == QSP_DTYPE_Q8_0) {
      quantize_q8_0(row, dst, (size_t)cols);
    } else if (dtype == QSP_DTYPE_Q4_0) {
      quantize_q4_0(row, dst, (size_t)cols);
    } else if (dtype == QSP_DTYPE_F16) {
      for (c = 0; c < cols; ++c) put_u16(dst + 2 * c, float_to_half(row[c]));
    } else {
      for (c = 0; c < cols; ++c) {
        const uint32_t u = float_bits(row[c]);
        dst[4 * c] = (unsigned char)u;
        dst[4 * c + 1] = (unsigned char)(u >> 8);
        dst[4 * c + 2] = (unsigned char)(u >> 16);
        dst[4 * c + 3] = (unsigned char)(u >> 24);
      }
    }
  }
  free(row);
  ht->t.handle = handle;
  ht->t.dtype = dtype;
  ht->t.n_rows = rows;
  ht->t.n_cols = cols;
  ht->t.data = ht->bytes;
  ht->t.n_bytes = row_bytes * rows;
  return 1;
}

/* ---- The model ---------------------------------------------------------- */

#define N_LAYERS 2
#define HIDDEN 64
#define FFN 128
#define N_HEADS 4
#define N_KV 2
#define HEAD_DIM 16
#define VOCAB 160
#define MAX_SEQ 48
#define HANDLE_BASE 0xC0A1000000000000ull

typedef struct {
  host_tensor layer[N_LAYERS][11]; /* in qsp_layer_weights order */
  host_tensor embd, out_norm;      /* the LM head is the embedding (tied) */
} model;

static int make_model(model* m) {
  uint64_t rng = 0x0123456789ABCDEFull, h = HANDLE_BASE;
  const float sh = 0.6f / sqrtf((float)HIDDEN) * 1.7f, sq = 0.6f / sqrtf((float)(N_HEADS * HEAD_DIM)) * 1.7f,
              sf = 0.6f / sqrtf((float)FFN) * 1.7f;
  int l, ok = 1;
  for (l = 0; l < N_LAYERS; ++l) {
    const int32_t wt = l % 2 == 0 ? QSP_DTYPE_Q8_0 : QSP_DTYPE_Q4_0;
    host_tensor* L = m->layer[l];
    ok &= make_tensor(&L[0], ++h, QSP_DTYPE_F32, 1, HIDDEN, 1.0f, 0.3f, &rng);
    ok &= make_tensor(&L[1], ++h, wt, N_HEADS * HEAD_DIM, HIDDEN, 0.0f, sh, &rng);
    ok &= make_tensor(&L[2], ++h, wt, N_KV * HEAD_DIM, HIDDEN, 0.0f, sh, &rng);
    ok &= make_tensor(&L[3], ++h, wt, N_KV * HEAD_DIM, HIDDEN, 0.0f, sh, &rng);
    ok &= make_tensor(&L[4], ++h, QSP_DTYPE_F32, 1, HEAD_DIM, 1.0f, 0.3f, &rng);
    ok &= make_tensor(&L[5], ++h, QSP_DTYPE_F16, 1, HEAD_DIM, 1.0f, 0.3f, &rng);
    ok &= make_tensor(&L[6], ++h, wt, HIDDEN, N_HEADS * HEAD_DIM, 0.0f, sq, &rng);
    ok &= make_tensor(&L[7], ++h, QSP_DTYPE_F16, 1, HIDDEN, 1.0f, 0.3f, &rng);
    ok &= make_tensor(&L[8], ++h, wt, FFN, HIDDEN, 0.0f, sh, &rng);
    ok &= make_tensor(&L[9], ++h, wt, FFN, HIDDEN, 0.0f, sh, &rng);
    ok &= make_tensor(&L[10], ++h, wt, HIDDEN, FFN, 0.0f, sf, &rng);
  }
  ok &= make_tensor(&m->embd, ++h, QSP_DTYPE_Q8_0, VOCAB, HIDDEN, 0.0f, 0.5f, &rng);
  ok &= make_tensor(&m->out_norm, ++h, QSP_DTYPE_F32, 1, HIDDEN, 1.0f, 0.3f, &rng);
  return ok;
}

static void free_model(model* m) {
  int l, s;
  for (l = 0; l < N_LAYERS; ++l)
    for (s = 0; s < 11; ++s) free(m->layer[l][s].bytes);
  free(m->embd.bytes);
  free(m->out_norm.bytes);
}

static qsp_layer_weights layer_weights(const model* m, int l) {
  qsp_layer_weights w;
  const host_tensor* L = m->layer[l];
  qsp_layer_weights_init(&w);
  w.attn_norm = L[0].t;
  w.wq = L[1].t;
  w.wk = L[2].t;
  w.wv = L[3].t;
  w.q_norm = L[4].t;
  w.k_norm = L[5].t;
  w.wo = L[6].t;
  w.ffn_norm = L[7].t;
  w.w_gate = L[8].t;
  w.w_up = L[9].t;
  w.w_down = L[10].t;
  return w;
}

static void model_params(qsp_context_params* p) {
  qsp_context_params_init(p);
  p->n_layers = N_LAYERS;
  p->hidden_size = HIDDEN;
  p->intermediate_size = FFN;
  p->n_heads = N_HEADS;
  p->n_kv_heads = N_KV;
  p->head_dim = HEAD_DIM;
  p->vocab_size = VOCAB;
  p->max_seq_len = MAX_SEQ;
  p->backend = QSP_BACKEND_CPU;
  p->n_threads = 2;
}

static qsp_status upload_model(qsp_context* ctx, const model* m) {
  qsp_output_weights o;
  qsp_status st;
  int l;
  for (l = 0; l < N_LAYERS; ++l) {
    qsp_layer_weights w = layer_weights(m, l);
    st = qsp_upload_layer(ctx, (uint32_t)l, &w);
    if (st != QSP_OK) return st;
  }
  st = qsp_upload_embedding(ctx, &m->embd.t);
  if (st != QSP_OK) return st;
  qsp_output_weights_init(&o);
  o.norm = m->out_norm.t;
  o.lm_head = m->embd.t; /* tied: the embedding's handle */
  return qsp_upload_output(ctx, &o);
}

static qsp_context* create_model_context(const model* m) {
  qsp_context_params p;
  qsp_context* ctx = NULL;
  model_params(&p);
  EXPECT_OK(qsp_context_create(&p, &ctx));
  if (ctx == NULL) return NULL;
  EXPECT_OK(upload_model(ctx, m));
  return ctx;
}

static qsp_cache_stats cache_stats(void) {
  qsp_cache_stats s;
  qsp_cache_stats_init(&s);
  EXPECT_OK(qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &s));
  return s;
}

/* ---- Helpers ------------------------------------------------------------ */

static int copy_logits(qsp_context* ctx, float* out) {
  return qsp_copy_logits(ctx, out, VOCAB) == QSP_OK;
}

static double rel_l2(const float* a, const float* ref, size_t n) {
  double num = 0.0, den = 0.0;
  size_t i;
  for (i = 0; i < n; ++i) {
    const double d = (double)a[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  return den > 0.0 ? sqrt(num / den) : (num > 0.0 ? 1.0 : 0.0);
}

static int32_t argmax(const float* v, size_t n) {
  size_t i, best = 0;
  for (i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return (int32_t)best;
}

typedef struct {
  int count;
  int max_level_seen;
  char last[256];
} log_capture;

static void capture_log(int32_t level, const char* message, void* user_data) {
  log_capture* c = (log_capture*)user_data;
  ++c->count;
  if (level > c->max_level_seen) c->max_level_seen = level;
  if (message) {
    strncpy(c->last, message, sizeof c->last - 1);
    c->last[sizeof c->last - 1] = '\0';
  }
}

#endif /* QSP_TESTS_C_API_UTIL_H */
