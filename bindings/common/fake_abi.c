/*
 * A stand-in libqsp.so.1 that reports ABI version QSP_ABI_VERSION + 1: the
 * bindings' tests load it (QSP_LIBRARY, or LD_LIBRARY_PATH for the linked
 * bindings) to check that each refuses, with a clear message, a library whose
 * ABI it was not written for. Every public symbol exists (with the library's
 * symbol version, see fake_abi.map), so programs linked against the real
 * library start; every call fails with QSP_ERR_UNSUPPORTED.
 */
#include <stddef.h>

#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

#define FAIL return QSP_ERR_UNSUPPORTED

const char* qsp_version_string(void) { return "2.0.0"; }
uint32_t qsp_version_number(void) { return 20000; }
uint32_t qsp_abi_version(void) { return QSP_ABI_VERSION + 1; }
const char* qsp_status_string(qsp_status s) { (void)s; return "fake"; }
const char* qsp_last_error(void) { return "fake libqsp"; }
void qsp_set_log_callback(qsp_log_callback c, void* u, int32_t l) { (void)c; (void)u; (void)l; }
uint64_t qsp_dtype_size(int32_t d, uint64_t r, uint64_t c) { (void)d; (void)r; (void)c; return 0; }
const char* qsp_dtype_name(int32_t d) { (void)d; return "unknown"; }
int32_t qsp_backend_available(int32_t b) { (void)b; return 0; }
void qsp_context_params_init(qsp_context_params* p) { (void)p; }
qsp_status qsp_context_create(const qsp_context_params* p, qsp_context** out) {
  (void)p;
  if (out) *out = NULL;
  FAIL;
}
void qsp_context_destroy(qsp_context* c) { (void)c; }
const char* qsp_context_last_error(const qsp_context* c) { (void)c; return "fake libqsp"; }
void qsp_context_info_init(qsp_context_info* i) { (void)i; }
qsp_status qsp_context_get_info(const qsp_context* c, qsp_context_info* i) { (void)c; (void)i; FAIL; }
void qsp_layer_weights_init(qsp_layer_weights* w) { (void)w; }
qsp_status qsp_upload_layer(qsp_context* c, uint32_t l, const qsp_layer_weights* w) { (void)c; (void)l; (void)w; FAIL; }
qsp_status qsp_upload_embedding(qsp_context* c, const qsp_tensor* t) { (void)c; (void)t; FAIL; }
void qsp_output_weights_init(qsp_output_weights* w) { (void)w; }
qsp_status qsp_upload_output(qsp_context* c, const qsp_output_weights* w) { (void)c; (void)w; FAIL; }
void qsp_cache_stats_init(qsp_cache_stats* s) { (void)s; }
qsp_status qsp_cache_stats_get(int32_t b, int32_t d, qsp_cache_stats* s) { (void)b; (void)d; (void)s; FAIL; }
qsp_status qsp_prefill(qsp_context* c, const int32_t* t, uint32_t n) { (void)c; (void)t; (void)n; FAIL; }
qsp_status qsp_prefill_embeddings(qsp_context* c, const float* h, uint32_t n) { (void)c; (void)h; (void)n; FAIL; }
qsp_status qsp_prefill_batch(const qsp_batch_seq* s, uint32_t n, uint32_t z) { (void)s; (void)n; (void)z; FAIL; }
qsp_status qsp_get_logits(qsp_context* c, const float** l, uint32_t* n) { (void)c; (void)l; (void)n; FAIL; }
qsp_status qsp_copy_logits(qsp_context* c, float* o, uint64_t n) { (void)c; (void)o; (void)n; FAIL; }
qsp_status qsp_greedy_token(qsp_context* c, int32_t* t) { (void)c; (void)t; FAIL; }
qsp_status qsp_kv_length(const qsp_context* c, uint32_t* n) { (void)c; (void)n; FAIL; }
qsp_status qsp_kv_clear(qsp_context* c) { (void)c; FAIL; }
qsp_status qsp_kv_truncate(qsp_context* c, uint32_t n) { (void)c; (void)n; FAIL; }

/* The tokenizer (1.2): the node QSP_1.2 that programs linked against 1.2 need. */
void qsp_tokenizer_info_init(qsp_tokenizer_info* i) { (void)i; }
qsp_status qsp_tokenizer_create(const qsp_gguf* g, qsp_tokenizer** o) { (void)g; if (o) *o = NULL; FAIL; }
void qsp_tokenizer_destroy(qsp_tokenizer* t) { (void)t; }
qsp_status qsp_tokenizer_get_info(const qsp_tokenizer* t, qsp_tokenizer_info* i) { (void)t; (void)i; FAIL; }
qsp_status qsp_tokenize(const qsp_tokenizer* t, const char* s, uint64_t n, uint32_t f, int32_t* ids, uint64_t c,
                        uint64_t* o) { (void)t; (void)s; (void)n; (void)f; (void)ids; (void)c; (void)o; FAIL; }
qsp_status qsp_token_piece(const qsp_tokenizer* t, int32_t id, uint32_t f, char* b, uint64_t c, uint64_t* o) {
  (void)t; (void)id; (void)f; (void)b; (void)c; (void)o; FAIL;
}
qsp_status qsp_detokenize(const qsp_tokenizer* t, const int32_t* ids, uint64_t n, uint32_t f, char* b, uint64_t c,
                          uint64_t* o) { (void)t; (void)ids; (void)n; (void)f; (void)b; (void)c; (void)o; FAIL; }
qsp_status qsp_text_stream_create(const qsp_tokenizer* t, uint32_t f, qsp_text_stream** o) {
  (void)t; (void)f; if (o) *o = NULL; FAIL;
}
void qsp_text_stream_destroy(qsp_text_stream* s) { (void)s; }
qsp_status qsp_text_stream_push(qsp_text_stream* s, int32_t id, char* b, uint64_t c, uint64_t* o) {
  (void)s; (void)id; (void)b; (void)c; (void)o; FAIL;
}
qsp_status qsp_text_stream_flush(qsp_text_stream* s, char* b, uint64_t c, uint64_t* o) {
  (void)s; (void)b; (void)c; (void)o; FAIL;
}
