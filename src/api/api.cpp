// The C boundary. Every entry point validates its pointers and struct sizes,
// runs the engine inside a try block, and maps every exception to a status
// and a message (per context and per thread). Nothing may escape.
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "formats/format.h"
#include "engine/batch.h"
#include "engine/context.h"
#include "engine/weight_cache.h"
#include "qsp/qsp.h"

// qsp_context is never defined: a qsp_context* is a qsp::Context*. Keeping
// the C type incomplete also keeps C++ types out of the ABI description
// (abi/libqsp.so.1.abi).
namespace {

inline qsp::Context* impl(qsp_context* c) { return reinterpret_cast<qsp::Context*>(c); }
inline const qsp::Context* impl(const qsp_context* c) { return reinterpret_cast<const qsp::Context*>(c); }

thread_local std::string t_last_error;

qsp_status fail(qsp_context* ctx, qsp_status st, const std::string& msg) {
  // Assigning strings can itself throw bad_alloc; never let that escape.
  try {
    t_last_error = msg;
    if (ctx) impl(ctx)->last_error = msg;
  } catch (...) {
  }
  if (ctx) {
    try { impl(ctx)->log()(QSP_LOG_DEBUG, msg); } catch (...) {}
  }
  return st;
}

// Runs f(); maps exceptions. ctx may be NULL.
template <class F>
qsp_status guarded(qsp_context* ctx, F&& f) {
  try {
    f();
    return QSP_OK;
  } catch (const qsp::Error& e) {
    return fail(ctx, e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(ctx, QSP_ERR_OUT_OF_MEMORY, "host memory allocation failed");
  } catch (const std::exception& e) {
    return fail(ctx, QSP_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(ctx, QSP_ERR_INTERNAL, "internal error: unknown exception");
  }
}

#define QSP_CHECK_PTR(ctx, p)                                                            \
  do {                                                                                   \
    if ((p) == nullptr) return fail((ctx), QSP_ERR_INVALID_ARGUMENT, #p " is NULL");     \
  } while (0)

#define QSP_CHECK_CTX(ctx)                                                                      \
  do {                                                                                          \
    if ((ctx) == nullptr)                                             \
      return fail(nullptr, QSP_ERR_INVALID_ARGUMENT, "ctx is NULL");                            \
  } while (0)

// Option structs may come from an older caller (smaller, never below the
// first published size) or a newer one (larger: we read only what we know).
#define QSP_CHECK_SIZE(ctx, p, type, min_size)                                                  \
  do {                                                                                          \
    if ((p)->struct_size < (min_size) || (p)->struct_size > (1u << 16))                         \
      return fail((ctx), QSP_ERR_STRUCT_SIZE,                                                   \
                  qsp::strprintf(#type ".struct_size is %u; expected %zu (use " #type "_init)", \
                                 (p)->struct_size, sizeof(type)));                              \
  } while (0)

}  // namespace

extern "C" {

const char* qsp_version_string(void) { return QSP_VERSION_STRING; }
uint32_t qsp_version_number(void) { return QSP_VERSION_NUMBER; }
uint32_t qsp_abi_version(void) { return QSP_ABI_VERSION; }

const char* qsp_status_string(qsp_status s) {
  switch (s) {
    case QSP_OK: return "ok";
    case QSP_ERR_INVALID_ARGUMENT: return "invalid argument";
    case QSP_ERR_STRUCT_SIZE: return "wrong struct_size";
    case QSP_ERR_SHAPE: return "shape mismatch";
    case QSP_ERR_DTYPE: return "wrong dtype or byte size";
    case QSP_ERR_OUT_OF_RANGE: return "out of range";
    case QSP_ERR_NOT_READY: return "not ready";
    case QSP_ERR_CONTEXT_FULL: return "context full";
    case QSP_ERR_HANDLE_CONFLICT: return "handle conflict";
    case QSP_ERR_NO_DEVICE: return "no CUDA device";
    case QSP_ERR_OUT_OF_MEMORY: return "out of host memory";
    case QSP_ERR_DEVICE_OUT_OF_MEMORY: return "out of device memory";
    case QSP_ERR_DEVICE: return "device error";
    case QSP_ERR_UNSUPPORTED: return "unsupported";
    case QSP_ERR_INTERNAL: return "internal error";
    case QSP_ERR_IO: return "I/O error";
    case QSP_ERR_BAD_FORMAT: return "bad file format";
    case QSP_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    default: return "unknown status";
  }
}

const char* qsp_last_error(void) { return t_last_error.c_str(); }

void qsp_set_log_callback(qsp_log_callback cb, void* user_data, int32_t max_level) {
  try {
    qsp::set_global_log_sink(cb, user_data, max_level);
  } catch (...) {
  }
}

uint64_t qsp_dtype_size(int32_t dtype, uint64_t n_rows, uint64_t n_cols) {
  return qsp::fmt::tensor_bytes(dtype, n_rows, n_cols);
}

const char* qsp_dtype_name(int32_t dtype) { return qsp::fmt::name(dtype); }

int32_t qsp_backend_available(int32_t backend) {
  try {
    switch (backend) {
      case QSP_BACKEND_CPU: return 1;
      case QSP_BACKEND_AUTO: return 1;
      case QSP_BACKEND_CUDA: return qsp::cuda_device_count() > 0 ? 1 : 0;
      default: return 0;
    }
  } catch (...) {
    return 0;
  }
}

void qsp_context_params_init(qsp_context_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  qsp::ModelConfig::default_params(p);
}

qsp_status qsp_context_create(const qsp_context_params* params, qsp_context** out) {
  if (out) *out = nullptr;
  QSP_CHECK_PTR(nullptr, out);
  QSP_CHECK_PTR(nullptr, params);
  QSP_CHECK_SIZE(nullptr, params, qsp_context_params, sizeof(qsp_context_params));
  if (params->reserved1 != 0)
    return fail(nullptr, QSP_ERR_INVALID_ARGUMENT, "qsp_context_params reserved field reserved1 must be 0");
  qsp_context* ctx = nullptr;
  qsp_status st = guarded(nullptr, [&] {
    ctx = reinterpret_cast<qsp_context*>(new qsp::Context(*params));
  });
  if (st == QSP_OK) *out = ctx;
  return st;
}

void qsp_context_destroy(qsp_context* ctx) {
  if (!ctx) return;
  try {
    delete impl(ctx);
  } catch (...) {
  }
}

const char* qsp_context_last_error(const qsp_context* ctx) {
  if (!ctx) return qsp_last_error();
  return impl(ctx)->last_error.c_str();
}

void qsp_context_info_init(qsp_context_info* info) {
  if (!info) return;
  std::memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

qsp_status qsp_context_get_info(const qsp_context* cctx, qsp_context_info* info) {
  qsp_context* ctx = const_cast<qsp_context*>(cctx);
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, info);
  QSP_CHECK_SIZE(ctx, info, qsp_context_info, sizeof(qsp_context_info));
  return guarded(ctx, [&] {
    const qsp::Backend& b = impl(ctx)->backend();
    info->backend = b.kind();
    info->device_index = b.device();
    info->n_threads = b.n_threads();
    std::snprintf(info->device_name, sizeof info->device_name, "%s", b.device_name().c_str());
    info->kv_cache_bytes = b.kv_bytes();
    info->scratch_bytes = b.scratch_bytes();
  });
}

void qsp_layer_weights_init(qsp_layer_weights* w) {
  if (!w) return;
  std::memset(w, 0, sizeof *w);
  w->struct_size = sizeof *w;
}

void qsp_output_weights_init(qsp_output_weights* w) {
  if (!w) return;
  std::memset(w, 0, sizeof *w);
  w->struct_size = sizeof *w;
}

qsp_status qsp_upload_layer(qsp_context* ctx, uint32_t layer, const qsp_layer_weights* w) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, w);
  QSP_CHECK_SIZE(ctx, w, qsp_layer_weights, sizeof(qsp_layer_weights));
  return guarded(ctx, [&] { impl(ctx)->upload_layer(layer, *w); });
}

qsp_status qsp_upload_embedding(qsp_context* ctx, const qsp_tensor* token_embd) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, token_embd);
  return guarded(ctx, [&] { impl(ctx)->upload_embedding(*token_embd); });
}

qsp_status qsp_upload_output(qsp_context* ctx, const qsp_output_weights* w) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, w);
  QSP_CHECK_SIZE(ctx, w, qsp_output_weights, sizeof(qsp_output_weights));
  return guarded(ctx, [&] { impl(ctx)->upload_output(*w); });
}

void qsp_cache_stats_init(qsp_cache_stats* s) {
  if (!s) return;
  std::memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
}

qsp_status qsp_cache_stats_get(int32_t backend, int32_t device_index, qsp_cache_stats* stats) {
  QSP_CHECK_PTR(nullptr, stats);
  QSP_CHECK_SIZE(nullptr, stats, qsp_cache_stats, sizeof(qsp_cache_stats));
  if (backend != QSP_BACKEND_CPU && backend != QSP_BACKEND_CUDA)
    return fail(nullptr, QSP_ERR_INVALID_ARGUMENT, "backend must be QSP_BACKEND_CPU or QSP_BACKEND_CUDA");
  if (backend == QSP_BACKEND_CUDA && device_index < 0)
    return fail(nullptr, QSP_ERR_INVALID_ARGUMENT, "device_index must be >= 0");
  return guarded(nullptr, [&] {
    qsp::CacheStats c = qsp::WeightCache::get(backend, backend == QSP_BACKEND_CPU ? -1 : device_index).stats();
    stats->n_tensors = c.n_tensors;
    stats->n_bytes = c.n_bytes;
    stats->n_uploads = c.n_uploads;
    stats->n_hits = c.n_hits;
  });
}

qsp_status qsp_prefill(qsp_context* ctx, const int32_t* tokens, uint32_t n_tokens) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, tokens);
  return guarded(ctx, [&] { impl(ctx)->prefill(tokens, nullptr, n_tokens); });
}

qsp_status qsp_prefill_embeddings(qsp_context* ctx, const float* hidden, uint32_t n_tokens) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, hidden);
  return guarded(ctx, [&] { impl(ctx)->prefill(nullptr, hidden, n_tokens); });
}

qsp_status qsp_prefill_batch(const qsp_batch_seq* seqs, uint32_t n_seqs, uint32_t seq_size) {
  QSP_CHECK_PTR(nullptr, seqs);
  if (n_seqs == 0) return fail(nullptr, QSP_ERR_INVALID_ARGUMENT, "n_seqs must be > 0");
  // The first published qsp_batch_seq ends with `flags`; a newer caller's
  // larger struct is read at its own stride, its extra fields ignored.
  constexpr uint32_t kMinSeqSize = offsetof(qsp_batch_seq, flags) + sizeof(uint32_t);
  if (seq_size < kMinSeqSize || seq_size > (1u << 16))
    return fail(nullptr, QSP_ERR_STRUCT_SIZE,
                qsp::strprintf("seq_size is %u; expected %zu (sizeof(qsp_batch_seq))", seq_size,
                               sizeof(qsp_batch_seq)));
  // Copied out, not referenced: any seq_size in range is accepted, and a
  // stride that is not a multiple of 8 leaves seqs[i] misaligned (fuzz_batch).
  const auto seq = [&](uint32_t i) {
    qsp_batch_seq s{};
    std::memcpy(&s, reinterpret_cast<const char*>(seqs) + uint64_t(i) * seq_size, kMinSeqSize);
    return s;
  };
  // Every context of the batch hears of a failure, and so does the thread.
  const auto fail_all = [&](qsp_status st) {
    if (st != QSP_OK)
      for (uint32_t i = 0; i < n_seqs; ++i)
        if (seq(i).ctx) fail(seq(i).ctx, st, t_last_error);
    return st;
  };
  for (uint32_t i = 0; i < n_seqs; ++i)
    if (!seq(i).ctx)
      return fail_all(fail(nullptr, QSP_ERR_INVALID_ARGUMENT, qsp::strprintf("sequence %u: ctx is NULL", i)));
  return fail_all(guarded(nullptr, [&] {
    std::vector<qsp::BatchSeq> v(n_seqs);
    for (uint32_t i = 0; i < n_seqs; ++i) {
      const qsp_batch_seq s = seq(i);
      QSP_FAIL_IF(s.flags != 0, QSP_ERR_INVALID_ARGUMENT, "sequence %u: flags must be 0", i);
      QSP_FAIL_IF(!s.tokens && !s.embeddings, QSP_ERR_INVALID_ARGUMENT,
                  "sequence %u: tokens and embeddings are both NULL", i);
      v[i].ctx = impl(s.ctx);
      v[i].tokens = s.tokens;
      v[i].embeddings = s.embeddings;
      v[i].n = s.n_tokens;
    }
    qsp::prefill_batch(v);
  }));
}

qsp_status qsp_get_logits(qsp_context* ctx, const float** logits, uint32_t* n_vocab) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, logits);
  return guarded(ctx, [&] {
    *logits = impl(ctx)->logits();
    if (n_vocab) *n_vocab = impl(ctx)->config().vocab;
  });
}

qsp_status qsp_copy_logits(qsp_context* ctx, float* out, uint64_t capacity) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, out);
  return guarded(ctx, [&] {
    const uint32_t v = impl(ctx)->config().vocab;
    QSP_FAIL_IF(capacity < v, QSP_ERR_OUT_OF_RANGE, "capacity %llu is less than vocab_size %u",
                (unsigned long long)capacity, v);
    std::memcpy(out, impl(ctx)->logits(), sizeof(float) * v);
  });
}

qsp_status qsp_greedy_token(qsp_context* ctx, int32_t* token) {
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, token);
  return guarded(ctx, [&] { *token = impl(ctx)->greedy_token(); });
}

qsp_status qsp_kv_length(const qsp_context* cctx, uint32_t* length) {
  qsp_context* ctx = const_cast<qsp_context*>(cctx);
  QSP_CHECK_CTX(ctx);
  QSP_CHECK_PTR(ctx, length);
  *length = impl(ctx)->kv_length();
  return QSP_OK;
}

qsp_status qsp_kv_clear(qsp_context* ctx) {
  QSP_CHECK_CTX(ctx);
  impl(ctx)->kv_clear();
  return QSP_OK;
}

qsp_status qsp_kv_truncate(qsp_context* ctx, uint32_t length) {
  QSP_CHECK_CTX(ctx);
  return guarded(ctx, [&] { impl(ctx)->kv_truncate(length); });
}

}  // extern "C"
