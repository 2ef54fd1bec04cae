/* Uses symbols of version node QSP_1.2 (the tokenizer): built against the
 * installed packages, dpkg-shlibdeps must give it libqsp1 (>= 1.2.0), the
 * version that introduced them (scripts/test-packages). */
#include <qsp/qsp_gguf.h>
#include <stdio.h>
int main(void) {
  /* No file: refused with a status, nothing created. */
  qsp_tokenizer* t = (qsp_tokenizer*)1;
  qsp_status s = qsp_tokenizer_create(NULL, &t);
  uint64_t n = 0;
  qsp_status s2 = qsp_tokenize(NULL, "hi", 2, 0, NULL, 0, &n);
  printf("tokenizer consumer: qsp %s, no file -> %s, no tokenizer -> %s\n", qsp_version_string(),
         qsp_status_string(s), qsp_status_string(s2));
  return s == QSP_ERR_INVALID_ARGUMENT && t == NULL && s2 == QSP_ERR_INVALID_ARGUMENT ? 0 : 1;
}
