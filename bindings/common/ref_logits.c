/*
 * ref_logits — the reference for the bindings' tests (see MODEL.md).
 *
 * Builds the tiny-v1 model through the C API, prefills the fixed tokens on the
 * CPU backend and writes the last token's logits as raw little-endian float32
 * to argv[1]. With argv[2], also writes the sizeof/offsetof of every public
 * struct there ("name size" and "name.field offset" lines), which the bindings
 * that mirror structs by hand check themselves against.
 *
 * usage: ref_logits LOGITS_FILE [LAYOUT_FILE]
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsp/qsp.h"

#define BASE 0x5153500000000000ull

static const int32_t kTokens[] = {1, 7, 42, 100, 255, 0, 128, 64, 3, 200};
#define N_TOKENS (sizeof kTokens / sizeof kTokens[0])

static uint64_t next(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}

static void put_le64(unsigned char* p, uint64_t v) {
  int i;
  for (i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* Fills t (and allocates its bytes) per MODEL.md. */
static int gen(qsp_tensor* t, uint64_t handle, int32_t dtype, uint64_t rows, uint64_t cols) {
  uint64_t s = handle * 0x9E3779B97F4A7C15ull, i, n_blocks;
  unsigned char* p;
  memset(t, 0, sizeof *t);
  t->handle = handle;
  t->dtype = dtype;
  t->n_rows = rows;
  t->n_cols = cols;
  t->n_bytes = qsp_dtype_size(dtype, rows, cols);
  p = (unsigned char*)malloc((size_t)t->n_bytes);
  if (!p) return 0;
  t->data = p;
  n_blocks = rows * cols / 32;
  if (dtype == QSP_DTYPE_F32) {
    for (i = 0; i < rows * cols; ++i) {
      uint32_t bits = 0x3F000000u | (uint32_t)(next(&s) >> 41);
      p[4 * i + 0] = (unsigned char)bits;
      p[4 * i + 1] = (unsigned char)(bits >> 8);
      p[4 * i + 2] = (unsigned char)(bits >> 16);
      p[4 * i + 3] = (unsigned char)(bits >> 24);
    }
  } else if (dtype == QSP_DTYPE_Q8_0) {
    for (i = 0; i < n_blocks; ++i) {
      unsigned char* b = p + 34 * i;
      uint32_t d = 0x1400u | (uint32_t)(next(&s) & 0x3FFu);
      int k;
      b[0] = (unsigned char)d;
      b[1] = (unsigned char)(d >> 8);
      for (k = 0; k < 4; ++k) put_le64(b + 2 + 8 * k, next(&s));
    }
  } else if (dtype == QSP_DTYPE_Q4_0) {
    for (i = 0; i < n_blocks; ++i) {
      unsigned char* b = p + 18 * i;
      uint32_t d = 0x2000u | (uint32_t)(next(&s) & 0x3FFu);
      int k;
      b[0] = (unsigned char)d;
      b[1] = (unsigned char)(d >> 8);
      for (k = 0; k < 2; ++k) put_le64(b + 2 + 8 * k, next(&s));
    }
  } else {
    return 0;
  }
  return 1;
}

static int write_layout(const char* path) {
  FILE* f = fopen(path, "w");
  if (!f) return 0;
#define SZ(T) fprintf(f, "%s %lu\n", #T, (unsigned long)sizeof(T))
#define OF(T, m) fprintf(f, "%s.%s %lu\n", #T, #m, (unsigned long)offsetof(T, m))
  SZ(qsp_context_params);
  OF(qsp_context_params, struct_size);
  OF(qsp_context_params, n_layers);
  OF(qsp_context_params, hidden_size);
  OF(qsp_context_params, intermediate_size);
  OF(qsp_context_params, n_heads);
  OF(qsp_context_params, n_kv_heads);
  OF(qsp_context_params, head_dim);
  OF(qsp_context_params, vocab_size);
  OF(qsp_context_params, max_seq_len);
  OF(qsp_context_params, rms_eps);
  OF(qsp_context_params, rope_theta);
  OF(qsp_context_params, rope_style);
  OF(qsp_context_params, qk_norm);
  OF(qsp_context_params, backend);
  OF(qsp_context_params, device_index);
  OF(qsp_context_params, n_threads);
  OF(qsp_context_params, reserved0);
  OF(qsp_context_params, reserved2);
  OF(qsp_context_params, log_callback);
  OF(qsp_context_params, log_user_data);
  OF(qsp_context_params, log_level);
  OF(qsp_context_params, reserved1);
  SZ(qsp_context_info);
  OF(qsp_context_info, struct_size);
  OF(qsp_context_info, backend);
  OF(qsp_context_info, device_index);
  OF(qsp_context_info, n_threads);
  OF(qsp_context_info, device_name);
  OF(qsp_context_info, kv_cache_bytes);
  OF(qsp_context_info, scratch_bytes);
  SZ(qsp_tensor);
  OF(qsp_tensor, handle);
  OF(qsp_tensor, dtype);
  OF(qsp_tensor, reserved);
  OF(qsp_tensor, n_rows);
  OF(qsp_tensor, n_cols);
  OF(qsp_tensor, data);
  OF(qsp_tensor, n_bytes);
  SZ(qsp_layer_weights);
  OF(qsp_layer_weights, struct_size);
  OF(qsp_layer_weights, reserved);
  OF(qsp_layer_weights, attn_norm);
  OF(qsp_layer_weights, wq);
  OF(qsp_layer_weights, wk);
  OF(qsp_layer_weights, wv);
  OF(qsp_layer_weights, q_norm);
  OF(qsp_layer_weights, k_norm);
  OF(qsp_layer_weights, wo);
  OF(qsp_layer_weights, ffn_norm);
  OF(qsp_layer_weights, w_gate);
  OF(qsp_layer_weights, w_up);
  OF(qsp_layer_weights, w_down);
  SZ(qsp_output_weights);
  OF(qsp_output_weights, struct_size);
  OF(qsp_output_weights, reserved);
  OF(qsp_output_weights, norm);
  OF(qsp_output_weights, lm_head);
  SZ(qsp_cache_stats);
  OF(qsp_cache_stats, struct_size);
  OF(qsp_cache_stats, reserved);
  OF(qsp_cache_stats, n_tensors);
  OF(qsp_cache_stats, n_bytes);
  OF(qsp_cache_stats, n_uploads);
  OF(qsp_cache_stats, n_hits);
#undef SZ
#undef OF
  return fclose(f) == 0;
}

#define CHECK(call)                                                                      \
  do {                                                                                   \
    qsp_status st_ = (call);                                                             \
    if (st_ != QSP_OK) {                                                                 \
      fprintf(stderr, "ref_logits: %s failed: %s: %s\n", #call, qsp_status_string(st_), \
              qsp_last_error());                                                         \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

int main(int argc, char** argv) {
  qsp_context_params p;
  qsp_context* ctx = NULL;
  qsp_tensor embd, norm, head;
  qsp_output_weights out;
  const float* logits = NULL;
  uint32_t n_vocab = 0, l, i;
  float first;
  unsigned char* bytes;
  FILE* f;

  if (argc < 2) {
    fprintf(stderr, "usage: %s LOGITS_FILE [LAYOUT_FILE]\n", argv[0]);
    return 2;
  }
  if (qsp_abi_version() != QSP_ABI_VERSION) {
    fprintf(stderr, "ref_logits: libqsp ABI %u, built for %d\n", qsp_abi_version(), QSP_ABI_VERSION);
    return 1;
  }
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
  CHECK(qsp_context_create(&p, &ctx));

  for (l = 0; l < p.n_layers; ++l) {
    const int32_t P = (l % 2 == 0) ? QSP_DTYPE_Q4_0 : QSP_DTYPE_Q8_0;
    const uint64_t h = BASE + 0x100ull * (l + 1);
    const uint64_t H = p.hidden_size, Q = (uint64_t)p.n_heads * p.head_dim,
                   KV = (uint64_t)p.n_kv_heads * p.head_dim, F = p.intermediate_size, D = p.head_dim;
    qsp_layer_weights w;
    qsp_tensor* slots[11];
    int ok = 1, s;
    qsp_layer_weights_init(&w);
    ok &= gen(&w.attn_norm, h + 0, QSP_DTYPE_F32, 1, H);
    ok &= gen(&w.wq, h + 1, P, Q, H);
    ok &= gen(&w.wk, h + 2, P, KV, H);
    ok &= gen(&w.wv, h + 3, P, KV, H);
    ok &= gen(&w.q_norm, h + 4, QSP_DTYPE_F32, 1, D);
    ok &= gen(&w.k_norm, h + 5, QSP_DTYPE_F32, 1, D);
    ok &= gen(&w.wo, h + 6, P, H, Q);
    ok &= gen(&w.ffn_norm, h + 7, QSP_DTYPE_F32, 1, H);
    ok &= gen(&w.w_gate, h + 8, P, F, H);
    ok &= gen(&w.w_up, h + 9, P, F, H);
    ok &= gen(&w.w_down, h + 10, P, H, F);
    if (!ok) {
      fprintf(stderr, "ref_logits: out of memory\n");
      return 1;
    }
    CHECK(qsp_upload_layer(ctx, l, &w));
    slots[0] = &w.attn_norm; slots[1] = &w.wq; slots[2] = &w.wk; slots[3] = &w.wv;
    slots[4] = &w.q_norm; slots[5] = &w.k_norm; slots[6] = &w.wo; slots[7] = &w.ffn_norm;
    slots[8] = &w.w_gate; slots[9] = &w.w_up; slots[10] = &w.w_down;
    for (s = 0; s < 11; ++s) free((void*)slots[s]->data);
  }
  if (!gen(&embd, BASE + 1, QSP_DTYPE_Q8_0, p.vocab_size, p.hidden_size) ||
      !gen(&norm, BASE + 2, QSP_DTYPE_F32, 1, p.hidden_size) ||
      !gen(&head, BASE + 3, QSP_DTYPE_Q4_0, p.vocab_size, p.hidden_size)) {
    fprintf(stderr, "ref_logits: out of memory\n");
    return 1;
  }
  CHECK(qsp_upload_embedding(ctx, &embd));
  qsp_output_weights_init(&out);
  out.norm = norm;
  out.lm_head = head;
  CHECK(qsp_upload_output(ctx, &out));
  free((void*)embd.data);
  free((void*)norm.data);
  free((void*)head.data);

  CHECK(qsp_prefill(ctx, kTokens, (uint32_t)N_TOKENS));
  CHECK(qsp_get_logits(ctx, &logits, &n_vocab));
  first = logits[0];

  bytes = (unsigned char*)malloc((size_t)n_vocab * 4);
  if (!bytes) return 1;
  for (i = 0; i < n_vocab; ++i) { /* little-endian whatever the host */
    uint32_t u;
    memcpy(&u, &logits[i], 4);
    bytes[4 * i + 0] = (unsigned char)u;
    bytes[4 * i + 1] = (unsigned char)(u >> 8);
    bytes[4 * i + 2] = (unsigned char)(u >> 16);
    bytes[4 * i + 3] = (unsigned char)(u >> 24);
  }
  f = fopen(argv[1], "wb");
  if (!f || fwrite(bytes, 4, n_vocab, f) != n_vocab || fclose(f) != 0) {
    fprintf(stderr, "ref_logits: cannot write %s\n", argv[1]);
    return 1;
  }
  free(bytes);
  qsp_context_destroy(ctx);
  if (argc > 2 && !write_layout(argv[2])) {
    fprintf(stderr, "ref_logits: cannot write %s\n", argv[2]);
    return 1;
  }
  printf("ref_logits: %u logits to %s (logits[0] = %.9g)\n", n_vocab, argv[1], (double)first);
  return 0;
}
