/*
 * qsp.h — the public C API of qsp, a prompt-prefill engine for quantized
 * decoder-only transformers (Qwen3 and Llama families, GGUF Q4_0 / Q8_0 and,
 * since 1.1, the other legacy and K-quant block formats).
 *
 * This header is handwritten, C99-clean and the whole ABI of libqsp.so.1.
 *
 * General rules (each function's comment only states what differs):
 *
 *  Errors     Every function that can fail returns a qsp_status: QSP_OK (0)
 *             or a negative QSP_ERR_* value. The values never change meaning.
 *             A failing call leaves the context exactly as it was before the
 *             call (no partial KV append, no half-registered weight) unless the
 *             function says otherwise. The message of the last failure is kept
 *             per context (qsp_context_last_error) and per thread
 *             (qsp_last_error); both are set by every failing call.
 *             No abort(), exit() or C++ exception ever leaves the library.
 *
 *  Threads    Functions without a context argument are thread-safe.
 *             A qsp_context is NOT internally synchronized: use each context
 *             from one thread at a time (different contexts may be used from
 *             different threads concurrently, also when they share weights).
 *             The process-wide weight cache is internally synchronized.
 *
 *  Pointers   Input pointers are borrowed for the duration of the call only:
 *             the library copies what it keeps (weights are copied into the
 *             weight cache). Returned pointers are owned by the library; their
 *             lifetime is stated per function.
 *
 *  Structs    Option structs begin with `struct_size`; set it with the
 *             matching *_init() function (or to sizeof the struct). New fields
 *             are only ever appended, so older callers keep working. Structs
 *             hold fixed-width integers, floats and pointers only.
 *
 *  Layout     Matrices are row-major with the column (input-feature) index
 *             contiguous, as GGUF stores them: a weight of n_rows x n_cols maps
 *             an input of n_cols features to n_rows outputs. Quantized blocks
 *             (32 elements; 256 for the K-quants) run along the columns.
 */
#ifndef QSP_QSP_H
#define QSP_QSP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Visibility ---------------------------------------------------------- */
#if defined(QSP_STATIC)
#  define QSP_API
#elif defined(_WIN32)
#  if defined(QSP_BUILDING_LIBRARY)
#    define QSP_API __declspec(dllexport)
#  else
#    define QSP_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define QSP_API __attribute__((visibility("default")))
#else
#  define QSP_API
#endif

/* ---- Version ------------------------------------------------------------- */
#define QSP_VERSION_MAJOR 1
#define QSP_VERSION_MINOR 3
#define QSP_VERSION_PATCH 0
#define QSP_VERSION_NUMBER \
  (QSP_VERSION_MAJOR * 10000 + QSP_VERSION_MINOR * 100 + QSP_VERSION_PATCH)
#define QSP_VERSION_STRING "1.3.0"
/* The ABI major version: the SONAME is libqsp.so.QSP_ABI_VERSION. Bindings
 * compare it with qsp_abi_version() at load time. */
#define QSP_ABI_VERSION 1

/* Run-time version of the loaded library, e.g. "1.0.0". Static string. */
QSP_API const char* qsp_version_string(void);
/* Run-time version as MAJOR*10000 + MINOR*100 + PATCH. */
QSP_API uint32_t qsp_version_number(void);
/* Run-time ABI major version (== QSP_ABI_VERSION the library was built with). */
QSP_API uint32_t qsp_abi_version(void);

/* ---- Status codes -------------------------------------------------------- */
typedef int32_t qsp_status;

#define QSP_OK                        0
#define QSP_ERR_INVALID_ARGUMENT    (-1)  /* NULL pointer, zero count, bad enum or flag value */
#define QSP_ERR_STRUCT_SIZE         (-2)  /* struct_size too small / unknown */
#define QSP_ERR_SHAPE               (-3)  /* a shape inconsistent with the model, or a zero model dimension */
#define QSP_ERR_DTYPE               (-4)  /* dtype not allowed here, or byte size wrong for it */
#define QSP_ERR_OUT_OF_RANGE        (-5)  /* layer index, token id, length out of range */
#define QSP_ERR_NOT_READY           (-6)  /* weights missing, or no logits yet */
#define QSP_ERR_CONTEXT_FULL        (-7)  /* prefill would pass max_seq_len */
#define QSP_ERR_HANDLE_CONFLICT     (-8)  /* handle re-registered with other metadata */
#define QSP_ERR_NO_DEVICE           (-9)  /* no usable CUDA device (or not built with CUDA) */
#define QSP_ERR_OUT_OF_MEMORY      (-10)  /* host allocation failed */
#define QSP_ERR_DEVICE_OUT_OF_MEMORY (-11) /* device allocation failed */
#define QSP_ERR_DEVICE             (-12)  /* a CUDA runtime error */
#define QSP_ERR_UNSUPPORTED        (-13)  /* valid, but not supported by this backend */
#define QSP_ERR_INTERNAL           (-14)  /* a bug in qsp: please report */
#define QSP_ERR_IO                 (-15)  /* a file could not be opened / read / mapped */
#define QSP_ERR_BAD_FORMAT         (-16)  /* a model file is malformed */
#define QSP_ERR_BUFFER_TOO_SMALL   (-17)  /* an output buffer is too small; the needed length is returned (1.2) */

/* A static English description of a status ("invalid argument"); never NULL.
 * Unknown values give "unknown status". */
QSP_API const char* qsp_status_string(qsp_status status);

/* The message of the last failure on the calling thread, whichever context or
 * global function failed; "" if none. Valid until the next failing qsp call on
 * this thread. Never NULL. */
QSP_API const char* qsp_last_error(void);

/* ---- Logging ------------------------------------------------------------- */
#define QSP_LOG_ERROR 0
#define QSP_LOG_WARN  1
#define QSP_LOG_INFO  2
#define QSP_LOG_DEBUG 3

/* A log sink. `message` is a NUL-terminated line without a trailing newline,
 * valid only during the call. May be called from any thread that calls into
 * qsp; it must not call back into qsp. */
typedef void (*qsp_log_callback)(int32_t level, const char* message, void* user_data);

/* Sets the process-wide log sink used for messages that belong to no context
 * and for contexts created without their own callback. NULL restores the
 * default (warnings and errors to stderr when QSP_LOG is set in the
 * environment, otherwise silence). max_level filters (QSP_LOG_*). Thread-safe. */
QSP_API void qsp_set_log_callback(qsp_log_callback callback, void* user_data, int32_t max_level);

/* ---- Enumerations (plain int32_t values) --------------------------------- */
/* Tensor element types; the values are GGML's type ids, as in GGUF files. */
#define QSP_DTYPE_F32   0
#define QSP_DTYPE_F16   1
#define QSP_DTYPE_Q4_0  2   /* blocks of 32: fp16 scale d, 16 bytes of nibbles; x = d * (q - 8) */
#define QSP_DTYPE_Q4_1  3   /* 32 (20 bytes): fp16 d, fp16 m, 4-bit q;          x = d * q + m   (1.1) */
#define QSP_DTYPE_Q5_0  6   /* 32 (22 bytes): fp16 d, 5-bit q (high bits in qh); x = d * (q - 16) (1.1) */
#define QSP_DTYPE_Q5_1  7   /* 32 (24 bytes): fp16 d, fp16 m, 5-bit q;          x = d * q + m   (1.1) */
#define QSP_DTYPE_Q8_0  8   /* blocks of 32: fp16 scale d, 32 int8;              x = d * q       */
/* K-quants (since 1.1): super-blocks of 256 in sub-blocks of 16 or 32, each
 * with its own scale sc (and min m) under the super-block's fp16 d (and dmin). */
#define QSP_DTYPE_Q2_K 10   /* 84 bytes:  16 x 4-bit sc and m, 2-bit q;  x = d*sc*q - dmin*m   */
#define QSP_DTYPE_Q3_K 11   /* 110 bytes: 16 x 6-bit sc, 3-bit q;        x = d*(sc-32)*(q-4)   */
#define QSP_DTYPE_Q4_K 12   /* 144 bytes: 8 x 6-bit sc and m, 4-bit q;   x = d*sc*q - dmin*m   */
#define QSP_DTYPE_Q5_K 13   /* 176 bytes: 8 x 6-bit sc and m, 5-bit q;   x = d*sc*q - dmin*m   */
#define QSP_DTYPE_Q6_K 14   /* 210 bytes: 16 x int8 sc, 6-bit q;         x = d*sc*(q-32)       */
#define QSP_DTYPE_BF16 30

/* Bytes taken by a n_rows x n_cols tensor of `dtype`; 0 if the dtype is unknown
 * or n_cols is not a multiple of the block size. */
QSP_API uint64_t qsp_dtype_size(int32_t dtype, uint64_t n_rows, uint64_t n_cols);
/* "f32", "q4_0", ...; "unknown" otherwise. Static string. */
QSP_API const char* qsp_dtype_name(int32_t dtype);

#define QSP_BACKEND_AUTO 0  /* CUDA when a device is usable, else CPU (logged) */
#define QSP_BACKEND_CPU  1  /* the exact fp32 reference */
#define QSP_BACKEND_CUDA 2  /* the GPU; fails with QSP_ERR_NO_DEVICE without one */

/* Is the backend usable in this process (built in, and a device present)? 1/0. */
QSP_API int32_t qsp_backend_available(int32_t backend);

#define QSP_ROPE_NEOX 0        /* rotate pairs (i, i + head_dim/2): Qwen3, HF Llama */
#define QSP_ROPE_INTERLEAVED 1 /* rotate pairs (2i, 2i+1): Llama weights in GGUF */

/* ---- Context ------------------------------------------------------------- */
typedef struct qsp_context qsp_context;

typedef struct qsp_context_params {
  uint32_t struct_size;        /* = sizeof(qsp_context_params) */
  /* Model shape. */
  uint32_t n_layers;
  uint32_t hidden_size;
  uint32_t intermediate_size;
  uint32_t n_heads;            /* query heads */
  uint32_t n_kv_heads;         /* key/value heads; divides n_heads (GQA) */
  uint32_t head_dim;           /* even */
  uint32_t vocab_size;
  uint32_t max_seq_len;        /* KV-cache capacity in tokens */
  float    rms_eps;            /* RMSNorm epsilon, e.g. 1e-6 */
  float    rope_theta;         /* RoPE base frequency, e.g. 1e6 */
  int32_t  rope_style;         /* QSP_ROPE_* */
  int32_t  qk_norm;            /* 1: per-head RMSNorm of q and k before RoPE (Qwen3) */
  /* Execution. */
  int32_t  backend;            /* QSP_BACKEND_* */
  int32_t  device_index;       /* CUDA device ordinal */
  int32_t  n_threads;          /* CPU threads; 0 = one per core */
  /* Tensor parallelism (1.3; these two were reserved0 / reserved2, zero =
   * the unsplit model on one device, as before). The model is split into
   * n_devices shards, Megatron-style, as vLLM's tensor_parallel_size does:
   * shard i holds query heads, KV heads (and their KV cache) and FFN
   * features [i*X/N, (i+1)*X/N) of each count X with the rows of wq / wk /
   * wv / w_gate / w_up and the columns of wo / w_down that go with them, and
   * LM-head rows [i*vocab/N, (i+1)*vocab/N); the embedding and the norms are
   * replicated. The shards' partial outputs of wo and w_down are summed (the
   * all-reduces), the logits gathered, the greedy token is the argmax across
   * shards. The caller still uploads whole tensors; qsp slices them. The
   * model must divide: n_kv_heads and intermediate_size by n_devices, and
   * each shard's columns of wo and w_down must be whole quantization blocks
   * (32 elements, checked at qsp_context_create; 256 for a K-quant wo /
   * w_down, checked at upload), else QSP_ERR_SHAPE naming what does not
   * divide. The result is the unsplit model's (bit for bit on the CPU).
   * Backends: the CPU is one device and runs the shards one after another
   * in this process (1, 2, 4 or 8 of them; the mask is checked, not used);
   * CUDA: every shard on one device (a one-bit device_mask) runs the shards
   * one after another there (any count that divides; each shard's pieces of
   * wq / wk / wv / w_gate / w_up / wo / w_down and the LM head are cached as
   * matrices of their own); a shard per device runs them at once with an
   * NCCL all-reduce after wo and w_down. That needs NCCL 2.9+, loaded at run
   * time (libnccl.so.2 or $QSP_NCCL_LIBRARY): without it,
   * QSP_ERR_UNSUPPORTED naming what the loader said. On CUDA the result is
   * within rounding of the unsplit model's (the sums run in another order). */
  uint32_t n_devices;          /* shards; 0 or 1: unsplit */
  uint32_t device_mask;        /* the CUDA devices, bit i = ordinal i. n_devices bits: one shard per
                                  device (all-reduce between them). One bit: every shard in turn on
                                  that device, a local sum in place of the all-reduce (the
                                  partitioning without communication: tests). 0: n_devices devices
                                  from device_index on. Other counts: INVALID_ARGUMENT */
  qsp_log_callback log_callback; /* NULL: the process-wide sink */
  void*    log_user_data;
  int32_t  log_level;          /* most verbose level delivered, QSP_LOG_* */
  uint32_t reserved1;          /* must be 0 */
} qsp_context_params;

/* Fills *params with defaults (struct_size set, backend AUTO, 0 threads = all
 * cores, rms_eps 1e-6, rope_theta 1e6, NEOX, qk_norm 1, log level WARN, one
 * device) and a zero model shape that the caller must fill in. NULL-safe (no-op). */
QSP_API void qsp_context_params_init(qsp_context_params* params);

/* Creates a context: the model shape, a KV cache of max_seq_len tokens and the
 * scratch memory of the chosen backend. On success *out owns the context; free
 * it with qsp_context_destroy. On failure *out is set to NULL (when out is not
 * NULL). Errors: INVALID_ARGUMENT, STRUCT_SIZE, SHAPE (also: a split that
 * does not divide), NO_DEVICE, UNSUPPORTED (also: shards on several CUDA
 * devices without NCCL; on the CPU a shard count other than 1, 2, 4 or 8), OUT_OF_MEMORY,
 * DEVICE_OUT_OF_MEMORY, DEVICE. */
QSP_API qsp_status qsp_context_create(const qsp_context_params* params, qsp_context** out);

/* Frees the context, its KV cache and its references to cached weights (a
 * weight is freed when the last context using it is destroyed). NULL-safe.
 * The context must not be in use by another thread. */
QSP_API void qsp_context_destroy(qsp_context* ctx);

/* The message of the last failure on this context; "" if none. Valid until the
 * next call on this context. Never NULL (NULL ctx gives qsp_last_error()). */
QSP_API const char* qsp_context_last_error(const qsp_context* ctx);

typedef struct qsp_context_info {
  uint32_t struct_size;        /* = sizeof(qsp_context_info), set by the caller */
  int32_t  backend;            /* the backend in use: QSP_BACKEND_CPU or _CUDA */
  int32_t  device_index;       /* CUDA ordinal, -1 on the CPU */
  int32_t  n_threads;          /* CPU threads in use */
  char     device_name[128];   /* "CPU (16 threads)", "NVIDIA H200", NUL-terminated */
  uint64_t kv_cache_bytes;     /* bytes held by this context's KV cache */
  uint64_t scratch_bytes;      /* bytes of activation scratch */
} qsp_context_info;

QSP_API void qsp_context_info_init(qsp_context_info* info);
/* Describes a context. Errors: INVALID_ARGUMENT, STRUCT_SIZE. */
QSP_API qsp_status qsp_context_get_info(const qsp_context* ctx, qsp_context_info* info);

/* ---- Weights ------------------------------------------------------------- */
/* One tensor handed to the library. `handle` is the caller's name for these
 * exact bytes: tensors are cached process-wide per device by handle, and a
 * handle already in the cache with the same dtype, shape and byte size is taken
 * to be the same weights WITHOUT reading `data` (this is the caller's promise;
 * it is what makes a second context of a model upload nothing). The same handle
 * with other metadata is QSP_ERR_HANDLE_CONFLICT. Handle 0 means "no tensor"
 * (allowed only where a slot is optional). 1-D tensors have n_rows = 1. */
typedef struct qsp_tensor {
  uint64_t    handle;
  int32_t     dtype;           /* QSP_DTYPE_* */
  uint32_t    reserved;        /* must be 0 */
  uint64_t    n_rows;
  uint64_t    n_cols;          /* contiguous dimension */
  const void* data;            /* n_bytes bytes; borrowed for the call */
  uint64_t    n_bytes;         /* must equal qsp_dtype_size(dtype, n_rows, n_cols) */
} qsp_tensor;

/* The tensors of one transformer layer. Norm vectors accept F32/F16/BF16;
 * projections accept Q4_0, Q8_0, F16, BF16 and F32 (the CUDA backend: Q4_0,
 * Q8_0 and F16/BF16/F32, the latter converted to fp16). Shapes (rows x cols):
 *   attn_norm 1 x hidden        wq n_heads*head_dim x hidden
 *   wk, wv  n_kv_heads*head_dim x hidden
 *   q_norm, k_norm 1 x head_dim (handle 0 when qk_norm is 0)
 *   wo hidden x n_heads*head_dim
 *   ffn_norm 1 x hidden         w_gate, w_up intermediate x hidden
 *   w_down hidden x intermediate                                         */
typedef struct qsp_layer_weights {
  uint32_t   struct_size;      /* = sizeof(qsp_layer_weights) */
  uint32_t   reserved;         /* must be 0 */
  qsp_tensor attn_norm;
  qsp_tensor wq, wk, wv;
  qsp_tensor q_norm, k_norm;
  qsp_tensor wo;
  qsp_tensor ffn_norm;
  qsp_tensor w_gate, w_up, w_down;
} qsp_layer_weights;

/* Zeroes *w and sets struct_size. NULL-safe. */
QSP_API void qsp_layer_weights_init(qsp_layer_weights* w);

/* Registers the weights of layer `layer` (0-based) with the context, uploading
 * each tensor whose handle the device cache does not hold yet. All or nothing:
 * on failure the layer keeps what it had before the call. A layer may be
 * uploaded again (e.g. to swap weights); the KV cache is left as it is.
 * Errors: INVALID_ARGUMENT, STRUCT_SIZE, OUT_OF_RANGE (layer), SHAPE (also: a
 * K-quant wo / w_down without whole super-blocks per shard, n_devices > 1),
 * DTYPE, HANDLE_CONFLICT, OUT_OF_MEMORY, DEVICE_OUT_OF_MEMORY, DEVICE. */
QSP_API qsp_status qsp_upload_layer(qsp_context* ctx, uint32_t layer, const qsp_layer_weights* w);

/* Registers the token-embedding table (vocab_size x hidden_size; any dtype).
 * Errors as qsp_upload_layer. */
QSP_API qsp_status qsp_upload_embedding(qsp_context* ctx, const qsp_tensor* token_embd);

typedef struct qsp_output_weights {
  uint32_t   struct_size;      /* = sizeof(qsp_output_weights) */
  uint32_t   reserved;         /* must be 0 */
  qsp_tensor norm;             /* final RMSNorm, 1 x hidden */
  qsp_tensor lm_head;          /* vocab x hidden; the embedding's handle for tied
                                  embeddings: then it is stored once */
} qsp_output_weights;

QSP_API void qsp_output_weights_init(qsp_output_weights* w);
/* Registers the final norm and the LM head. Errors as qsp_upload_layer. */
QSP_API qsp_status qsp_upload_output(qsp_context* ctx, const qsp_output_weights* w);

/* Process-wide weight-cache statistics for one device. */
typedef struct qsp_cache_stats {
  uint32_t struct_size;        /* = sizeof(qsp_cache_stats), set by the caller */
  uint32_t reserved;
  uint64_t n_tensors;          /* distinct tensors held */
  uint64_t n_bytes;            /* bytes they occupy in the backend's layout */
  uint64_t n_uploads;          /* tensors uploaded since process start */
  uint64_t n_hits;             /* registrations served from the cache */
} qsp_cache_stats;

QSP_API void qsp_cache_stats_init(qsp_cache_stats* stats);
/* backend: QSP_BACKEND_CPU or QSP_BACKEND_CUDA; device_index ignored for the
 * CPU. Errors: INVALID_ARGUMENT, STRUCT_SIZE. Thread-safe. */
QSP_API qsp_status qsp_cache_stats_get(int32_t backend, int32_t device_index, qsp_cache_stats* stats);

/* ---- Prefill ------------------------------------------------------------- */
/* Runs n_tokens token ids through every layer, appending their keys and values
 * to the KV cache: positions continue from qsp_kv_length(). Afterwards the
 * last token's logits are available. Long prompts may be fed in chunks; the
 * result equals feeding them at once. Checked before anything changes: all
 * weights uploaded (NOT_READY), ids < vocab_size (OUT_OF_RANGE), the cache
 * has room (CONTEXT_FULL). On a device error mid-run the KV cache keeps its
 * previous length (the new entries are dropped).
 * Errors: INVALID_ARGUMENT (NULL, n_tokens 0), NOT_READY, OUT_OF_RANGE,
 * CONTEXT_FULL, OUT_OF_MEMORY, DEVICE_OUT_OF_MEMORY, DEVICE. */
QSP_API qsp_status qsp_prefill(qsp_context* ctx, const int32_t* tokens, uint32_t n_tokens);

/* As qsp_prefill, from hidden states already embedded: n_tokens x hidden_size
 * float32, row-major (the embedding table is then not needed). NaN/Inf inputs
 * are not rejected; they propagate to the logits. */
QSP_API qsp_status qsp_prefill_embeddings(qsp_context* ctx, const float* hidden, uint32_t n_tokens);

/* ---- Batched prefill (since 1.1) ----------------------------------------- */
/* One piece of a batch: `n_tokens` new tokens for one context, given as ids
 * (`tokens`) or as hidden states (`embeddings`, n_tokens x hidden_size
 * float32, row-major); exactly one of the two is set. A piece of one token is a
 * decode step, a long piece a prompt (or a chunk of one); any mix is fine. */
typedef struct qsp_batch_seq {
  qsp_context*   ctx;          /* the context this piece advances */
  const int32_t* tokens;       /* n_tokens ids, or NULL */
  const float*   embeddings;   /* n_tokens x hidden_size floats, or NULL */
  uint32_t       n_tokens;     /* >= 1 */
  uint32_t       flags;        /* must be 0 */
} qsp_batch_seq;

/* Advances n_seqs contexts at once: each as qsp_prefill would (its own KV
 * cache, its own positions; afterwards its own logits and greedy token). The
 * contexts must share one model: created with the same shape on the same
 * backend and device, with the very same weights registered (the same handles
 * in the same weight cache); each context at most once per call. seq_size is
 * sizeof(qsp_batch_seq) as the caller knows it (fields may be appended later;
 * the library reads seqs[i] at that stride). A backend that can run all
 * pieces in one pass does so; the result equals running the pieces one at a
 * time (bit for bit on the CPU).
 * Checked before anything changes, every context stays as it was on any of
 * these errors, and the message names the offending sequence ("sequence 3:
 * ..."): INVALID_ARGUMENT (NULL, n_seqs 0, a NULL ctx, tokens and embeddings
 * both or neither set, flags not 0, the same context twice, contexts of
 * different models), STRUCT_SIZE (seq_size), and per piece the errors of
 * qsp_prefill (NOT_READY, OUT_OF_RANGE, CONTEXT_FULL). On a device error
 * mid-run every cache keeps its previous length and no context of the batch
 * has logits. The message goes to every context of the batch and to
 * qsp_last_error(). All contexts of the batch must be free for this thread
 * for the duration of the call. */
QSP_API qsp_status qsp_prefill_batch(const qsp_batch_seq* seqs, uint32_t n_seqs, uint32_t seq_size);

/* ---- Logits -------------------------------------------------------------- */
/* Borrowed pointer to the last prefilled token's vocab_size logits; *n_vocab
 * (when n_vocab is not NULL) receives vocab_size. Valid until the next
 * prefill, KV clear/truncate or destroy of this context. Errors:
 * INVALID_ARGUMENT, NOT_READY (no prefill since the last clear). */
QSP_API qsp_status qsp_get_logits(qsp_context* ctx, const float** logits, uint32_t* n_vocab);

/* Copies the logits into out[0..capacity). capacity must be >= vocab_size
 * (else OUT_OF_RANGE). For callers that cannot hold a borrowed pointer. */
QSP_API qsp_status qsp_copy_logits(qsp_context* ctx, float* out, uint64_t capacity);

/* The argmax of the last logits (lowest id on ties), computed on the device. */
QSP_API qsp_status qsp_greedy_token(qsp_context* ctx, int32_t* token);

/* ---- KV cache ------------------------------------------------------------ */
/* Tokens held in the KV cache. */
QSP_API qsp_status qsp_kv_length(const qsp_context* ctx, uint32_t* length);
/* Empties the KV cache (and forgets the logits). */
QSP_API qsp_status qsp_kv_clear(qsp_context* ctx);
/* Keeps the first `length` tokens (<= current length, else OUT_OF_RANGE) and
 * forgets the logits. */
QSP_API qsp_status qsp_kv_truncate(qsp_context* ctx, uint32_t length);

#ifdef __cplusplus
}
#endif

#endif /* QSP_QSP_H */
