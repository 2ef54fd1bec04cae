/*
 * test_c_api.c — the whole public API driven from C99 (built with -std=c99
 * -Wall -Wextra -pedantic -Werror against the shared libqsp), so the header
 * stays C-clean and every entry point is linkable from C.
 *
 * It builds a tiny model from deterministic pseudo-random floats (xorshift64*)
 * with its own Q8_0 / Q4_0 quantizers and float->half conversion, uploads it
 * (tied embedding), and exercises prefill, logits, KV cache, weight cache,
 * errors, info and logging. Exit status 0 only if every check passed; each
 * failure is printed.
 *
 * usage: qsp_c_api_test [LOGITS_FILE]
 *   With LOGITS_FILE, also writes the last-token logits of the bindings' fixed
 *   "tiny-v1" model (bindings/common/MODEL.md: weights generated directly as
 *   bytes, tokens 1 7 42 100 255 0 128 64 3 200, CPU backend, 2 threads) as
 *   256 raw little-endian float32 values, for the bindings to compare against.
 */
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

/* ---- Sections ----------------------------------------------------------- */

static void test_globals(void) {
  char buf[64];
  const qsp_status codes[] = {QSP_OK,
                              QSP_ERR_INVALID_ARGUMENT,
                              QSP_ERR_STRUCT_SIZE,
                              QSP_ERR_SHAPE,
                              QSP_ERR_DTYPE,
                              QSP_ERR_OUT_OF_RANGE,
                              QSP_ERR_NOT_READY,
                              QSP_ERR_CONTEXT_FULL,
                              QSP_ERR_HANDLE_CONFLICT,
                              QSP_ERR_NO_DEVICE,
                              QSP_ERR_OUT_OF_MEMORY,
                              QSP_ERR_DEVICE_OUT_OF_MEMORY,
                              QSP_ERR_DEVICE,
                              QSP_ERR_UNSUPPORTED,
                              QSP_ERR_INTERNAL,
                              QSP_ERR_IO,
                              QSP_ERR_BAD_FORMAT};
  const size_t n_codes = sizeof codes / sizeof codes[0];
  size_t i, j;

  /* Versions. */
  EXPECT(strcmp(qsp_version_string(), QSP_VERSION_STRING) == 0);
  EXPECT(qsp_version_number() == (uint32_t)QSP_VERSION_NUMBER);
  EXPECT(qsp_abi_version() == (uint32_t)QSP_ABI_VERSION);
  sprintf(buf, "%d.%d.%d", QSP_VERSION_MAJOR, QSP_VERSION_MINOR, QSP_VERSION_PATCH);
  EXPECT(strcmp(qsp_version_string(), buf) == 0);

  /* Status strings: distinct, non-empty; unknown values say so. */
  for (i = 0; i < n_codes; ++i) {
    const char* s = qsp_status_string(codes[i]);
    EXPECT(codes[i] == -(qsp_status)i);
    EXPECT(s != NULL && s[0] != '\0');
    EXPECT(s != NULL && strcmp(s, "unknown status") != 0);
    for (j = 0; j < i; ++j) EXPECT(strcmp(s, qsp_status_string(codes[j])) != 0);
  }
  EXPECT(strcmp(qsp_status_string(1), "unknown status") == 0);
  EXPECT(strcmp(qsp_status_string(-17), "unknown status") == 0);
  EXPECT(strcmp(qsp_status_string(-1000), "unknown status") == 0);

  /* dtypes. */
  EXPECT(qsp_dtype_size(QSP_DTYPE_F32, 2, 64) == 512);
  EXPECT(qsp_dtype_size(QSP_DTYPE_F16, 2, 64) == 256);
  EXPECT(qsp_dtype_size(QSP_DTYPE_BF16, 2, 64) == 256);
  EXPECT(qsp_dtype_size(QSP_DTYPE_Q4_0, 2, 64) == 72);
  EXPECT(qsp_dtype_size(QSP_DTYPE_Q8_0, 2, 64) == 136);
  EXPECT(qsp_dtype_size(QSP_DTYPE_Q4_0, 2, 48) == 0);
  EXPECT(qsp_dtype_size(QSP_DTYPE_Q8_0, 1, 33) == 0);
  EXPECT(qsp_dtype_size(4, 2, 64) == 0);
  EXPECT(strcmp(qsp_dtype_name(QSP_DTYPE_F32), "f32") == 0);
  EXPECT(strcmp(qsp_dtype_name(QSP_DTYPE_F16), "f16") == 0);
  EXPECT(strcmp(qsp_dtype_name(QSP_DTYPE_BF16), "bf16") == 0);
  EXPECT(strcmp(qsp_dtype_name(QSP_DTYPE_Q4_0), "q4_0") == 0);
  EXPECT(strcmp(qsp_dtype_name(QSP_DTYPE_Q8_0), "q8_0") == 0);
  EXPECT(strcmp(qsp_dtype_name(77), "unknown") == 0);

  /* Backends. */
  EXPECT(qsp_backend_available(QSP_BACKEND_CPU) == 1);
  EXPECT(qsp_backend_available(QSP_BACKEND_AUTO) == 1);
  EXPECT(qsp_backend_available(QSP_BACKEND_CUDA) == 0 || qsp_backend_available(QSP_BACKEND_CUDA) == 1);
  EXPECT(qsp_backend_available(9) == 0);

  /* Our own fp16 conversion agrees with the expected bits. */
  EXPECT(float_to_half(1.0f) == 0x3C00);
  EXPECT(float_to_half(-2.0f) == 0xC000);
  EXPECT(float_to_half(65520.0f) == 0x7C00);
  EXPECT(float_to_half(5.9604644775390625e-8f) == 0x0001);
  EXPECT(float_to_half(2.98023223876953125e-8f) == 0x0000); /* tie -> even */
  EXPECT(half_to_float(0x3555) == 0.333251953125f);
}

static void test_init_functions(void) {
  qsp_context_params p;
  qsp_context_info info;
  qsp_layer_weights w;
  qsp_output_weights o;
  qsp_cache_stats s;
  memset(&p, 0xAB, sizeof p);
  qsp_context_params_init(&p);
  EXPECT(p.struct_size == sizeof p);
  EXPECT(p.backend == QSP_BACKEND_AUTO);
  EXPECT(p.n_threads == 0);
  EXPECT(p.rms_eps == 1e-6f);
  EXPECT(p.rope_theta == 1e6f);
  EXPECT(p.rope_style == QSP_ROPE_NEOX);
  EXPECT(p.qk_norm == 1);
  EXPECT(p.log_level == QSP_LOG_WARN);
  EXPECT(p.log_callback == NULL);
  EXPECT(p.reserved0 == 0 && p.reserved1 == 0);
  EXPECT(p.n_layers == 0 && p.hidden_size == 0 && p.vocab_size == 0);
  qsp_context_info_init(&info);
  EXPECT(info.struct_size == sizeof info);
  memset(&w, 0xAB, sizeof w);
  qsp_layer_weights_init(&w);
  EXPECT(w.struct_size == sizeof w && w.reserved == 0 && w.wq.handle == 0 && w.w_down.data == NULL);
  memset(&o, 0xAB, sizeof o);
  qsp_output_weights_init(&o);
  EXPECT(o.struct_size == sizeof o && o.reserved == 0 && o.lm_head.handle == 0);
  qsp_cache_stats_init(&s);
  EXPECT(s.struct_size == sizeof s);
  /* NULL-safe. */
  qsp_context_params_init(NULL);
  qsp_context_info_init(NULL);
  qsp_layer_weights_init(NULL);
  qsp_output_weights_init(NULL);
  qsp_cache_stats_init(NULL);
  qsp_context_destroy(NULL);
}

static const int32_t kPrompt[12] = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62, 64};

static void test_model(const model* m) {
  qsp_context *ctx, *ctx2;
  qsp_cache_stats s0, s1, s2, s3;
  float whole[VOCAB], other[VOCAB], again[VOCAB];
  float* rows;
  const float* lp = NULL;
  uint32_t nv = 0, len = 99, i;
  int32_t tok = -1;
  const uint64_t n_tensors = N_LAYERS * 11 + 2; /* the tied LM head is the embedding */
  double r;
  int finite = 1, distinct = 0;

  s0 = cache_stats();
  ctx = create_model_context(m);
  if (!ctx) return;
  s1 = cache_stats();
  EXPECT(s1.n_tensors - s0.n_tensors == n_tensors);
  EXPECT(s1.n_uploads - s0.n_uploads == n_tensors);
  EXPECT(s1.n_hits - s0.n_hits == 1); /* the LM head found the embedding */
  EXPECT(s1.n_bytes > s0.n_bytes);

  /* No logits before a prefill. */
  EXPECT_ERR(ctx, QSP_ERR_NOT_READY, "logits", qsp_get_logits(ctx, &lp, &nv));

  /* Prefill, logits, greedy. */
  EXPECT_OK(qsp_prefill(ctx, kPrompt, 12));
  EXPECT_OK(qsp_kv_length(ctx, &len));
  EXPECT(len == 12);
  EXPECT_OK(qsp_get_logits(ctx, &lp, &nv));
  EXPECT(nv == VOCAB);
  EXPECT(copy_logits(ctx, whole));
  EXPECT(lp != NULL && memcmp(lp, whole, sizeof whole) == 0);
  for (i = 0; i < VOCAB; ++i) {
    if (!isfinite(whole[i])) finite = 0;
    if (whole[i] != whole[0]) distinct = 1;
  }
  EXPECT(finite);
  EXPECT(distinct);
  EXPECT_OK(qsp_greedy_token(ctx, &tok));
  EXPECT(tok == argmax(whole, VOCAB));

  /* Chunks: 5 + 7 equals 12 at once. */
  EXPECT_OK(qsp_kv_clear(ctx));
  EXPECT_OK(qsp_kv_length(ctx, &len));
  EXPECT(len == 0);
  EXPECT_ERR(ctx, QSP_ERR_NOT_READY, "logits", qsp_greedy_token(ctx, &tok));
  EXPECT_OK(qsp_prefill(ctx, kPrompt, 5));
  EXPECT_OK(qsp_prefill(ctx, kPrompt + 5, 7));
  EXPECT(copy_logits(ctx, other));
  r = rel_l2(other, whole, VOCAB);
  EXPECT(r <= 1e-5);

  /* Truncate to 5, feed the rest again. */
  EXPECT_OK(qsp_kv_truncate(ctx, 5));
  EXPECT_OK(qsp_kv_length(ctx, &len));
  EXPECT(len == 5);
  EXPECT_ERR(ctx, QSP_ERR_OUT_OF_RANGE, "6", qsp_kv_truncate(ctx, 6));
  EXPECT_OK(qsp_prefill(ctx, kPrompt + 5, 7));
  EXPECT(copy_logits(ctx, other));
  EXPECT(rel_l2(other, whole, VOCAB) <= 1e-5);

  /* Embeddings dequantized here give the token ids' logits. */
  rows = (float*)malloc(12 * HIDDEN * sizeof(float));
  if (rows) {
    const uint64_t row_bytes = qsp_dtype_size(m->embd.t.dtype, 1, HIDDEN);
    for (i = 0; i < 12; ++i)
      dequantize(m->embd.t.dtype, m->embd.bytes + (uint64_t)kPrompt[i] * row_bytes, rows + i * HIDDEN, HIDDEN);
    EXPECT_OK(qsp_kv_clear(ctx));
    EXPECT_OK(qsp_prefill_embeddings(ctx, rows, 12));
    EXPECT(copy_logits(ctx, other));
    r = rel_l2(other, whole, VOCAB);
    if (r > 1e-6) fprintf(stderr, "embeddings vs token ids: rel L2 %g\n", r);
    EXPECT(r <= 1e-6);
    free(rows);
  }

  /* Clear, prefill again: the first run bit for bit. */
  EXPECT_OK(qsp_kv_clear(ctx));
  EXPECT_OK(qsp_prefill(ctx, kPrompt, 12));
  EXPECT(copy_logits(ctx, again));
  EXPECT(memcmp(again, whole, sizeof whole) == 0);

  /* A second context uploads nothing and agrees bit for bit. */
  ctx2 = create_model_context(m);
  if (ctx2) {
    s2 = cache_stats();
    EXPECT(s2.n_tensors == s1.n_tensors);
    EXPECT(s2.n_uploads == s1.n_uploads);
    EXPECT(s2.n_hits - s1.n_hits == N_LAYERS * 11 + 3); /* every registration was a hit */
    EXPECT_OK(qsp_prefill(ctx2, kPrompt, 12));
    EXPECT(copy_logits(ctx2, other));
    EXPECT(memcmp(other, whole, sizeof whole) == 0);
    qsp_context_destroy(ctx2);
  }
  EXPECT(cache_stats().n_tensors == s1.n_tensors); /* ctx still holds them */
  qsp_context_destroy(ctx);
  s3 = cache_stats();
  EXPECT(s3.n_tensors == s0.n_tensors);
  EXPECT(s3.n_bytes == s0.n_bytes);
}

/* An embedding table in `dtype`, quantized here and dequantized here: feeding
 * its rows as embeddings must equal feeding the token ids, which checks this
 * file's reading of each block format against the library's. */
static void test_embedding_format(const model* m, int32_t dtype, uint64_t handle) {
  host_tensor e;
  qsp_context* ctx = NULL;
  qsp_context_params p;
  qsp_output_weights o;
  float by_id[VOCAB], by_row[VOCAB];
  float* rows = (float*)malloc(12 * HIDDEN * sizeof(float));
  uint64_t rng = handle, row_bytes;
  uint32_t i;
  int l;
  double r;
  if (!rows || !make_tensor(&e, handle, dtype, VOCAB, HIDDEN, 0.0f, 0.5f, &rng)) {
    free(rows);
    EXPECT(!"out of memory");
    return;
  }
  row_bytes = qsp_dtype_size(dtype, 1, HIDDEN);
  for (i = 0; i < 12; ++i) dequantize(dtype, e.bytes + (uint64_t)kPrompt[i] * row_bytes, rows + i * HIDDEN, HIDDEN);
  model_params(&p);
  EXPECT_OK(qsp_context_create(&p, &ctx));
  if (ctx) {
    for (l = 0; l < N_LAYERS; ++l) {
      qsp_layer_weights w = layer_weights(m, l);
      EXPECT_OK(qsp_upload_layer(ctx, (uint32_t)l, &w));
    }
    EXPECT_OK(qsp_upload_embedding(ctx, &e.t));
    qsp_output_weights_init(&o);
    o.norm = m->out_norm.t;
    o.lm_head = m->embd.t; /* not tied here: the model's table as the LM head */
    EXPECT_OK(qsp_upload_output(ctx, &o));
    EXPECT_OK(qsp_prefill(ctx, kPrompt, 12));
    EXPECT(copy_logits(ctx, by_id));
    EXPECT_OK(qsp_kv_clear(ctx));
    EXPECT_OK(qsp_prefill_embeddings(ctx, rows, 12));
    EXPECT(copy_logits(ctx, by_row));
    r = rel_l2(by_row, by_id, VOCAB);
    if (r > 1e-6) fprintf(stderr, "%s embedding: rows vs ids: rel L2 %g\n", qsp_dtype_name(dtype), r);
    EXPECT(r <= 1e-6);
    qsp_context_destroy(ctx);
  }
  free(e.bytes);
  free(rows);
}

static void test_errors(const model* m) {
  qsp_context* ctx = create_model_context(m);
  qsp_context* out = (qsp_context*)&out; /* any non-NULL value */
  qsp_context_params p;
  qsp_layer_weights w;
  qsp_context_info info;
  float before[VOCAB], after[VOCAB];
  int32_t bad[3] = {1, VOCAB, 2};
  int32_t filler[MAX_SEQ];
  uint32_t len = 0, i;
  if (!ctx) return;
  for (i = 0; i < MAX_SEQ; ++i) filler[i] = (int32_t)(i * 7 % VOCAB);
  EXPECT_OK(qsp_prefill(ctx, kPrompt, 12));
  EXPECT(copy_logits(ctx, before));

  /* Layer index out of range. */
  w = layer_weights(m, 0);
  EXPECT_ERR(ctx, QSP_ERR_OUT_OF_RANGE, "layer", qsp_upload_layer(ctx, N_LAYERS, &w));
  /* A wrong shape names the slot. */
  w = layer_weights(m, 1);
  w.wq = m->layer[1][2].t;
  EXPECT_ERR(ctx, QSP_ERR_SHAPE, "layer 1 wq", qsp_upload_layer(ctx, 1, &w));
  /* A wrong byte size. */
  w = layer_weights(m, 0);
  w.w_up.n_bytes -= 2;
  EXPECT_ERR(ctx, QSP_ERR_DTYPE, "layer 0 w_up", qsp_upload_layer(ctx, 0, &w));
  /* struct_size. */
  w = layer_weights(m, 0);
  w.struct_size = 0;
  EXPECT_ERR(ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_upload_layer(ctx, 0, &w));
  qsp_context_info_init(&info);
  info.struct_size = (uint32_t)sizeof info - 1;
  EXPECT_ERR(ctx, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_context_get_info(ctx, &info));
  /* Token ids and capacity. */
  EXPECT_ERR(ctx, QSP_ERR_OUT_OF_RANGE, "160", qsp_prefill(ctx, bad, 3));
  EXPECT_OK(qsp_kv_length(ctx, &len));
  EXPECT(len == 12);
  EXPECT_ERR(ctx, QSP_ERR_CONTEXT_FULL, "max_seq_len", qsp_prefill(ctx, filler, MAX_SEQ - 11));
  EXPECT_OK(qsp_kv_length(ctx, &len));
  EXPECT(len == 12);
  EXPECT_ERR(ctx, QSP_ERR_OUT_OF_RANGE, "capacity", qsp_copy_logits(ctx, after, VOCAB - 1));
  EXPECT_ERR(ctx, QSP_ERR_INVALID_ARGUMENT, "n_tokens", qsp_prefill(ctx, kPrompt, 0));
  /* NULLs. */
  EXPECT_ERR(NULL, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_prefill(NULL, kPrompt, 1));
  EXPECT_ERR(NULL, QSP_ERR_INVALID_ARGUMENT, "ctx", qsp_kv_clear(NULL));
  EXPECT_ERR(ctx, QSP_ERR_INVALID_ARGUMENT, "tokens", qsp_prefill(ctx, NULL, 1));
  EXPECT_ERR(ctx, QSP_ERR_INVALID_ARGUMENT, "logits", qsp_get_logits(ctx, NULL, NULL));
  EXPECT(strcmp(qsp_context_last_error(NULL), qsp_last_error()) == 0);
  /* Create failures set *out to NULL. */
  model_params(&p);
  p.n_kv_heads = 3;
  EXPECT_ERR(NULL, QSP_ERR_SHAPE, "n_kv_heads", qsp_context_create(&p, &out));
  EXPECT(out == NULL);
  model_params(&p);
  p.struct_size = 0;
  out = (qsp_context*)&out;
  EXPECT_ERR(NULL, QSP_ERR_STRUCT_SIZE, "struct_size", qsp_context_create(&p, &out));
  EXPECT(out == NULL);
  if (qsp_backend_available(QSP_BACKEND_CUDA) == 0) {
    model_params(&p);
    p.backend = QSP_BACKEND_CUDA;
    out = (qsp_context*)&out;
    EXPECT_ERR(NULL, QSP_ERR_NO_DEVICE, "CUDA", qsp_context_create(&p, &out));
    EXPECT(out == NULL);
  }

  /* After all of that the context is as it was. */
  EXPECT(copy_logits(ctx, after));
  EXPECT(memcmp(before, after, sizeof before) == 0);
  EXPECT_OK(qsp_kv_clear(ctx));
  EXPECT_OK(qsp_prefill(ctx, kPrompt, 12));
  EXPECT(copy_logits(ctx, after));
  EXPECT(memcmp(before, after, sizeof before) == 0);
  qsp_context_destroy(ctx);
}

static void test_info_and_logging(const model* m) {
  qsp_context_params p;
  qsp_context* ctx = NULL;
  qsp_context_info info;
  log_capture own, global;
  memset(&own, 0, sizeof own);
  memset(&global, 0, sizeof global);

  /* A context's own sink, at INFO: AUTO reports the backend it picked. */
  model_params(&p);
  p.backend = QSP_BACKEND_AUTO;
  p.log_callback = capture_log;
  p.log_user_data = &own;
  p.log_level = QSP_LOG_INFO;
  EXPECT_OK(qsp_context_create(&p, &ctx));
  if (ctx) {
    EXPECT(own.count > 0);
    EXPECT(own.max_level_seen <= QSP_LOG_INFO);
    qsp_context_info_init(&info);
    EXPECT_OK(qsp_context_get_info(ctx, &info));
    if (qsp_backend_available(QSP_BACKEND_CUDA) == 0) {
      EXPECT(info.backend == QSP_BACKEND_CPU);
      EXPECT(info.device_index == -1);
      EXPECT(info.n_threads == 2);
      EXPECT(strstr(own.last, "CPU") != NULL);
    }
    EXPECT(memchr(info.device_name, 0, sizeof info.device_name) != NULL);
    EXPECT(strlen(info.device_name) > 0);
    EXPECT(info.kv_cache_bytes > 0);
    EXPECT_OK(upload_model(ctx, m));
    EXPECT_OK(qsp_prefill(ctx, kPrompt, 12));
    qsp_context_destroy(ctx);
    ctx = NULL;
  }

  /* The process-wide sink serves contexts without their own. */
  qsp_set_log_callback(capture_log, &global, QSP_LOG_INFO);
  model_params(&p);
  EXPECT_OK(qsp_context_create(&p, &ctx));
  qsp_set_log_callback(NULL, NULL, QSP_LOG_WARN);
  EXPECT(global.count > 0);
  EXPECT(global.max_level_seen <= QSP_LOG_INFO);
  qsp_context_destroy(ctx);
}

/* ---- The bindings' tiny-v1 model (bindings/common/MODEL.md) ------------- */

#define TINY_BASE 0x5153500000000000ull

static uint64_t tiny_next(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}

static int tiny_tensor(host_tensor* ht, uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols) {
  uint64_t s = handle * 0x9E3779B97F4A7C15ull, i, k;
  const uint64_t n = qsp_dtype_size(dtype, rows, cols);
  unsigned char* p = (unsigned char*)malloc((size_t)n);
  memset(ht, 0, sizeof *ht);
  if (!p || n == 0) {
    free(p);
    return 0;
  }
  if (dtype == QSP_DTYPE_F32) {
    for (i = 0; i < rows * cols; ++i) {
      const uint64_t bits = 0x3F000000u | (tiny_next(&s) >> 41);
      for (k = 0; k < 4; ++k) p[4 * i + k] = (unsigned char)(bits >> (8 * k));
    }
  } else {
    const uint64_t bsize = dtype == QSP_DTYPE_Q8_0 ? 34 : 18, draws = dtype == QSP_DTYPE_Q8_0 ? 4 : 2;
    const uint32_t dbase = dtype == QSP_DTYPE_Q8_0 ? 0x1400u : 0x2000u;
    for (i = 0; i < n / bsize; ++i) {
      unsigned char* b = p + bsize * i;
      uint64_t j;
      put_u16(b, (uint16_t)(dbase | (uint32_t)(tiny_next(&s) & 0x3FFu)));
      for (j = 0; j < draws; ++j) {
        const uint64_t v = tiny_next(&s);
        for (k = 0; k < 8; ++k) b[2 + 8 * j + k] = (unsigned char)(v >> (8 * k));
      }
    }
  }
  ht->bytes = p;
  ht->t.handle = handle;
  ht->t.dtype = dtype;
  ht->t.n_rows = rows;
  ht->t.n_cols = cols;
  ht->t.data = p;
  ht->t.n_bytes = n;
  return 1;
}

/* Builds tiny-v1, prefills its tokens, returns its 256 logits in out. */
static int tiny_v1_logits(float* out) {
  static const int32_t tokens[10] = {1, 7, 42, 100, 255, 0, 128, 64, 3, 200};
  static const uint64_t shape[11][2] = {{1, 64}, {64, 64}, {32, 64}, {32, 64}, {1, 16},  {1, 16},
                                        {64, 64}, {1, 64}, {128, 64}, {128, 64}, {64, 128}};
  static const int is_vector[11] = {1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0};
  qsp_context_params p;
  qsp_context* ctx = NULL;
  host_tensor t[11], embd, norm, head;
  qsp_layer_weights w;
  qsp_output_weights o;
  int l, s, ok = 1;
  qsp_context_params_init(&p);
  p.n_layers = 2;
  p.hidden_size = 64;
  p.intermediate_size = 128;
  p.n_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = 16;
  p.vocab_size = 256;
  p.max_seq_len = 32;
  p.backend = QSP_BACKEND_CPU;
  p.n_threads = 2;
  EXPECT_OK(qsp_context_create(&p, &ctx));
  if (!ctx) return 0;
  for (l = 0; l < 2 && ok; ++l) {
    const int32_t P = l % 2 == 0 ? QSP_DTYPE_Q4_0 : QSP_DTYPE_Q8_0;
    for (s = 0; s < 11; ++s)
      ok &= tiny_tensor(&t[s], TINY_BASE + 0x100ull * (uint64_t)(l + 1) + (uint64_t)s,
                        is_vector[s] ? QSP_DTYPE_F32 : P, shape[s][0], shape[s][1]);
    if (ok) {
      qsp_layer_weights_init(&w);
      w.attn_norm = t[0].t;
      w.wq = t[1].t;
      w.wk = t[2].t;
      w.wv = t[3].t;
      w.q_norm = t[4].t;
      w.k_norm = t[5].t;
      w.wo = t[6].t;
      w.ffn_norm = t[7].t;
      w.w_gate = t[8].t;
      w.w_up = t[9].t;
      w.w_down = t[10].t;
      EXPECT_OK(qsp_upload_layer(ctx, (uint32_t)l, &w));
    }
    for (s = 0; s < 11; ++s) free(t[s].bytes);
  }
  ok &= tiny_tensor(&embd, TINY_BASE + 1, QSP_DTYPE_Q8_0, 256, 64);
  ok &= tiny_tensor(&norm, TINY_BASE + 2, QSP_DTYPE_F32, 1, 64);
  ok &= tiny_tensor(&head, TINY_BASE + 3, QSP_DTYPE_Q4_0, 256, 64);
  if (ok) {
    EXPECT_OK(qsp_upload_embedding(ctx, &embd.t));
    qsp_output_weights_init(&o);
    o.norm = norm.t;
    o.lm_head = head.t;
    EXPECT_OK(qsp_upload_output(ctx, &o));
    EXPECT_OK(qsp_prefill(ctx, tokens, 10));
    ok = qsp_copy_logits(ctx, out, 256) == QSP_OK;
  }
  free(embd.bytes);
  free(norm.bytes);
  free(head.bytes);
  qsp_context_destroy(ctx);
  EXPECT(ok);
  return ok;
}

static void test_tiny_v1(const char* path) {
  float a[256], b[256];
  int i, finite = 1;
  if (!tiny_v1_logits(a) || !tiny_v1_logits(b)) return;
  for (i = 0; i < 256; ++i)
    if (!isfinite(a[i])) finite = 0;
  EXPECT(finite);
  EXPECT(memcmp(a, b, sizeof a) == 0); /* deterministic across contexts */
  if (path) {
    unsigned char bytes[256 * 4];
    FILE* f;
    for (i = 0; i < 256; ++i) {
      const uint32_t u = float_bits(a[i]);
      bytes[4 * i] = (unsigned char)u;
      bytes[4 * i + 1] = (unsigned char)(u >> 8);
      bytes[4 * i + 2] = (unsigned char)(u >> 16);
      bytes[4 * i + 3] = (unsigned char)(u >> 24);
    }
    f = fopen(path, "wb");
    EXPECT(f != NULL);
    if (f) {
      EXPECT(fwrite(bytes, 1, sizeof bytes, f) == sizeof bytes);
      EXPECT(fclose(f) == 0);
      printf("wrote 256 tiny-v1 logits to %s (logits[0] = %.9g)\n", path, (double)a[0]);
    }
  }
}

int main(int argc, char** argv) {
  model m;
  memset(&m, 0, sizeof m);
  if (qsp_abi_version() != QSP_ABI_VERSION) {
    fprintf(stderr, "libqsp ABI %u, this test was built for %d\n", qsp_abi_version(), QSP_ABI_VERSION);
    return 1;
  }
  test_globals();
  test_init_functions();
  if (!make_model(&m)) {
    fprintf(stderr, "out of memory building the model\n");
    free_model(&m);
    return 1;
  }
  test_model(&m);
  test_embedding_format(&m, QSP_DTYPE_Q8_0, HANDLE_BASE + 0x1000);
  test_embedding_format(&m, QSP_DTYPE_Q4_0, HANDLE_BASE + 0x1001);
  test_embedding_format(&m, QSP_DTYPE_F16, HANDLE_BASE + 0x1002);
  test_embedding_format(&m, QSP_DTYPE_F32, HANDLE_BASE + 0x1003);
  test_errors(&m);
  test_info_and_logging(&m);
  test_tiny_v1(argc > 1 ? argv[1] : NULL);
  free_model(&m);
  if (g_failures) {
    fprintf(stderr, "test_c_api: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  printf("test_c_api: all %d checks passed\n", g_checks);
  return 0;
}
