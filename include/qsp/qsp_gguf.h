/*
 * qsp_gguf.h — loading GGUF model files (llama.cpp's format) into qsp.
 *
 * Part of libqsp.so.1, C99-clean, under the rules of qsp.h (errors, structs,
 * pointers), with these differences:
 *
 *  Errors     Functions return qsp_status values of qsp.h. The message of the
 *             last failure of a qsp_gguf_* function (and of
 *             qsp_context_create_from_gguf) is kept per thread and returned
 *             by qsp_gguf_last_error(); qsp_last_error() is NOT set by these
 *             functions, except that a failing qsp.h call they make (context
 *             creation, weight upload) sets it as usual. The codes used:
 *               QSP_ERR_INVALID_ARGUMENT  a NULL pointer
 *               QSP_ERR_STRUCT_SIZE       struct_size too small
 *               QSP_ERR_IO                the file cannot be opened, read or mapped
 *               QSP_ERR_BAD_FORMAT        not a GGUF file, a version other than
 *                                         2 or 3, truncated, an offset or size out
 *                                         of bounds, a misaligned tensor, an
 *                                         unknown architecture, a missing key or
 *                                         tensor, a shape that does not fit
 *               QSP_ERR_UNSUPPORTED       a valid file qsp cannot run: a tensor
 *                                         type other than f32, f16, bf16, q4_0,
 *                                         q8_0 (or a quantized norm), biases,
 *                                         partial RoPE, big-endian files
 *               QSP_ERR_OUT_OF_MEMORY     host allocation failed
 *             plus, from qsp_gguf_upload / qsp_context_create_from_gguf, any
 *             status that qsp_context_create or qsp_upload_* returns.
 *             Messages name the problem and, where there is one, the tensor or
 *             key, e.g. "tensor blk.0.ffn_down.weight has type iq4_nl (20),
 *             qsp supports f32, f16, q4_0, ..." (the format registry's list).
 *             A malformed file never crashes the reader and is never read
 *             outside its bounds: every count, length, offset and size is
 *             checked (overflow-safe) before use.
 *
 *  Threads    A qsp_gguf is immutable once opened: every function that takes a
 *             `const qsp_gguf*` may be called from any number of threads at
 *             once (e.g. one upload per context). qsp_gguf_close must not run
 *             concurrently with any other use of the same qsp_gguf.
 *
 *  Files      Files are memory-mapped read-only. Truncating or rewriting a file
 *             while it is open is undefined (the OS may raise SIGBUS), as with
 *             any mapped file.
 *
 *  Layout     GGUF dimension ne[0] is the contiguous one: a tensor maps to a
 *             qsp_tensor with n_cols = ne[0] and n_rows = ne[1] * ne[2] * ne[3]
 *             (1-D tensors: n_rows = 1).
 *
 * Supported architectures (general.architecture): "qwen3" (NEOX RoPE, QK-norm)
 * and "llama" (interleaved RoPE, as llama.cpp applies it to GGUF Llama
 * weights; no QK-norm). docs/GGUF.md lists the metadata keys read, their
 * defaults, the tensor names and how weight handles are derived.
 */
#ifndef QSP_QSP_GGUF_H
#define QSP_QSP_GGUF_H

#include "qsp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open GGUF file (or buffer): its parsed header, metadata and tensor
 * directory, and the mapping of its bytes. Opaque. */
typedef struct qsp_gguf qsp_gguf;

/* The message of the last failure of a qsp_gguf_* function (or of
 * qsp_context_create_from_gguf) on the calling thread; "" if none. Valid until
 * the next failing such call on this thread. Never NULL. Thread-safe. */
QSP_API const char* qsp_gguf_last_error(void);

/* Opens and validates the GGUF file at `path` (UTF-8 / native bytes): header,
 * metadata and tensor directory are parsed, and every tensor's type, size,
 * alignment and bounds are checked; tensor data is mapped, not read. Any GGUF
 * v2 or v3 file opens, whatever its architecture or tensor types (use
 * qsp_gguf_fill_params to learn whether qsp can run it).
 * On success *out owns the file; free it with qsp_gguf_close. On failure *out
 * is set to NULL (when out is not NULL).
 * Errors: INVALID_ARGUMENT, IO, BAD_FORMAT, UNSUPPORTED (a big-endian file, a
 * tensor type id newer than the reader knows (43 and up) or one GGML removed),
 * OUT_OF_MEMORY. Thread-safe. */
QSP_API qsp_status qsp_gguf_open(const char* path, qsp_gguf** out);

/* As qsp_gguf_open, from `size` bytes at `data` (a whole GGUF file in memory).
 * The buffer is borrowed, not copied: it must stay valid and unchanged until
 * qsp_gguf_close. Tensor data pointers (qsp_gguf_tensor_desc.data) point into
 * it; for f32/f16/bf16 tensors it should be at least 4-byte aligned.
 * Errors as qsp_gguf_open, without IO. Thread-safe. */
QSP_API qsp_status qsp_gguf_open_memory(const void* data, uint64_t size, qsp_gguf** out);

/* Unmaps and frees the file. Contexts created from it are unaffected (the
 * library copied their weights). Pointers obtained from `g` (tensor names,
 * data) become invalid. NULL-safe. */
QSP_API void qsp_gguf_close(qsp_gguf* g);

/* What a file says about itself. Hyperparameters are read from the metadata
 * with the defaults of docs/GGUF.md for the known architectures; a value that
 * is missing (with no default), of the wrong type or out of range reads as 0.
 * Use qsp_gguf_fill_params for the validated model shape. */
typedef struct qsp_gguf_info {
  uint32_t struct_size;        /* = sizeof(qsp_gguf_info), set by the caller */
  uint32_t version;            /* GGUF version: 2 or 3 */
  uint64_t file_size;          /* bytes of the file or buffer */
  uint64_t tensor_count;
  uint64_t kv_count;           /* metadata key/value pairs */
  uint64_t data_offset;        /* file offset of the tensor data section */
  uint64_t weight_bytes;       /* data bytes of all tensors together */
  uint32_t alignment;          /* general.alignment, default 32 */
  int32_t  known_architecture; /* 1: "qwen3" or "llama"; 0: another one */
  char     architecture[32];   /* general.architecture, NUL-terminated ("" if
                                  missing; truncated if longer) */
  char     name[96];           /* general.name, NUL-terminated, "" if missing */
  uint32_t n_layers;           /* <arch>.block_count */
  uint32_t hidden_size;        /* <arch>.embedding_length */
  uint32_t intermediate_size;  /* <arch>.feed_forward_length */
  uint32_t n_heads;            /* <arch>.attention.head_count */
  uint32_t n_kv_heads;         /* <arch>.attention.head_count_kv */
  uint32_t head_dim;           /* <arch>.attention.key_length */
  uint32_t vocab_size;         /* <arch>.vocab_size, tokenizer tokens, or token_embd rows */
  uint32_t context_length;     /* <arch>.context_length */
  float    rms_eps;            /* <arch>.attention.layer_norm_rms_epsilon */
  float    rope_theta;         /* <arch>.rope.freq_base */
  int32_t  rope_style;         /* QSP_ROPE_*; -1 for an unknown architecture */
  int32_t  qk_norm;            /* 1 / 0; -1 for an unknown architecture */
  int32_t  tied_embeddings;    /* 1: no output.weight, the LM head is token_embd */
  int32_t  file_type;          /* general.file_type (llama.cpp's LLAMA_FTYPE), -1 if missing */
} qsp_gguf_info;

/* Zeroes *info and sets struct_size. NULL-safe. */
QSP_API void qsp_gguf_info_init(qsp_gguf_info* info);

/* Describes the file. Errors: INVALID_ARGUMENT, STRUCT_SIZE. */
QSP_API qsp_status qsp_gguf_get_info(const qsp_gguf* g, qsp_gguf_info* info);

/* Number of tensors in the file; 0 for NULL. */
QSP_API uint64_t qsp_gguf_tensor_count(const qsp_gguf* g);

/* One entry of the tensor directory. */
typedef struct qsp_gguf_tensor_desc {
  uint32_t    struct_size;     /* = sizeof(qsp_gguf_tensor_desc), set by the caller */
  int32_t     type;            /* GGML type id; QSP_DTYPE_* for the five qsp runs,
                                  others e.g. 14 (q6_K) */
  uint32_t    n_dims;          /* 0..4, as stored */
  uint32_t    reserved;        /* 0 */
  const char* name;            /* NUL-terminated; owned by g, valid until qsp_gguf_close */
  const char* type_name;       /* "q4_0", "q6_K", ...; static */
  uint64_t    ne[4];           /* dimensions, ne[0] contiguous; unused ones are 1 */
  uint64_t    n_rows;          /* ne[1] * ne[2] * ne[3] */
  uint64_t    n_cols;          /* ne[0] */
  uint64_t    offset;          /* absolute file offset of the data */
  uint64_t    n_bytes;         /* bytes of data */
  uint64_t    handle;          /* the qsp_tensor handle qsp_gguf_upload uses (never 0) */
  const void* data;            /* the data in the mapping; valid until qsp_gguf_close */
} qsp_gguf_tensor_desc;

/* Zeroes *desc and sets struct_size. NULL-safe. */
QSP_API void qsp_gguf_tensor_desc_init(qsp_gguf_tensor_desc* desc);

/* Describes tensor `index` (0-based, in file order).
 * Errors: INVALID_ARGUMENT, STRUCT_SIZE, OUT_OF_RANGE (index >= tensor count). */
QSP_API qsp_status qsp_gguf_tensor_info(const qsp_gguf* g, uint64_t index, qsp_gguf_tensor_desc* desc);

/* Finds the tensor named `name`; *index receives its index.
 * Errors: INVALID_ARGUMENT, OUT_OF_RANGE (no such tensor). */
QSP_API qsp_status qsp_gguf_find_tensor(const qsp_gguf* g, const char* name, uint64_t* index);

/* The name of a GGML type id ("f32", "q4_0", "q6_K", "iq4_xs", ...);
 * "unknown" otherwise. Static string. Thread-safe. */
QSP_API const char* qsp_gguf_type_name(int32_t ggml_type);

/* Checks that qsp can run the model and writes its shape into *params, which
 * the caller initialized (qsp_context_params_init) and may have filled with
 * execution settings. Written: n_layers, hidden_size, intermediate_size,
 * n_heads, n_kv_heads, head_dim, vocab_size, max_seq_len, rms_eps,
 * rope_theta, rope_style, qk_norm. Left as the caller set them: backend,
 * device_index, n_threads, log_*, reserved fields.
 * max_seq_len: the caller's value on entry, if not 0, capped at the model's
 * context length; 0 on entry gives min(context length, 8192), so a default
 * context never allocates a KV cache for 128k tokens. Ask for more explicitly.
 * The check covers everything a later qsp_gguf_upload needs from the file:
 * the architecture, every hyperparameter, every tensor's presence, type and
 * shape. On failure *params is unchanged.
 * Errors: INVALID_ARGUMENT, STRUCT_SIZE, BAD_FORMAT, UNSUPPORTED. */
QSP_API qsp_status qsp_gguf_fill_params(const qsp_gguf* g, qsp_context_params* params);

/* Upload progress: called after each registered group of tensors (one layer,
 * the embedding, the output) with the bytes handed to the library so far and
 * in all (tensors served from the weight cache count too). Called on the
 * uploading thread; it must not call back into qsp with this context. */
typedef void (*qsp_gguf_progress_callback)(uint64_t done_bytes, uint64_t total_bytes, void* user_data);

/* Registers every weight of the model with `ctx`: all layers, the token
 * embedding and the output (final norm and LM head; for tied embeddings the
 * LM head is the embedding's handle, stored once). ctx must have been created
 * with parameters from qsp_gguf_fill_params of a file with this shape (the
 * execution settings and max_seq_len may differ). Each tensor's handle is
 * derived from the file's identity and the tensor's name (docs/GGUF.md): a
 * second context of the same file uploads nothing, different files never
 * share. progress may be NULL.
 * On failure ctx may hold some of the weights (a layer is all or nothing);
 * upload again or destroy it. The message names the tensor; a failing qsp.h
 * call also sets qsp_context_last_error(ctx).
 * Errors: INVALID_ARGUMENT, BAD_FORMAT, UNSUPPORTED, and those of
 * qsp_upload_layer / qsp_upload_embedding / qsp_upload_output (e.g. SHAPE when
 * ctx has another model's shape). Uses ctx: the qsp.h threading rules apply. */
QSP_API qsp_status qsp_gguf_upload(const qsp_gguf* g, qsp_context* ctx, qsp_gguf_progress_callback progress,
                                   void* user_data);

/* Convenience: qsp_gguf_open + qsp_gguf_fill_params + qsp_context_create +
 * qsp_gguf_upload + qsp_gguf_close. `exec` supplies the execution settings
 * (backend, device_index, n_threads, log_*) and max_seq_len (0: the default
 * of qsp_gguf_fill_params); its model-shape fields are ignored. exec may be
 * NULL: the defaults of qsp_context_params_init. On success *out owns the
 * context (free it with qsp_context_destroy); on failure *out is set to NULL
 * (when out is not NULL). Errors: those of the functions above. Thread-safe. */
QSP_API qsp_status qsp_context_create_from_gguf(const char* path, const qsp_context_params* exec,
                                                qsp_context** out);

/* ---------------------------------------------------------------------------
 * The tokenizer a GGUF file carries (1.2)
 *
 * Text in, text out, with the vocabulary of tokenizer.ggml.* (docs/TOKENIZER.md
 * says which keys are read and how each model splits text):
 *   "gpt2"  byte-level BPE, with the pre-tokenizer of tokenizer.ggml.pre:
 *           "qwen2" (Qwen2/Qwen3), "llama-bpe" (Llama 3), "default"/"gpt-2"
 *           (GPT-2's own split), exactly as the reference (Hugging Face)
 *           tokenizers split text;
 *   "llama" SentencePiece-style (older Llama files): score-ordered merges,
 *           '\xe2\x96\x81' for spaces, a dummy space prefix, byte fallback
 *           (<0xXX>) for what the vocabulary lacks.
 * Unicode properties come from utf8proc; qsp_tokenizer_info.unicode_version
 * names the Unicode version the splitting follows.
 * Text is UTF-8, passed with its length (no NUL needed). Invalid UTF-8 is
 * tokenized as if each maximal invalid subpart were U+FFFD (what a reference
 * tokenizer sees after decoding the bytes with replacement); tokenize then
 * detokenize gives the text back byte for byte for valid UTF-8 (without
 * QSP_TOKENIZE_ADD_SPECIAL), with the reference tokenizers' own exceptions:
 * "qwen2" gives the NFC form of the text (its normalizer); "llama" turns a
 * literal U+2581 into a space and adds the dummy space after a special token.
 * The pre-tokenizers' \s is Unicode's White_Space, as in the Rust tokenizers
 * (JavaScript ports differ on U+0085 and U+FEFF).
 * Output buffers: every function that writes ids or text takes the buffer, its
 * capacity (in ids or bytes) and a pointer that receives the full length. When
 * the capacity is too small it returns QSP_ERR_BUFFER_TOO_SMALL with the
 * needed length set and nothing else changed (a stream keeps its state), so a
 * caller may pass a NULL buffer with capacity 0 to learn the size. Text is
 * never NUL-terminated by these functions.
 * Errors go to qsp_gguf_last_error(), as for every qsp_gguf_* function.
 * Threads: a qsp_tokenizer is immutable; any number of threads may use one at
 * once. A qsp_text_stream is used by one thread at a time.
 * ------------------------------------------------------------------------- */

typedef struct qsp_tokenizer qsp_tokenizer;
typedef struct qsp_text_stream qsp_text_stream;

/* qsp_tokenizer_info.kind */
#define QSP_TOKENIZER_BPE 1 /* tokenizer.ggml.model "gpt2": byte-level BPE */
#define QSP_TOKENIZER_SPM 2 /* tokenizer.ggml.model "llama": SentencePiece-style */

/* qsp_tokenize flags */
#define QSP_TOKENIZE_ADD_SPECIAL 1u   /* add what the model adds around a text: BOS when
                                         tokenizer.ggml.add_bos_token says so (the default
                                         of its model when absent), EOS when add_eos_token */
#define QSP_TOKENIZE_PARSE_SPECIAL 2u /* text spelling a control token ("<|im_start|>")
                                         becomes that token; without this flag it is
                                         tokenized as plain text. User-defined tokens
                                         (token_type 4, e.g. Qwen3's "<think>") always
                                         match, as in the reference tokenizers. Where
                                         spellings overlap, the leftmost match wins,
                                         then the longest */

/* qsp_detokenize / qsp_token_piece / qsp_text_stream_create flags */
#define QSP_DETOKENIZE_SKIP_SPECIAL 1u /* control tokens (BOS, EOS, <|im_end|>) give no text */

/* Struct-size rule of qsp.h: set struct_size (qsp_tokenizer_info_init does). */
typedef struct qsp_tokenizer_info {
  uint32_t struct_size;
  int32_t kind;             /* QSP_TOKENIZER_* */
  uint32_t n_vocab;         /* ids are 0 .. n_vocab-1 */
  int32_t bos_id;           /* -1 where the model has none */
  int32_t eos_id;           /* -1 where the model has none */
  int32_t eot_id;           /* end of a turn (<|im_end|>, <|eot_id|>); -1 if none known */
  int32_t add_bos;          /* 1 when QSP_TOKENIZE_ADD_SPECIAL prepends bos_id */
  int32_t add_eos;          /* 1 when QSP_TOKENIZE_ADD_SPECIAL appends eos_id */
  uint32_t max_piece_bytes; /* the longest piece of any token; a text buffer of
                               max_piece_bytes + 4 always holds what one
                               qsp_text_stream_push writes */
  const char* model;        /* tokenizer.ggml.model ("gpt2", "llama") */
  const char* pre;          /* tokenizer.ggml.pre ("qwen2", "llama-bpe"); "" if absent */
  const char* chat_template; /* tokenizer.chat_template; "" if absent */
  const char* unicode_version; /* of the Unicode data the splitting uses, e.g. "15.0.0" */
} qsp_tokenizer_info;
/* The strings stay valid until the tokenizer is destroyed. */

QSP_API void qsp_tokenizer_info_init(qsp_tokenizer_info* info);

/* Builds the tokenizer of an open file (vocabulary-only files too: no tensors
 * needed). The tokenizer copies what it needs: g may be closed afterwards.
 * On failure *out is set to NULL (when out is not NULL).
 * Errors: INVALID_ARGUMENT, BAD_FORMAT (token arrays missing or of different
 * lengths, a merge naming an unknown token, an out-of-range special id),
 * UNSUPPORTED (no tokenizer: tokenizer.ggml.model absent or "none"; a model or
 * pre-tokenizer qsp does not implement, named in the message), OUT_OF_MEMORY.
 * Thread-safe. */
QSP_API qsp_status qsp_tokenizer_create(const qsp_gguf* g, qsp_tokenizer** out);
QSP_API void qsp_tokenizer_destroy(qsp_tokenizer* t);
QSP_API qsp_status qsp_tokenizer_get_info(const qsp_tokenizer* t, qsp_tokenizer_info* info);

/* text (text_len bytes; text may be NULL when text_len is 0) to token ids.
 * *n_ids receives the number of ids. Errors: INVALID_ARGUMENT (NULL t or
 * n_ids, NULL text with text_len > 0, NULL ids with capacity > 0, an unknown
 * flag, a text of 4 GiB or more, also after U+FFFD replacement and NFC),
 * BUFFER_TOO_SMALL, OUT_OF_MEMORY. */
QSP_API qsp_status qsp_tokenize(const qsp_tokenizer* t, const char* text, uint64_t text_len, uint32_t flags,
                                int32_t* ids, uint64_t capacity, uint64_t* n_ids);

/* The text of one token on its own (its bytes: byte-level BPE and byte
 * fallback give raw bytes, which may be part of a UTF-8 sequence; SPM's
 * '\xe2\x96\x81' becomes a space). Errors: INVALID_ARGUMENT, OUT_OF_RANGE (an
 * id outside 0 .. n_vocab-1), BUFFER_TOO_SMALL. */
QSP_API qsp_status qsp_token_piece(const qsp_tokenizer* t, int32_t id, uint32_t flags, char* buf, uint64_t capacity,
                                   uint64_t* len);

/* ids to text: the pieces joined, as the reference decoders do (SPM drops the
 * dummy prefix space of the first piece after BOS / at the start). Invalid
 * UTF-8 that the ids spell is written as it is (raw bytes). Errors: as
 * qsp_token_piece. */
QSP_API qsp_status qsp_detokenize(const qsp_tokenizer* t, const int32_t* ids, uint64_t n_ids, uint32_t flags,
                                  char* buf, uint64_t capacity, uint64_t* len);

/* Streaming detokenization for generation: push one id at a time and get the
 * text that became complete; the bytes of a UTF-8 sequence that is not yet
 * complete are held back until a later token completes it. The text of all
 * pushes and the final flush equals qsp_detokenize of the same ids.
 * A stream refers to its tokenizer, which must outlive it. */
QSP_API qsp_status qsp_text_stream_create(const qsp_tokenizer* t, uint32_t flags, qsp_text_stream** out);
QSP_API void qsp_text_stream_destroy(qsp_text_stream* s);
QSP_API qsp_status qsp_text_stream_push(qsp_text_stream* s, int32_t id, char* buf, uint64_t capacity,
                                        uint64_t* len);
/* Writes what is held back (an incomplete sequence as its raw bytes) and
 * resets the stream to its start. */
QSP_API qsp_status qsp_text_stream_flush(qsp_text_stream* s, char* buf, uint64_t capacity, uint64_t* len);

#ifdef __cplusplus
}
#endif

#endif /* QSP_QSP_GGUF_H */
