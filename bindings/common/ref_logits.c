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
#include "tiny_model.h"

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
  OF(qsp_context_params, n_devices);
  OF(qsp_context_params, device_mask);
  OF(qsp_context_params, log_callback);
  OF(qsp_context_params, log_user_data);
  OF(qsp_context_params, log_level);
  OF(qsp_context_params, reserved1);
  SZ(qsp_batch_seq);
  OF(qsp_batch_seq, ctx);
  OF(qsp_batch_seq, tokens);
  OF(qsp_batch_seq, embeddings);
  OF(qsp_batch_seq, n_tokens);
  OF(qsp_batch_seq, flags);
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
  const float* logits = NULL;
  uint32_t n_vocab = 0;
  float first;

  if (argc < 2) {
    fprintf(stderr, "usage: %s LOGITS_FILE [LAYOUT_FILE]\n", argv[0]);
    return 2;
  }
  if (qsp_abi_version() != QSP_ABI_VERSION) {
    fprintf(stderr, "ref_logits: libqsp ABI %u, built for %d\n", qsp_abi_version(), QSP_ABI_VERSION);
    return 1;
  }
  qsp_tiny_params(&p);
  CHECK(qsp_context_create(&p, &ctx));
  CHECK(qsp_tiny_upload(ctx));
  CHECK(qsp_prefill(ctx, qsp_tiny_tokens, QSP_TINY_N_TOKENS));
  CHECK(qsp_get_logits(ctx, &logits, &n_vocab));
  first = logits[0];
  if (!qsp_tiny_write_f32le(argv[1], logits, n_vocab)) {
    fprintf(stderr, "ref_logits: cannot write %s\n", argv[1]);
    return 1;
  }
  qsp_context_destroy(ctx);
  if (argc > 2 && !write_layout(argv[2])) {
    fprintf(stderr, "ref_logits: cannot write %s\n", argv[2]);
    return 1;
  }
  printf("ref_logits: %u logits to %s (logits[0] = %.9g)\n", n_vocab, argv[1], (double)first);
  return 0;
}
