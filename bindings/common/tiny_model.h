/*
 * tiny_model.h — the bindings' test model "tiny-v1" (MODEL.md), in C99, for
 * the C programs that build it through the C API: ref_logits.c (the
 * reference every binding compares against) and tests/test_c_api.c. Header
 * only, every function static; a program that includes it uses all of them
 * through qsp_tiny_params / qsp_tiny_upload / qsp_tiny_write_f32le.
 *
 * The generator is deliberately trivial so that each binding can repeat it in
 * its own language: weights are produced directly as bytes, every value an
 * exact bit pattern, from a 64-bit xorshift (13, 7, 17) per tensor seeded by
 * handle * 0x9E3779B97F4A7C15.
 */
#ifndef QSP_BINDINGS_TINY_MODEL_H
#define QSP_BINDINGS_TINY_MODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsp/qsp.h"

#define QSP_TINY_BASE 0x5153500000000000ull
#define QSP_TINY_N_TOKENS 10
#define QSP_TINY_VOCAB 256

/* The fixed prompt, prefilled in one call. */
static const int32_t qsp_tiny_tokens[QSP_TINY_N_TOKENS] = {1, 7, 42, 100, 255, 0, 128, 64, 3, 200};

static uint64_t qsp_tiny_next(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}

static void qsp_tiny_put_le(unsigned char* p, uint64_t v, int n_bytes) {
  int i;
  for (i = 0; i < n_bytes; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* Fills t per MODEL.md and mallocs its bytes (t->data; the caller frees).
 * Returns 0 when out of memory or for a dtype tiny-v1 does not use. */
static int qsp_tiny_tensor(qsp_tensor* t, uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols) {
  uint64_t s = handle * 0x9E3779B97F4A7C15ull, i, n_blocks;
  unsigned char* p;
  memset(t, 0, sizeof *t);
  t->handle = handle;
  t->dtype = dtype;
  t->n_rows = rows;
  t->n_cols = cols;
  t->n_bytes = qsp_dtype_size(dtype, rows, cols);
  if (t->n_bytes == 0) return 0;
  p = (unsigned char*)malloc((size_t)t->n_bytes);
  if (!p) return 0;
  t->data = p;
  n_blocks = rows * cols / 32;
  if (dtype == QSP_DTYPE_F32) {
    /* floats in [0.5, 1): exponent 0x3F000000, 23 random mantissa bits */
    for (i = 0; i < rows * cols; ++i) qsp_tiny_put_le(p + 4 * i, 0x3F000000u | (qsp_tiny_next(&s) >> 41), 4);
  } else if (dtype == QSP_DTYPE_Q8_0) {
    for (i = 0; i < n_blocks; ++i) {
      unsigned char* b = p + 34 * i;
      int k;
      qsp_tiny_put_le(b, 0x1400u | (qsp_tiny_next(&s) & 0x3FFu), 2);  /* fp16 d in [2^-10, 2^-9) */
      for (k = 0; k < 4; ++k) qsp_tiny_put_le(b + 2 + 8 * k, qsp_tiny_next(&s), 8);
    }
  } else if (dtype == QSP_DTYPE_Q4_0) {
    for (i = 0; i < n_blocks; ++i) {
      unsigned char* b = p + 18 * i;
      int k;
      qsp_tiny_put_le(b, 0x2000u | (qsp_tiny_next(&s) & 0x3FFu), 2);  /* fp16 d in [2^-7, 2^-6) */
      for (k = 0; k < 2; ++k) qsp_tiny_put_le(b + 2 + 8 * k, qsp_tiny_next(&s), 8);
    }
  } else {
    free(p);
    t->data = NULL;
    return 0;
  }
  return 1;
}

/* qsp_context_params_init, then tiny-v1's shape on the CPU backend with 2
 * threads (bit-exactness holds for a fixed thread count). */
static void qsp_tiny_params(qsp_context_params* p) {
  qsp_context_params_init(p);
  p->n_layers = 2;
  p->hidden_size = 64;
  p->intermediate_size = 128;
  p->n_heads = 4;
  p->n_kv_heads = 2;
  p->head_dim = 16;
  p->vocab_size = QSP_TINY_VOCAB;
  p->max_seq_len = 32;
  p->backend = QSP_BACKEND_CPU;
  p->n_threads = 2;
}

/* Generates and uploads every tensor of tiny-v1 into ctx (created with
 * qsp_tiny_params), freeing the host bytes as it goes. Returns the first
 * failing status (QSP_ERR_OUT_OF_MEMORY when a host allocation fails). */
static qsp_status qsp_tiny_upload(qsp_context* ctx) {
  /* Per slot of qsp_layer_weights: rows, cols, 1 for F32 vectors (else P(l)). */
  static const uint64_t shape[11][3] = {{1, 64, 1},   {64, 64, 0}, {32, 64, 0},  {32, 64, 0},
                                        {1, 16, 1},   {1, 16, 1},  {64, 64, 0},  {1, 64, 1},
                                        {128, 64, 0}, {128, 64, 0}, {64, 128, 0}};
  qsp_tensor t[11], embd, norm, head;
  qsp_layer_weights w;
  qsp_output_weights o;
  qsp_status st = QSP_OK;
  uint32_t l;
  int s, ok;
  for (l = 0; l < 2 && st == QSP_OK; ++l) {
    const int32_t P = l % 2 == 0 ? QSP_DTYPE_Q4_0 : QSP_DTYPE_Q8_0;
    ok = 1;
    for (s = 0; s < 11; ++s)
      ok &= qsp_tiny_tensor(&t[s], QSP_TINY_BASE + 0x100ull * (l + 1) + (uint64_t)s,
                            shape[s][2] ? QSP_DTYPE_F32 : P, shape[s][0], shape[s][1]);
    qsp_layer_weights_init(&w);
    w.attn_norm = t[0];
    w.wq = t[1];
    w.wk = t[2];
    w.wv = t[3];
    w.q_norm = t[4];
    w.k_norm = t[5];
    w.wo = t[6];
    w.ffn_norm = t[7];
    w.w_gate = t[8];
    w.w_up = t[9];
    w.w_down = t[10];
    st = ok ? qsp_upload_layer(ctx, l, &w) : QSP_ERR_OUT_OF_MEMORY;
    for (s = 0; s < 11; ++s) free((void*)t[s].data);
  }
  if (st != QSP_OK) return st;
  ok = qsp_tiny_tensor(&embd, QSP_TINY_BASE + 1, QSP_DTYPE_Q8_0, QSP_TINY_VOCAB, 64);
  ok &= qsp_tiny_tensor(&norm, QSP_TINY_BASE + 2, QSP_DTYPE_F32, 1, 64);
  ok &= qsp_tiny_tensor(&head, QSP_TINY_BASE + 3, QSP_DTYPE_Q4_0, QSP_TINY_VOCAB, 64);
  st = ok ? qsp_upload_embedding(ctx, &embd) : QSP_ERR_OUT_OF_MEMORY;
  if (st == QSP_OK) {
    qsp_output_weights_init(&o);
    o.norm = norm;
    o.lm_head = head;
    st = qsp_upload_output(ctx, &o);
  }
  free((void*)embd.data);
  free((void*)norm.data);
  free((void*)head.data);
  return st;
}

/* Writes n floats to path as raw little-endian float32, whatever the host.
 * Returns 1 on success. */
static int qsp_tiny_write_f32le(const char* path, const float* v, uint32_t n) {
  unsigned char* bytes = (unsigned char*)malloc((size_t)n * 4 + 1);
  FILE* f;
  uint32_t i;
  int ok;
  if (!bytes) return 0;
  for (i = 0; i < n; ++i) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    qsp_tiny_put_le(bytes + 4 * i, u, 4);
  }
  f = fopen(path, "wb");
  ok = f != NULL && fwrite(bytes, 4, n, f) == n;
  if (f && fclose(f) != 0) ok = 0;
  free(bytes);
  return ok;
}

#endif /* QSP_BINDINGS_TINY_MODEL_H */
