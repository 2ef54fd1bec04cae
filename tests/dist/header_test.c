/* Compiled as C99, C11, C++11 and C++17 with every warning an error: the
 * public headers must stay clean in all of them. */
#include "qsp/qsp.h"
#if __has_include("qsp/qsp_gguf.h")
#include "qsp/qsp_gguf.h"
#endif

int qsp_header_test(void);
int qsp_header_test(void) {
  qsp_context_params p;
  qsp_layer_weights w;
  qsp_status s = QSP_OK;
  qsp_context_params_init(&p);
  qsp_layer_weights_init(&w);
  return (int)s + (int)p.struct_size + (int)w.struct_size + QSP_VERSION_MAJOR;
}
