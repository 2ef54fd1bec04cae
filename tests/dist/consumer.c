/* Built against an installed qsp through pkg-config. */
#include <qsp/qsp.h>
#include <stdio.h>
int main(void) {
  qsp_context_params p;
  qsp_context* ctx = NULL;
  qsp_context_params_init(&p);
  p.n_layers = 1; p.hidden_size = 64; p.intermediate_size = 128; p.n_heads = 2; p.n_kv_heads = 1;
  p.head_dim = 32; p.vocab_size = 100; p.max_seq_len = 16; p.backend = QSP_BACKEND_CPU;
  if (qsp_context_create(&p, &ctx) != QSP_OK) { fprintf(stderr, "%s\n", qsp_last_error()); return 1; }
  qsp_context_destroy(ctx);
  printf("c consumer: qsp %s\n", qsp_version_string());
  return qsp_abi_version() == QSP_ABI_VERSION ? 0 : 1;
}
