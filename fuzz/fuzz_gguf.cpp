// libFuzzer target for the GGUF reader: any byte string goes through
// qsp_gguf_open_memory, the info and tensor-directory calls, the model check
// (qsp_gguf_fill_params) and, for small models that pass it, a CPU context,
// qsp_gguf_upload and a one-token prefill. Every tensor a successful open
// reports is touched at its first and last byte, so AddressSanitizer catches
// any directory entry that points outside the input.
//
// Build and run: fuzz/run-fuzz.sh SECONDS (clang++-14, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qsp_gguf* g = nullptr;
  if (qsp_gguf_open_memory(data, size, &g) != QSP_OK) {
    if (g != nullptr || qsp_gguf_last_error()[0] == 0) __builtin_trap();  // a failure must explain itself
    return 0;
  }
  qsp_gguf_info info;
  qsp_gguf_info_init(&info);
  if (qsp_gguf_get_info(g, &info) != QSP_OK) __builtin_trap();
  volatile uint8_t sink = 0;
  const uint64_t n = qsp_gguf_tensor_count(g);
  for (uint64_t i = 0; i < n; ++i) {
    qsp_gguf_tensor_desc d;
    qsp_gguf_tensor_desc_init(&d);
    if (qsp_gguf_tensor_info(g, i, &d) != QSP_OK) __builtin_trap();
    if (d.offset > size || d.n_bytes > size - d.offset) __builtin_trap();
    if (d.n_bytes > 0) {
      const uint8_t* p = static_cast<const uint8_t*>(d.data);
      sink = sink + p[0] + p[d.n_bytes - 1];
    }
    uint64_t idx = 0;
    if (qsp_gguf_find_tensor(g, d.name, &idx) != QSP_OK || idx > i) __builtin_trap();
    (void)qsp_gguf_type_name(d.type);
  }
  qsp_context_params p;
  qsp_context_params_init(&p);
  p.backend = QSP_BACKEND_CPU;
  p.n_threads = 1;
  p.max_seq_len = 4;
  if (qsp_gguf_fill_params(g, &p) == QSP_OK && p.hidden_size <= 4096 && p.intermediate_size <= 16384 &&
      p.vocab_size <= 65536 && p.n_layers <= 64 && uint64_t(p.n_heads) * p.head_dim <= 8192) {
    qsp_context* ctx = nullptr;
    if (qsp_context_create(&p, &ctx) == QSP_OK) {
      if (qsp_gguf_upload(g, ctx, nullptr, nullptr) == QSP_OK) {
        const int32_t tok[2] = {0, int32_t(p.vocab_size - 1)};
        if (qsp_prefill(ctx, tok, 2) == QSP_OK) {
          int32_t next = 0;
          qsp_greedy_token(ctx, &next);
        }
      }
      qsp_context_destroy(ctx);
    }
  }
  qsp_gguf_close(g);
  return 0;
}
