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

#include "c_api/c_api_util.h" /* checks, RNG, fp16, quantizers, this test's model */
#include "qsp/qsp.h"
#include "tiny_model.h"          /* bindings/common: the bindings' tiny-v1 model */

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
                              QSP_ERR_BAD_FORMAT,
                              QSP_ERR_BUFFER_TOO_SMALL};
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
  EXPECT(strcmp(qsp_status_string(-18), "unknown status") == 0);
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
  EXPECT(p.n_devices == 0 && p.device_mask == 0 && p.reserved1 == 0);
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

/* ---- The bindings' tiny-v1 model (bindings/common/tiny_model.h) --------- */

/* Builds tiny-v1, prefills its tokens, returns its 256 logits in out. */
static int tiny_v1_logits(float* out) {
  qsp_context_params p;
  qsp_context* ctx = NULL;
  int ok;
  qsp_tiny_params(&p);
  EXPECT_OK(qsp_context_create(&p, &ctx));
  if (!ctx) return 0;
  EXPECT_OK(qsp_tiny_upload(ctx));
  EXPECT_OK(qsp_prefill(ctx, qsp_tiny_tokens, QSP_TINY_N_TOKENS));
  ok = qsp_copy_logits(ctx, out, QSP_TINY_VOCAB) == QSP_OK;
  qsp_context_destroy(ctx);
  EXPECT(ok);
  return ok;
}

/* qsp_prefill_batch from C99: two contexts of one model, a prompt and a
 * decode step, equal to the same pieces through qsp_prefill. */
static void test_batch(const model* m) {
  qsp_context *a = create_model_context(m), *b = create_model_context(m), *t = create_model_context(m);
  qsp_batch_seq seqs[2];
  float la[VOCAB], lt[VOCAB];
  int32_t ga = -1, gt = -2;
  uint32_t len = 0;
  if (!a || !b || !t) {
    EXPECT(0);
    qsp_context_destroy(a);
    qsp_context_destroy(b);
    qsp_context_destroy(t);
    return;
  }
  EXPECT_OK(qsp_prefill(b, kPrompt, 7));
  memset(seqs, 0, sizeof seqs);
  seqs[0].ctx = a;
  seqs[0].tokens = kPrompt;
  seqs[0].n_tokens = 12;
  seqs[1].ctx = b;
  seqs[1].tokens = kPrompt + 7;
  seqs[1].n_tokens = 1;
  EXPECT_OK(qsp_prefill_batch(seqs, 2, (uint32_t)sizeof(qsp_batch_seq)));
  EXPECT_OK(qsp_kv_length(b, &len));
  EXPECT(len == 8);
  EXPECT_OK(qsp_prefill(t, kPrompt, 8));
  EXPECT(copy_logits(b, la) && copy_logits(t, lt));
  EXPECT(memcmp(la, lt, sizeof la) == 0);
  EXPECT_OK(qsp_greedy_token(b, &ga));
  EXPECT_OK(qsp_greedy_token(t, &gt));
  EXPECT(ga == gt);
  /* The same context twice: refused, naming the sequence; nothing changed. */
  seqs[1].ctx = a;
  EXPECT_ERR(a, QSP_ERR_INVALID_ARGUMENT, "sequence 1", qsp_prefill_batch(seqs, 2, (uint32_t)sizeof(qsp_batch_seq)));
  EXPECT_OK(qsp_kv_length(a, &len));
  EXPECT(len == 12);
  qsp_context_destroy(a);
  qsp_context_destroy(b);
  qsp_context_destroy(t);
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
    EXPECT(qsp_tiny_write_f32le(path, a, QSP_TINY_VOCAB));
    printf("wrote 256 tiny-v1 logits to %s (logits[0] = %.9g)\n", path, (double)a[0]);
  }
}

/* Tensor parallelism (1.3): the model split in two, the shards run in turn
 * on the CPU, gives the unsplit logits bit for bit; 3 shards do not divide
 * the 2 KV heads. */
static void test_shards(const model* m) {
  qsp_context *whole = NULL, *split = NULL, *out = NULL;
  qsp_context_params p;
  float a[VOCAB], b[VOCAB];
  int32_t ta = -1, tb = -2;
  model_params(&p);
  EXPECT_OK(qsp_context_create(&p, &whole));
  p.n_devices = 2;
  EXPECT_OK(qsp_context_create(&p, &split));
  if (whole && split) {
    EXPECT_OK(upload_model(whole, m));
    EXPECT_OK(upload_model(split, m));
    EXPECT_OK(qsp_prefill(whole, kPrompt, 12));
    EXPECT_OK(qsp_prefill(split, kPrompt, 5));
    EXPECT_OK(qsp_prefill(split, kPrompt + 5, 7));
    EXPECT(copy_logits(whole, a) && copy_logits(split, b));
    EXPECT(memcmp(a, b, sizeof a) == 0);
    EXPECT_OK(qsp_greedy_token(whole, &ta));
    EXPECT_OK(qsp_greedy_token(split, &tb));
    EXPECT(ta == tb);
  }
  qsp_context_destroy(whole);
  qsp_context_destroy(split);
  p.n_devices = 3;
  EXPECT_ERR(NULL, QSP_ERR_SHAPE, "n_kv_heads", qsp_context_create(&p, &out));
  EXPECT(out == NULL);
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
  test_batch(&m);
  test_shards(&m);
  test_tiny_v1(argc > 1 ? argv[1] : NULL);
  free_model(&m);
  if (g_failures) {
    fprintf(stderr, "test_c_api: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  printf("test_c_api: all %d checks passed\n", g_checks);
  return 0;
}
