/*
 * gguf_ref — the reference for the bindings' GGUF tests (issue 20).
 *
 * From a model file written by `qsp synth --preset tiny --type q4_0`, through
 * qsp_gguf.h only:
 *   OUT/gguf_logits.f32   the last token's logits (raw little-endian float32)
 *                         after prefilling TOKENS on the CPU backend, 2 threads
 *   OUT/gguf_info.txt     "field value" lines of qsp_gguf_info and the tensor
 *                         count / first tensor's name, type and shape
 *   OUT/gguf_top5.txt     what the bindings' README example prints for this
 *                         file: the five largest logits (lowest id first
 *                         on ties), "%d %.4f" each
 *   OUT/gguf_layout.txt   sizeof/offsetof of qsp_gguf.h's structs, as
 *                         common/ref_logits.c writes those of qsp.h
 *   OUT/bad_truncated.gguf  the first 1000 bytes of the file
 *   OUT/bad_magic.gguf      the file with its magic changed to "GGUX"
 *   OUT/bad_type.gguf       the file with one q4_0 tensor's type id changed to
 *                           iq4_nl (20: the same block size and byte size, so
 *                           the file is well-formed but qsp cannot run it)
 * With CLI_LOGITS (what `qsp prefill --logits-out` wrote for the same file and
 * tokens), the logits must be bit-identical to it; with QSP (the `qsp` tool),
 * what `qsp info MODEL.gguf` prints must agree with gguf_info.txt; else the
 * program fails.
 *
 * usage: gguf_ref MODEL.gguf OUT_DIR [CLI_LOGITS [QSP]]
 */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsp/qsp.h"
#include "qsp/qsp_gguf.h"

static const int32_t kTokens[] = {1, 7, 42, 100, 255, 0, 128, 64, 3, 200};
#define N_TOKENS (sizeof kTokens / sizeof kTokens[0])
#define GGML_TYPE_IQ4_NL 20

static int fail(const char* what, qsp_status st) {
  fprintf(stderr, "gguf_ref: %s: %s (%d): %s\n", what, qsp_status_string(st), st, qsp_gguf_last_error());
  return 1;
}

static unsigned char* slurp(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  unsigned char* p;
  long len;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return NULL;
  }
  p = (unsigned char*)malloc(len > 0 ? (size_t)len : 1);
  if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *n = (size_t)len;
  return p;
}

static int spill(const char* dir, const char* name, const void* p, size_t n) {
  char path[4096];
  FILE* f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "gguf_ref: cannot write %s\n", path);
    return 1;
  }
  return 0;
}

/* The directory entry of tensor `d` is: u64 name length, the name, u32 n_dims,
 * n_dims u64 dimensions, u32 type, u64 offset. Finds it by its name and
 * returns the file offset of its type field, or 0. */
static size_t type_field(const unsigned char* file, size_t n, const qsp_gguf_tensor_desc* d) {
  size_t len = strlen(d->name), i;
  for (i = 0; i + 8 + len + 4 <= n; ++i) {
    uint64_t l = 0;
    int k;
    for (k = 0; k < 8; ++k) l |= (uint64_t)file[i + k] << (8 * k);
    if (l == len && memcmp(file + i + 8, d->name, len) == 0) {
      size_t at = i + 8 + len + 4 + 8 * (size_t)d->n_dims;
      return at + 4 <= n ? at : 0;
    }
  }
  return 0;
}

#define SIZE(s) fprintf(f, "%s %u\n", #s, (unsigned)sizeof(s))
#define OFF(s, m) fprintf(f, "%s.%s %u\n", #s, #m, (unsigned)offsetof(s, m))

static int write_layout(const char* dir) {
  char path[4096];
  FILE* f;
  snprintf(path, sizeof path, "%s/gguf_layout.txt", dir);
  if (!(f = fopen(path, "w"))) return 1;
  SIZE(qsp_gguf_info);
  OFF(qsp_gguf_info, struct_size); OFF(qsp_gguf_info, version); OFF(qsp_gguf_info, file_size);
  OFF(qsp_gguf_info, tensor_count); OFF(qsp_gguf_info, kv_count); OFF(qsp_gguf_info, data_offset);
  OFF(qsp_gguf_info, weight_bytes); OFF(qsp_gguf_info, alignment); OFF(qsp_gguf_info, known_architecture);
  OFF(qsp_gguf_info, architecture); OFF(qsp_gguf_info, name); OFF(qsp_gguf_info, n_layers);
  OFF(qsp_gguf_info, hidden_size); OFF(qsp_gguf_info, intermediate_size); OFF(qsp_gguf_info, n_heads);
  OFF(qsp_gguf_info, n_kv_heads); OFF(qsp_gguf_info, head_dim); OFF(qsp_gguf_info, vocab_size);
  OFF(qsp_gguf_info, context_length); OFF(qsp_gguf_info, rms_eps); OFF(qsp_gguf_info, rope_theta);
  OFF(qsp_gguf_info, rope_style); OFF(qsp_gguf_info, qk_norm); OFF(qsp_gguf_info, tied_embeddings);
  OFF(qsp_gguf_info, file_type);
  SIZE(qsp_gguf_tensor_desc);
  OFF(qsp_gguf_tensor_desc, struct_size); OFF(qsp_gguf_tensor_desc, type); OFF(qsp_gguf_tensor_desc, n_dims);
  OFF(qsp_gguf_tensor_desc, reserved); OFF(qsp_gguf_tensor_desc, name); OFF(qsp_gguf_tensor_desc, type_name);
  OFF(qsp_gguf_tensor_desc, ne); OFF(qsp_gguf_tensor_desc, n_rows); OFF(qsp_gguf_tensor_desc, n_cols);
  OFF(qsp_gguf_tensor_desc, offset); OFF(qsp_gguf_tensor_desc, n_bytes); OFF(qsp_gguf_tensor_desc, handle);
  OFF(qsp_gguf_tensor_desc, data);
  return fclose(f) != 0;
}

/* Runs `qsp info MODEL` and checks that each expected line is in its output. */
static int check_qsp_info(const char* qsp, const char* model, const qsp_gguf_info* info) {
  char cmd[8192], want[8][256], out[16384];
  size_t n = 0, k;
  FILE* p;
  snprintf(cmd, sizeof cmd, "'%s' info '%s'", qsp, model);
  if (!(p = popen(cmd, "r"))) return 1;
  n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  if (pclose(p) != 0) {
    fprintf(stderr, "gguf_ref: %s failed:\n%s", cmd, out);
    return 1;
  }
  snprintf(want[0], sizeof want[0], "name:         %s\n", info->name);
  snprintf(want[1], sizeof want[1], "GGUF v%u, %llu tensors, %llu metadata keys, alignment %u\n", info->version,
           (unsigned long long)info->tensor_count, (unsigned long long)info->kv_count, info->alignment);
  snprintf(want[2], sizeof want[2], "architecture: %s\n", info->architecture);
  snprintf(want[3], sizeof want[3], "layers:       %u\n", info->n_layers);
  snprintf(want[4], sizeof want[4], "hidden:       %u (ffn %u)\n", info->hidden_size, info->intermediate_size);
  snprintf(want[5], sizeof want[5], "%u query heads, %u kv heads, head_dim %u", info->n_heads, info->n_kv_heads,
           info->head_dim);
  snprintf(want[6], sizeof want[6], "vocab:        %u\n", info->vocab_size);
  snprintf(want[7], sizeof want[7], "context:      %u tokens\n", info->context_length);
  for (k = 0; k < sizeof want / sizeof want[0]; ++k) {
    if (!strstr(out, want[k])) {
      fprintf(stderr, "gguf_ref: `qsp info` does not say \"%s\":\n%s", want[k], out);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  char path[4096];
  qsp_gguf* g = NULL;
  qsp_gguf_info info;
  qsp_gguf_tensor_desc d;
  qsp_context_params exec;
  qsp_context* ctx = NULL;
  const float* logits;
  uint32_t n_vocab = 0;
  unsigned char* file;
  size_t n_file = 0, at = 0;
  uint64_t i;
  qsp_status st;
  FILE* f;

  if (argc < 3) {
    fprintf(stderr, "usage: gguf_ref MODEL.gguf OUT_DIR [CLI_LOGITS]\n");
    return 2;
  }
  if (write_layout(argv[2])) return 1;
  if ((st = qsp_gguf_open(argv[1], &g)) != QSP_OK) return fail("open", st);
  qsp_gguf_info_init(&info);
  if ((st = qsp_gguf_get_info(g, &info)) != QSP_OK) return fail("info", st);
  qsp_gguf_tensor_desc_init(&d);
  if ((st = qsp_gguf_tensor_info(g, 0, &d)) != QSP_OK) return fail("tensor 0", st);

  snprintf(path, sizeof path, "%s/gguf_info.txt", argv[2]);
  if (!(f = fopen(path, "w"))) return 1;
  fprintf(f, "version %u\nfile_size %llu\ntensor_count %llu\nkv_count %llu\ndata_offset %llu\n"
             "weight_bytes %llu\nalignment %u\nknown_architecture %d\narchitecture %s\nname %s\n"
             "n_layers %u\nhidden_size %u\nintermediate_size %u\nn_heads %u\nn_kv_heads %u\nhead_dim %u\n"
             "vocab_size %u\ncontext_length %u\nrope_style %d\nqk_norm %d\ntied_embeddings %d\nfile_type %d\n"
             "tensor0_name %s\ntensor0_type %d\ntensor0_type_name %s\ntensor0_n_rows %llu\n"
             "tensor0_n_cols %llu\ntensor0_n_bytes %llu\n",
          info.version, (unsigned long long)info.file_size, (unsigned long long)info.tensor_count,
          (unsigned long long)info.kv_count, (unsigned long long)info.data_offset,
          (unsigned long long)info.weight_bytes, info.alignment, info.known_architecture,
          info.architecture[0] ? info.architecture : "-", info.name[0] ? info.name : "-", info.n_layers,
          info.hidden_size, info.intermediate_size, info.n_heads, info.n_kv_heads, info.head_dim,
          info.vocab_size, info.context_length, info.rope_style, info.qk_norm, info.tied_embeddings,
          info.file_type, d.name, d.type, d.type_name, (unsigned long long)d.n_rows,
          (unsigned long long)d.n_cols, (unsigned long long)d.n_bytes);
  if (fclose(f) != 0) return 1;
  if (argc > 4 && check_qsp_info(argv[4], argv[1], &info)) return 1;

  /* The bad files. */
  if (!(file = slurp(argv[1], &n_file)) || n_file < 2000) {
    fprintf(stderr, "gguf_ref: cannot read %s\n", argv[1]);
    return 1;
  }
  if (spill(argv[2], "bad_truncated.gguf", file, 1000)) return 1;
  for (i = 0; i < info.tensor_count && !at; ++i) {
    if ((st = qsp_gguf_tensor_info(g, i, &d)) != QSP_OK) return fail("tensor", st);
    if (d.type == QSP_DTYPE_Q4_0) at = type_field(file, n_file, &d);
  }
  if (!at) {
    fprintf(stderr, "gguf_ref: %s has no q4_0 tensor (write it with --type q4_0)\n", argv[1]);
    return 1;
  }
  file[at] = GGML_TYPE_IQ4_NL;
  if (spill(argv[2], "bad_type.gguf", file, n_file)) return 1;
  file[at] = QSP_DTYPE_Q4_0;
  memcpy(file, "GGUX", 4);
  if (spill(argv[2], "bad_magic.gguf", file, n_file)) return 1;
  free(file);
  qsp_gguf_close(g);

  /* The logits. */
  qsp_context_params_init(&exec);
  exec.backend = QSP_BACKEND_CPU;
  exec.n_threads = 2;
  if ((st = qsp_context_create_from_gguf(argv[1], &exec, &ctx)) != QSP_OK) return fail("create", st);
  if ((st = qsp_prefill(ctx, kTokens, (uint32_t)N_TOKENS)) != QSP_OK ||
      (st = qsp_get_logits(ctx, &logits, &n_vocab)) != QSP_OK) {
    fprintf(stderr, "gguf_ref: prefill: %s\n", qsp_context_last_error(ctx));
    return 1;
  }
  if (spill(argv[2], "gguf_logits.f32", logits, 4 * (size_t)n_vocab)) return 1;
  {
    int top[5], k, j;
    uint32_t t;
    for (k = 0; k < 5; ++k) top[k] = -1;
    for (t = 0; t < n_vocab; ++t) {
      for (k = 0; k < 5; ++k) {
        if (top[k] < 0 || logits[t] > logits[top[k]]) {
          for (j = 4; j > k; --j) top[j] = top[j - 1];
          top[k] = (int)t;
          break;
        }
      }
    }
    snprintf(path, sizeof path, "%s/gguf_top5.txt", argv[2]);
    if (!(f = fopen(path, "w"))) return 1;
    fprintf(f, "top 5 of %u logits after %u tokens:\n", n_vocab, (unsigned)N_TOKENS);
    for (k = 0; k < 5; ++k) fprintf(f, "%d %.4f\n", top[k], (double)logits[top[k]]);
    if (fclose(f) != 0) return 1;
  }
  if (argc > 3) {
    size_t n_cli = 0;
    unsigned char* cli = slurp(argv[3], &n_cli);
    if (!cli || n_cli != 4 * (size_t)n_vocab || memcmp(cli, logits, n_cli) != 0) {
      fprintf(stderr, "gguf_ref: the logits differ from those in %s\n", argv[3]);
      return 1;
    }
    free(cli);
  }
  qsp_context_destroy(ctx);
  printf("gguf_ref: %u logits, info and bad files in %s\n", n_vocab, argv[2]);
  return 0;
}
