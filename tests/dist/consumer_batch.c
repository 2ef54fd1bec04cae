/* Uses a symbol of version node QSP_1.1 (qsp_prefill_batch): built against the
 * installed packages, dpkg-shlibdeps must give it libqsp1 (>= 1.1.0), the
 * version that introduced the symbol (scripts/test-packages). */
#include <qsp/qsp.h>
#include <stdio.h>
int main(void) {
  /* No sequences: refused before anything runs. */
  qsp_status s = qsp_prefill_batch(NULL, 0, (uint32_t)sizeof(qsp_batch_seq));
  printf("batch consumer: qsp %s, empty batch -> %s\n", qsp_version_string(), qsp_status_string(s));
  return s == QSP_ERR_INVALID_ARGUMENT ? 0 : 1;
}
